package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

func TestAPI_Auth(t *testing.T) {
	b := setup(t)
	for name, header := range map[string]string{
		"missing":     "",
		"unknown key": "Bearer nobody-key",
		"empty key":   "Bearer ",
		"basic":       "Basic YWxpY2U6YWxpY2Uta2V5",
		"bare key":    "alice-key",
		"token":       "Token alice-key",
		"no space":    "Beareralice-key",
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
	t.Run("a cookie or a query parameter is not a key", func(t *testing.T) {
		for _, req := range []*http.Request{
			func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+missingID, nil)
				r.AddCookie(&http.Cookie{Name: "key", Value: "alice-key"})
				r.AddCookie(&http.Cookie{Name: "Authorization", Value: "Bearer alice-key"})
				return r
			}(),
			func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+missingID+"?key=alice-key&access_token=alice-key", nil)
				return r
			}(),
		} {
			wantError(t, send(t, b.client, req), http.StatusUnauthorized, "unauthorized")
		}
	})
}

func TestAPI_Submit(t *testing.T) {
	t.Run("bad requests", func(t *testing.T) {
		b := setup(t)
		huge := `{"targets":[{"url":"https://example.com/` + strings.Repeat("a", 257<<10) + `"}]}`
		for _, tc := range []struct {
			name, body string
			code       int
			msg        string
		}{
			{"not json", `{"targets":`, http.StatusBadRequest, "bad json: the JSON ends too soon"},
			{"empty body", ``, http.StatusBadRequest, "empty body"},
			{"blank body", " \n", http.StatusBadRequest, "empty body"},
			{"targets an object", `{"targets":{}}`, http.StatusBadRequest, `bad json: targets must be a list of {"url": …}`},
			{"a target a number", `{"targets":[1]}`, http.StatusBadRequest, `bad json: targets must be a list of {"url": …}`},
			{"url a number", `{"targets":[{"url":1}]}`, http.StatusBadRequest, "bad json: url must be a string"},
			{"options a list", `{"targets":[{"url":"https://example.com/","options":[]}]}`, http.StatusBadRequest, "bad json: options must be an object"},
			{"context a string", `{"targets":[{"url":"https://example.com/","options":{"context":"yes"}}]}`, http.StatusBadRequest, "bad json: option context must be true or false"},
			{"mode a number", `{"targets":[{"url":"https://example.com/","options":{"mode":1}}]}`, http.StatusBadRequest, "bad json: option mode must be a string"},
			{"syntax", `{"targets":[x]}`, http.StatusBadRequest, "bad json: invalid character 'x' looking for beginning of value (at byte 13)"},
			{"not an object", `[1,2]`, http.StatusBadRequest, "bad json: the body must be one JSON object"},
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
			{"port too high", targetsBody("https://example.com:99999/"), http.StatusUnprocessableEntity, "port not 1 to 65535"},
			{"port zero", targetsBody("https://example.com:0/"), http.StatusUnprocessableEntity, "port not 1 to 65535"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(tc.body)), tc.code, tc.msg)
			})
		}
		// No message speaks Go.
		for _, body := range []string{`{"targets":{}}`, `[1]`, `{"targets":[{"url":true}]}`, `{"targets":[{"url":"https://e.com/","options":{"recover":"x"}}]}`} {
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
			for _, goWord := range []string{"Go ", "struct", "engine.", "submitRequest", "unmarshal", "[]"} {
				if strings.Contains(r.json(t)["error"].(string), goWord) {
					t.Errorf("%s: error %q speaks Go (%q)", body, r.json(t)["error"], goWord)
				}
			}
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
		b := setup(t)
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
		b := setup(t)
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
	b := setup(t)
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
	b := setup(t)
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
	b := setup(t)
	live := b.submit(t, "alice-key", holdURL, "https://example.com/b")
	b.waitRunning(t, live)

	t.Run("another caller cannot", func(t *testing.T) {
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/"+live, "bob-key", nil), http.StatusNotFound, "job not found")
		if j, _, _ := b.runner.Status(live); j.Status != engine.StatusRunning {
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
	b := setup(t)
	r := b.do(t, http.MethodPut, "/v1/batch", "alice-key", nil)
	wantError(t, r, http.StatusMethodNotAllowed, "method not allowed")
	if r.header.Get("Allow") != "GET, POST" {
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
	b := setup(t)
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
	b := setup(t)
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
	b := setupWith(t, f.Fetch, httpapi.Options{})
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

// TestAPI_EveryFailureHasAHint: a failed target stored without a hint of
// its own (a plain error, busy past the retry window) is shown with one.
func TestAPI_EveryFailureHasAHint(t *testing.T) {
	var busy atomic.Int32
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(tg.URL, "/plain"):
			return engine.Result{}, errors.New("something broke")
		case strings.HasSuffix(tg.URL, "/busy"):
			busy.Add(1)
			return engine.Result{}, fmt.Errorf("%w: HTTP 429", engine.ErrRetryLater)
		}
		return engine.Result{}, &engine.TargetError{Msg: "HTTP 404 Not Found", Hint: "its own hint"}
	}
	b := setupWith(t, fetch, httpapi.Options{})
	id := b.submit(t, "alice-key", "https://example.com/plain", "https://example.com/busy", "https://example.com/own")
	// Once the busy target has come back busy (twice: the runner has
	// noted when the first came back before the second try begins), its
	// retry window passes.
	waitFor(t, 10*time.Second, "the busy target's second try", func() bool { return busy.Load() >= 2 })
	b.clock.Advance(engine.DefaultRetryFor + time.Minute)
	b.waitTerminal(t, id)
	var job struct {
		Targets []struct{ Status, Error, Hint string }
	}
	if err := json.Unmarshal(b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil).body, &job); err != nil {
		t.Fatal(err)
	}
	for i, tg := range job.Targets {
		if tg.Status != "failed" || tg.Hint == "" {
			t.Errorf("target %d: %s %q with hint %q", i, tg.Status, tg.Error, tg.Hint)
		}
	}
	if job.Targets[2].Hint != "its own hint" || !strings.Contains(job.Targets[1].Hint, "busy") {
		t.Errorf("hints %+v", job.Targets)
	}
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil)
	if h, _ := r.json(t)["hint"].(string); h == "" {
		t.Errorf("target 0 alone has no hint: %s", r.body)
	}
}

// TestAPI_Options: a target option the FetchFunc does not honour is
// refused at submit, 422, naming it; an honoured one passes Check first;
// nothing is accepted and then silently ignored.
func TestAPI_Options(t *testing.T) {
	yes := true
	t.Run("none honoured", func(t *testing.T) {
		b := setup(t)
		for name, o := range map[string]engine.Options{
			"mode": {Mode: "summary"}, "question": {Question: "why?"}, "pages": {Pages: "1-2"},
			"grep": {Grep: "x"}, "jq": {JQ: "."}, "context": {Context: &yes}, "recover": {Recover: true},
		} {
			body, _ := json.Marshal(map[string]any{"targets": []engine.Target{{URL: "https://example.com/", Options: o}}})
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", bytes.NewReader(body))
			wantError(t, r, http.StatusUnprocessableEntity, "target 0: option "+name+" is not supported by this server")
			if h := r.json(t)["hint"].(string); !strings.Contains(h, "belongs to a fetcher that supports it") || !strings.Contains(h, "honours none") {
				t.Errorf("%s: hint %q", name, h)
			}
		}
		// Options left empty are no options.
		b.submit(t, "alice-key", "https://example.com/plain")
		r := b.do(t, http.MethodPost, "/v1/batch", "bob-key", strings.NewReader(`{"targets":[{"url":"https://example.com/","options":{"mode":"","context":null,"recover":false}}]}`))
		wantCode(t, r, http.StatusAccepted)
	})

	t.Run("the fetcher's", func(t *testing.T) {
		f, err := fetcher.New(fetcher.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := setupWith(t, nil, httpapi.Options{Honoured: f.Honours(), Check: f.Check})
		body := func(o engine.Options) io.Reader {
			data, _ := json.Marshal(map[string]any{"targets": []engine.Target{{URL: "https://example.com/a"}, {URL: "https://example.com/b", Options: o}}})
			return bytes.NewReader(data)
		}
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{Mode: "summary"})), http.StatusUnprocessableEntity,
			"target 1: option mode is not supported by this server")
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{Grep: "a("}))
		wantError(t, r, http.StatusUnprocessableEntity, "target 1: grep: error parsing regexp: missing closing ): `a(`")
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{JQ: ".a |"})), http.StatusUnprocessableEntity, "target 1: jq: ")
		wantCode(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{Grep: "(?i)x", JQ: ".a"})), http.StatusAccepted)
	})
}

