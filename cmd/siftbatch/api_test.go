package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/persistence"
)

// Test keys: alice and bob are standard callers, carol is restricted.
const testKeys = `# name key [restricted]
alice alice-key
bob   bob-key
carol carol-key restricted
`

// holdURL is a target whose fake fetch waits until the test releases it.
const holdURL = "https://example.com/hold"

// apiBundle is the API under test and what it runs on.
type apiBundle struct {
	url    string
	client *http.Client
	// handler is the API's handler, for calls without a network hop; api
	// is the API behind it.
	handler http.Handler
	api     *api
	runner  *engine.Runner
	store   *persistence.Store
	clock   *fakeClock
	logs    *syncBuffer
	// release lets every held fetch (holdURL) finish.
	release func()
}

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeFetch answers from the URL: ".../hold" waits for release (or the
// runner's close), ".../fail" fails with a hint, anything else succeeds.
func fakeFetch(release <-chan struct{}) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			select {
			case <-release:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		return engine.Result{Content: "page " + t.URL, Meta: map[string]any{"status": 200}}, nil
	}
}

// setupAPI starts the API on an in-memory store with a fake fetch: at most
// 4 targets a job, 1 live job per caller, 2 in all.
func setupAPI(t testing.TB) *apiBundle {
	t.Helper()
	return setupAPIWith(t, nil)
}

func setupAPIWith(t testing.TB, fetch engine.FetchFunc) *apiBundle {
	t.Helper()
	keys, err := parseKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	if fetch == nil {
		fetch = fakeFetch(release)
	}
	var once sync.Once
	b := &apiBundle{store: store, clock: &fakeClock{now: time.Now()}, logs: &syncBuffer{},
		release: func() { once.Do(func() { close(release) }) }}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, scrape := newMetrics()
	cfg := engine.Config{TargetsPerJob: 4, JobsPerCaller: 1, JobsTotal: 2, RetryWait: 10 * time.Millisecond, Hooks: m.Hooks(), Now: b.clock.Now}
	runner, err := engine.New(store, fetch, cfg, log)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	b.runner = runner
	a := &api{runner: runner, owners: store, keys: keys, metrics: m, scrape: scrape, log: log, targetsPerJob: cfg.TargetsPerJob}
	b.api, b.handler = a, a.handler()
	srv := httptest.NewServer(b.handler)
	b.url = srv.URL
	transport := &http.Transport{}
	b.client = &http.Client{Transport: transport, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		b.release()
		transport.CloseIdleConnections()
		srv.Close()
		runner.Close()
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// response is an answer, its body read.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", r.code, err, r.body)
	}
	return m
}

func (b *apiBundle) do(t testing.TB, method, path, key string, body io.Reader) response {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return send(t, b.client, req)
}

// send does req with c and reads the whole answer.
func send(t testing.TB, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

// submit posts a job of the URLs and returns its id, failing unless 202.
func (b *apiBundle) submit(t testing.TB, key string, urls ...string) string {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/batch", key, strings.NewReader(targetsBody(urls...)))
	if r.code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	return r.json(t)["id"].(string)
}

func targetsBody(urls ...string) string {
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	data, _ := json.Marshal(map[string]any{"targets": ts})
	return string(data)
}

// waitTerminal waits until the job is no longer queued or running.
func (b *apiBundle) waitTerminal(t *testing.T, id string) engine.Job {
	t.Helper()
	var job engine.Job
	waitFor(t, 10*time.Second, "job "+id+" to finish", func() bool {
		j, _, ok := b.runner.Status(id)
		job = j
		return ok && !persistence.IsLive(j.Status)
	})
	return job
}

// waitRunning waits until the job's first target is being fetched.
func (b *apiBundle) waitRunning(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 10*time.Second, "job "+id+" to run", func() bool {
		_, ts, ok := b.runner.Status(id)
		return ok && len(ts) > 0 && ts[0].Status == persistence.TargetRunning
	})
}

func wantCode(t *testing.T, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %d, want %d: %s", r.code, code, r.body)
	}
	if ct := r.header.Get("Content-Type"); code != http.StatusOK || strings.HasPrefix(ct, "application/json") {
		if !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("answer %d has Content-Type %q, want JSON", code, ct)
		}
	}
}

// wantError checks an error answer: its code, and a JSON error with a hint.
func wantError(t *testing.T, r response, code int, msg string) {
	t.Helper()
	wantCode(t, r, code)
	m := r.json(t)
	if e, _ := m["error"].(string); !strings.Contains(e, msg) {
		t.Fatalf("error %q does not contain %q", e, msg)
	}
	if h, _ := m["hint"].(string); h == "" {
		t.Fatalf("error answer without a hint: %s", r.body)
	}
}

func TestAPI_Auth(t *testing.T) {
	b := setupAPI(t)
	for name, header := range map[string]string{
		"missing":     "",
		"unknown key": "Bearer nobody-key",
		"empty key":   "Bearer ",
		"basic":       "Basic YWxpY2U6YWxpY2Uta2V5",
		"bare key":    "alice-key",
	} {
		t.Run(name, func(t *testing.T) {
			for _, rt := range []struct{ method, path string }{
				{http.MethodPost, "/v1/batch"},
				{http.MethodGet, "/v1/batch/0123456789abcdef0123456789abcdef"},
				{http.MethodGet, "/v1/batch/0123456789abcdef0123456789abcdef/0"},
				{http.MethodDelete, "/v1/batch/0123456789abcdef0123456789abcdef"},
				{http.MethodGet, "/v1/other"},
			} {
				req, _ := http.NewRequest(rt.method, b.url+rt.path, strings.NewReader(targetsBody("https://example.com/")))
				if header != "" {
					req.Header.Set("Authorization", header)
				}
				resp, err := b.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r := response{code: resp.StatusCode, header: resp.Header, body: body}
				wantError(t, r, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s: no WWW-Authenticate: Bearer", rt.method, rt.path)
				}
			}
		})
	}
	t.Run("scheme is case-insensitive", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/0123456789abcdef0123456789abcdef", nil)
		req.Header.Set("Authorization", "bearer alice-key")
		resp, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("got %d, want 404", resp.StatusCode)
		}
	})
	t.Run("healthz needs no key", func(t *testing.T) {
		wantCode(t, b.do(t, http.MethodGet, "/healthz", "", nil), http.StatusOK)
	})
}

func TestAPI_Submit(t *testing.T) {
	t.Run("bad requests", func(t *testing.T) {
		b := setupAPI(t)
		huge := `{"targets":[{"url":"https://example.com/` + strings.Repeat("a", 257<<10) + `"}]}`
		for _, tc := range []struct {
			name, body string
			code       int
			msg        string
		}{
			{"not json", `{"targets":`, http.StatusBadRequest, "bad json"},
			{"not an object", `[1,2]`, http.StatusBadRequest, "bad json"},
			{"wrong type", `{"targets":"https://example.com/"}`, http.StatusBadRequest, "bad json"},
			{"unknown field", `{"targets":[{"url":"https://example.com/"}],"priority":1}`, http.StatusBadRequest, "unknown field"},
			{"unknown target field", `{"targets":[{"url":"https://example.com/","method":"POST"}]}`, http.StatusBadRequest, "unknown field"},
			{"unknown option", `{"targets":[{"url":"https://example.com/","options":{"speed":"fast"}}]}`, http.StatusBadRequest, "unknown field"},
			{"two objects", `{"targets":[{"url":"https://example.com/"}]}{}`, http.StatusBadRequest, "after the JSON"},
			{"trailing garbage", `{"targets":[{"url":"https://example.com/"}]} x`, http.StatusBadRequest, "after the JSON"},
			{"257 KiB", huge, http.StatusRequestEntityTooLarge, "too large"},
			{"no targets", `{"targets":[]}`, http.StatusUnprocessableEntity, "no targets"},
			{"targets missing", `{}`, http.StatusUnprocessableEntity, "no targets"},
			{"too many targets", targetsBody("https://e.com/1", "https://e.com/2", "https://e.com/3", "https://e.com/4", "https://e.com/5"), http.StatusUnprocessableEntity, "too many targets"},
			{"empty url", `{"targets":[{"url":""}]}`, http.StatusUnprocessableEntity, "empty url"},
			{"relative url", targetsBody("/page"), http.StatusUnprocessableEntity, "not an absolute"},
			{"ftp url", targetsBody("ftp://example.com/file"), http.StatusUnprocessableEntity, "not an absolute"},
			{"no host", targetsBody("https:///path"), http.StatusUnprocessableEntity, "not an absolute"},
			{"unparsable url", targetsBody("http://[::1"), http.StatusUnprocessableEntity, "not an absolute"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(tc.body)), tc.code, tc.msg)
			})
		}
		// None of them made a job.
		n := 0
		if err := b.store.Jobs(func(persistence.JobRecord) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d jobs stored, want 0", n)
		}
	})

	t.Run("accepted and reused", func(t *testing.T) {
		b := setupAPI(t)
		body := targetsBody("https://example.com/a", "https://example.com/b")
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
		wantCode(t, r, http.StatusAccepted)
		m := r.json(t)
		id, _ := m["id"].(string)
		if len(id) != 32 || m["reused"] != false || m["status"] != "/v1/batch/"+id {
			t.Fatalf("answer %s", r.body)
		}
		if loc := r.header.Get("Location"); loc != "/v1/batch/"+id {
			t.Fatalf("Location %q", loc)
		}
		b.waitTerminal(t, id)
		r = b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
		wantCode(t, r, http.StatusAccepted)
		if m := r.json(t); m["id"] != id || m["reused"] != true {
			t.Fatalf("resubmit: %s, want id %s reused", r.body, id)
		}
		// Another caller with the same targets gets a job of its own.
		if other := b.submit(t, "bob-key", "https://example.com/a", "https://example.com/b"); other == id {
			t.Fatal("bob got alice's job")
		}
	})

	t.Run("429 with Retry-After", func(t *testing.T) {
		b := setupAPI(t)
		first := b.submit(t, "alice-key", holdURL)
		b.waitRunning(t, first)
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(targetsBody("https://example.com/other")))
		wantError(t, r, http.StatusTooManyRequests, "busy")
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra <= 0 {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		// bob's job is the second live job of two: carol meets the total cap.
		b.submit(t, "bob-key", holdURL)
		r = b.do(t, http.MethodPost, "/v1/batch", "carol-key", strings.NewReader(targetsBody("https://example.com/c")))
		wantError(t, r, http.StatusTooManyRequests, "jobs busy")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After on jobs busy")
		}
	})
}