// TestAPI_NilBody: a request without a Body (nil: not read off a
// connection; a cluster's forwarded requests carry none) panics nowhere,
// on any route: a submit is answered 405 with a hint to submit to a node
// directly, the others as they are with a body.
func TestAPI_NilBody(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodPost, "/v1/batch", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/batch/" + id, http.StatusMethodNotAllowed},
		{http.MethodPut, "/v1/batch", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/batch", http.StatusOK},
		{http.MethodGet, "/v1/batch/" + id, http.StatusOK},
		{http.MethodGet, "/v1/batch/" + id + "/0", http.StatusOK},
		{http.MethodDelete, "/v1/batch/" + id, http.StatusConflict},
	} {
		req, err := http.NewRequest(tc.method, "http://siftbatch"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if req.Body != nil {
			t.Fatal("http.NewRequest set a Body")
		}
		req.Header.Set("Authorization", "Bearer alice-key")
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		r := response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		if tc.code == http.StatusOK {
			wantCode(t, r, tc.code)
		} else {
			wantError(t, r, tc.code, "")
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "http://siftbatch/v1/batch", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	if h := (response{body: rec.Body.Bytes()}).json(t)["hint"]; h != "submit to any node: POST is not forwarded" || rec.Header().Get("Allow") == "" {
		t.Fatalf("a submit without a body: %d %s, Allow %q", rec.Code, rec.Body, rec.Header().Get("Allow"))
	}
	if l := b.logs.String(); strings.Contains(l, "panicked") {
		t.Fatalf("a handler panicked:\n%s", l)
	}
}