func TestAPI_Get(t *testing.T) {
	b := setupAPI(t)
	id := b.submit(t, "alice-key", "https://example.com/a", "https://example.com/fail")
	b.waitTerminal(t, id)

	t.Run("summary without results", func(t *testing.T) {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		var job struct {
			ID           string           `json:"id"`
			Status       string           `json:"status"`
			TargetsTotal int              `json:"targets_total"`
			TargetsDone  int              `json:"targets_done"`
			CreatedAt    int64            `json:"created_at"`
			Targets      []map[string]any `json:"targets"`
		}
		if err := json.Unmarshal(r.body, &job); err != nil {
			t.Fatal(err)
		}
		if job.ID != id || job.Status != "partial" || job.TargetsTotal != 2 || job.TargetsDone != 2 || job.CreatedAt == 0 || len(job.Targets) != 2 {
			t.Fatalf("job %s", r.body)
		}
		t0, t1 := job.Targets[0], job.Targets[1]
		if t0["idx"] != 0.0 || t0["url"] != "https://example.com/a" || t0["status"] != "done" {
			t.Fatalf("target 0 %v", t0)
		}
		if t1["status"] != "failed" || t1["error"] != "HTTP 404 Not Found" || t1["hint"] != "check the URL" {
			t.Fatalf("target 1 %v", t1)
		}
		for _, tg := range job.Targets {
			if _, ok := tg["result"]; ok {
				t.Fatalf("result without ?results=1: %s", r.body)
			}
		}
	})

	t.Run("with results", func(t *testing.T) {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1", "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		var job struct {
			Targets []struct {
				Status string         `json:"status"`
				Result *engine.Result `json:"result"`
			} `json:"targets"`
		}
		if err := json.Unmarshal(r.body, &job); err != nil {
			t.Fatal(err)
		}
		if job.Targets[0].Result == nil || job.Targets[0].Result.Content != "page https://example.com/a" {
			t.Fatalf("no result: %s", r.body)
		}
		if job.Targets[1].Result != nil {
			t.Fatalf("a failed target has a result: %s", r.body)
		}
	})

	t.Run("one target", func(t *testing.T) {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		m := r.json(t)
		res, _ := m["result"].(map[string]any)
		if m["idx"] != 0.0 || res["content"] != "page https://example.com/a" {
			t.Fatalf("target %s", r.body)
		}
		r = b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if m := r.json(t); m["status"] != "failed" || m["hint"] != "check the URL" {
			t.Fatalf("target %s", r.body)
		}
		for _, idx := range []string{"2", "-1", "99999999999999999999", "x"} {
			wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/"+idx, "alice-key", nil), http.StatusNotFound, "target not found")
		}
	})

	t.Run("another caller's job is missing", func(t *testing.T) {
		mine := b.do(t, http.MethodGet, "/v1/batch/0123456789abcdef0123456789abcdef", "bob-key", nil)
		wantError(t, mine, http.StatusNotFound, "job not found")
		for _, path := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "?results=1", "/v1/batch/" + id + "/0"} {
			r := b.do(t, http.MethodGet, path, "bob-key", nil)
			wantError(t, r, http.StatusNotFound, "job not found")
			if !bytes.Equal(r.body, mine.body) {
				t.Fatalf("not-yours %s differs from missing %s", r.body, mine.body)
			}
		}
		wantError(t, b.do(t, http.MethodGet, "/v1/batch/not-an-id", "alice-key", nil), http.StatusNotFound, "job not found")
		wantError(t, b.do(t, http.MethodGet, "/v1/batch/not-an-id/0", "alice-key", nil), http.StatusNotFound, "job not found")
	})
}

func TestAPI_GetTouches(t *testing.T) {
	b := setupAPI(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	lease := func() int64 {
		j, err := b.store.Job(id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Lease
	}
	before := lease()
	b.clock.Advance(time.Hour)
	// Another caller's read does not touch.
	b.do(t, http.MethodGet, "/v1/batch/"+id, "bob-key", nil)
	if got := lease(); got != before {
		t.Fatalf("bob's read moved the lease by %v", time.Duration(got-before))
	}
	wantCode(t, b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil), http.StatusOK)
	waitFor(t, 5*time.Second, "the lease to move", func() bool { return lease() >= b.clock.Now().UnixNano() })
	b.clock.Advance(time.Hour)
	wantCode(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil), http.StatusOK)
	waitFor(t, 5*time.Second, "the lease to move again", func() bool { return lease() >= b.clock.Now().UnixNano() })
}

func TestAPI_Cancel(t *testing.T) {
	b := setupAPI(t)
	live := b.submit(t, "alice-key", holdURL, "https://example.com/b")
	b.waitRunning(t, live)

	t.Run("another caller cannot", func(t *testing.T) {
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/"+live, "bob-key", nil), http.StatusNotFound, "job not found")
		if j, _, _ := b.runner.Status(live); j.Status != persistence.StatusRunning {
			t.Fatalf("bob's DELETE left the job %s", j.Status)
		}
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/0123456789abcdef0123456789abcdef", "alice-key", nil), http.StatusNotFound, "job not found")
	})

	t.Run("owner cancels", func(t *testing.T) {
		r := b.do(t, http.MethodDelete, "/v1/batch/"+live, "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if m := r.json(t); m["cancelled"] != true {
			t.Fatalf("answer %s", r.body)
		}
		r = b.do(t, http.MethodGet, "/v1/batch/"+live, "alice-key", nil)
		if m := r.json(t); m["status"] != "cancelled" {
			t.Fatalf("after cancel: %s", r.body)
		}
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/"+live, "alice-key", nil), http.StatusConflict, "already finished")
	})

	t.Run("finished job", func(t *testing.T) {
		b.release() // the cancelled job's fetch in flight finishes; the worker moves on
		id := b.submit(t, "bob-key", "https://example.com/done")
		b.waitTerminal(t, id)
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/"+id, "bob-key", nil), http.StatusConflict, "already finished")
	})
}

func TestAPI_OtherRoutes(t *testing.T) {
	b := setupAPI(t)
	r := b.do(t, http.MethodPut, "/v1/batch", "alice-key", nil)
	wantError(t, r, http.StatusMethodNotAllowed, "method not allowed")
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	wantError(t, b.do(t, http.MethodPost, "/v1/batch/0123456789abcdef0123456789abcdef", "alice-key", nil), http.StatusMethodNotAllowed, "method not allowed")
	wantError(t, b.do(t, http.MethodGet, "/v1/jobs", "alice-key", nil), http.StatusNotFound, "not found")
}

// metricValue returns the value of the series line that starts with
// series in a scrape, or -1.
func metricValue(t *testing.T, scrape, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAPI_Metrics(t *testing.T) {
	b := setupAPI(t)
	scrape := func() string {
		r := b.do(t, http.MethodGet, "/metrics", "", nil)
		if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
			t.Fatalf("metrics: %d %s", r.code, r.header.Get("Content-Type"))
		}
		return string(r.body)
	}
	before := scrape()
	for _, series := range []string{
		`siftbatch_jobs_total{outcome="created"}`,
		`siftbatch_jobs_total{outcome="partial"}`,
		`siftbatch_targets_total{result="done"}`,
		`siftbatch_targets_total{result="failed"}`,
		`siftbatch_job_seconds_count`,
		`siftbatch_target_seconds_count`,
		`siftbatch_live_jobs`,
		`siftbatch_inflight_targets`,
	} {
		if v := metricValue(t, before, series); v != 0 {
			t.Errorf("before: %s = %v, want 0", series, v)
		}
	}

	id := b.submit(t, "alice-key", "https://example.com/a", "https://example.com/fail")
	b.waitTerminal(t, id)
	b.submit(t, "alice-key", "https://example.com/a", "https://example.com/fail") // reused
	b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil)
	b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil)
	b.do(t, http.MethodGet, "/v1/batch/"+id, "bob-key", nil)
	b.do(t, http.MethodGet, "/v1/batch/"+id, "", nil)

	var after string
	waitFor(t, 5*time.Second, "the job metrics", func() bool {
		after = scrape()
		// The job actor observes the job's end; the supervisor, on its own
		// goroutine, then stops counting it live.
		return metricValue(t, after, `siftbatch_job_seconds_count`) == 1 &&
			metricValue(t, after, `siftbatch_live_jobs`) == 0
	})
	for series, want := range map[string]float64{
		`siftbatch_jobs_total{outcome="created"}`:                                    1,
		`siftbatch_jobs_total{outcome="reused"}`:                                     1,
		`siftbatch_jobs_total{outcome="partial"}`:                                    1,
		`siftbatch_targets_total{result="done"}`:                                     1,
		`siftbatch_targets_total{result="failed"}`:                                   1,
		`siftbatch_target_seconds_count`:                                             2,
		`siftbatch_live_jobs`:                                                        0,
		`siftbatch_http_requests_total{code="202",route="POST /v1/batch"}`:           2,
		`siftbatch_http_requests_total{code="200",route="GET /v1/batch/{id}"}`:       1,
		`siftbatch_http_requests_total{code="404",route="GET /v1/batch/{id}"}`:       1,
		`siftbatch_http_requests_total{code="401",route="GET /v1/batch/{id}"}`:       1,
		`siftbatch_http_requests_total{code="200",route="GET /v1/batch/{id}/{idx}"}`: 1,
	} {
		if got := metricValue(t, after, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if metricValue(t, after, `siftbatch_result_bytes_total`) <= 0 {
		t.Error("no result bytes counted")
	}
	if strings.Contains(after, id) || strings.Contains(after, "alice-key") || strings.Contains(after, "example.com") {
		t.Error("the scrape names a job id, a key or a host")
	}
}

func TestAPI_LogsCarryNoSecrets(t *testing.T) {
	b := setupAPI(t)
	id := b.submit(t, "alice-key", "https://secret-host.example/a", "https://secret-host.example/fail")
	b.waitTerminal(t, id)
	b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1", "alice-key", nil)
	b.do(t, http.MethodGet, "/v1/batch/"+id, "wrong-key", nil)
	logs := b.logs.String()
	if !strings.Contains(logs, id) {
		t.Fatalf("the job id is not logged:\n%s", logs)
	}
	for _, secret := range []string{"secret-host", "alice-key", "wrong-key", "https://"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log carries %q:\n%s", secret, logs)
		}
	}
}

// TestAPI_RealFetch runs the API on the real fetcher against a loopback
// server: a page, a 404 and a page busy twice.
func TestAPI_RealFetch(t *testing.T) {
	var mu sync.Mutex
	busy := 0
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			fmt.Fprint(w, "a real page")
		case "/busy":
			mu.Lock()
			busy++
			n := busy
			mu.Unlock()
			if n <= 2 {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			fmt.Fprint(w, "no longer busy")
		default:
			http.NotFound(w, r)
		}
	}))
	defer site.Close()
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := setupAPIWith(t, f.Fetch)
	id := b.submit(t, "alice-key", site.URL+"/page", site.URL+"/missing", site.URL+"/busy")
	b.waitTerminal(t, id)
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	var job struct {
		Status  string `json:"status"`
		Targets []struct {
			Status string         `json:"status"`
			Error  string         `json:"error"`
			Hint   string         `json:"hint"`
			Result *engine.Result `json:"result"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(r.body, &job); err != nil {
		t.Fatal(err)
	}
	ts := job.Targets
	if job.Status != "partial" || len(ts) != 3 {
		t.Fatalf("job %s", r.body)
	}
	if ts[0].Status != "done" || ts[0].Result == nil || ts[0].Result.Content != "a real page" {
		t.Errorf("page: %s", r.body)
	}
	if ts[1].Status != "failed" || ts[1].Error != "HTTP 404 Not Found" || ts[1].Hint == "" {
		t.Errorf("missing: %s", r.body)
	}
	if ts[2].Status != "done" || ts[2].Result == nil || ts[2].Result.Content != "no longer busy" {
		t.Errorf("busy: %s", r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if busy != 3 {
		t.Errorf("busy page fetched %d times, want 3", busy)
	}
}
