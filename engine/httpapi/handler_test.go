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
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
)

func TestAPI_Get(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	lease := func() int64 {
		j, err := b.Store.Job(id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Lease
	}
	before := lease()
	b.Clock.Advance(time.Hour)
	// Another caller's read does not touch.
	b.do(t, http.MethodGet, "/v1/batch/"+id, "bob-key", nil)
	if got := lease(); got != before {
		t.Fatalf("bob's read moved the lease by %v", time.Duration(got-before))
	}
	wantCode(t, b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil), http.StatusOK)
	testkit.WaitFor(t, "the lease to move", func() bool { return lease() >= b.Clock.Now().UnixNano() })
	b.Clock.Advance(time.Hour)
	wantCode(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil), http.StatusOK)
	testkit.WaitFor(t, "the lease to move again", func() bool { return lease() >= b.Clock.Now().UnixNano() })
}

func TestAPI_Cancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	live := b.submit(t, "alice-key", holdURL, "https://example.com/b")
	b.waitRunning(t, live)

	t.Run("another caller cannot", func(t *testing.T) {
		wantError(t, b.do(t, http.MethodDelete, "/v1/batch/"+live, "bob-key", nil), http.StatusNotFound, "job not found")
		if j, _, _ := b.Runner.Status(live); j.Status != engine.StatusRunning {
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
	t.Parallel()
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
	t.Parallel()
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
	testkit.WaitFor(t, "the job metrics", func() bool {
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

// TestAPI_MetricsRouteLabelsFixed: whatever path, method and key a
// request has, the metrics label it with one of the fixed routes, and no
// series holds the request's input (an id, an injected label, a long
// path).
func TestAPI_MetricsRouteLabelsFixed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/m")
	b.waitTerminal(t, id)
	paths := []string{
		"/v1/batch/" + id, "/v1/batch/" + id + "/0", "/v1/batch/" + id + "/9999", "/v1/batch/" + id + "/../x",
		"/v1/batch/" + missingID, "/v1/batch/%22%7D%0Aevil%7Bx%3D%22", "/v1/batch/a/b/c/d", "/v1/" + id,
		"/v1/batch/" + strings.Repeat("z", 3000), "/v1/batch?id=" + id, "/v1/batch/" + id + "?wait=1ms",
	}
	for _, p := range paths {
		for _, key := range []string{"alice-key", "bob-key", ""} {
			for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPut, http.MethodPatch} {
				b.do(t, m, p, key, nil)
			}
		}
	}
	scrape := b.do(t, http.MethodGet, "/metrics", "", nil)
	if scrape.code != http.StatusOK {
		t.Fatalf("/metrics: %d", scrape.code)
	}
	routes := map[string]bool{}
	re := regexp.MustCompile(`route="([^"]*)"`)
	for _, line := range strings.Split(string(scrape.body), "\n") {
		if strings.Contains(line, id) || strings.Contains(line, missingID) || strings.Contains(line, "evil") || strings.Contains(line, "zzzz") {
			t.Errorf("metric line holds request input: %.200s", line)
		}
		for _, m := range re.FindAllStringSubmatch(line, -1) {
			routes[m[1]] = true
		}
	}
	fixed := map[string]bool{"POST /v1/batch": true, "GET /v1/batch": true, "GET /v1/batch/{id}": true, "GET /v1/batch/{id}/{idx}": true,
		"DELETE /v1/batch/{id}": true, "/v1/": true, "GET /v1/openapi.json": true}
	for r := range routes {
		if !fixed[r] {
			t.Errorf("route label %q is not one of the fixed ones", r)
		}
	}
	if len(routes) == 0 {
		t.Fatalf("no route labels in:\n%s", scrape.body)
	}
}

func TestAPI_LogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://secret-host.example/a", "https://secret-host.example/fail")
	b.waitTerminal(t, id)
	b.do(t, http.MethodGet, "/v1/batch/"+id+"?results=1", "alice-key", nil)
	b.do(t, http.MethodGet, "/v1/batch/"+id, "wrong-key", nil)
	logs := b.Logs.String()
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
	t.Parallel()
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
	t.Parallel()
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
	testkit.WaitFor(t, "the busy target's second try", func() bool { return busy.Load() >= 2 })
	b.Clock.Advance(engine.DefaultRetryFor + time.Minute)
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

// TestAPI_NilBody: a request without a Body (nil: not read off a
// connection; a cluster's forwarded requests carry none) panics nowhere,
// on any route: a submit is answered 405 with a hint to submit to a node
// directly, the others as they are with a body.
func TestAPI_NilBody(t *testing.T) {
	t.Parallel()
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
	if l := b.Logs.String(); strings.Contains(l, "panicked") {
		t.Fatalf("a handler panicked:\n%s", l)
	}
}

// TestAPI_QueryParameters: each route takes its own query parameters,
// once each, in their spellings: an unknown parameter (a typo too), one
// given twice, a malformed value or query is 400 naming it, and does
// nothing; results is 1, true, 0 or false.
func TestAPI_QueryParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	job := "/v1/batch/" + id
	for _, tc := range []struct {
		method, path string
		code         int
		msg          string // the error's text; for a 200, whether results are in ("result" or "")
	}{
		{http.MethodGet, job + "?results=1", 200, "result"},
		{http.MethodGet, job + "?results=true", 200, "result"},
		{http.MethodGet, job + "?results=0", 200, ""},
		{http.MethodGet, job + "?results=false", 200, ""},
		{http.MethodGet, job + "?results=1&wait=0s", 200, "result"},
		{http.MethodGet, job + "?results=yes", 400, "bad results"},
		{http.MethodGet, job + "?results", 400, "bad results"},
		{http.MethodGet, job + "?results=", 400, "bad results"},
		{http.MethodGet, job + "?results=TRUE", 400, "bad results"},
		{http.MethodGet, job + "?result=1", 400, `unknown parameter "result"`},
		{http.MethodGet, job + "?results=1&results=0", 400, `parameter "results" given more than once`},
		{http.MethodGet, job + "?wait=", 400, "bad wait"},
		{http.MethodGet, job + "?wait=1s&wait=2s", 400, `parameter "wait" given more than once`},
		{http.MethodGet, job + "?%zz", 400, "bad query"},
		{http.MethodGet, job + "/0?results=1", 400, `unknown parameter "results"`},
		{http.MethodGet, job + "/0?", 200, "result"},
		{http.MethodDelete, job + "?force=1", 400, `unknown parameter "force"`},
		{http.MethodGet, "/v1/batch?color=red", 400, `unknown parameter "color"`},
		{http.MethodGet, "/v1/batch?status=", 400, "bad status"},
		{http.MethodGet, "/v1/batch?limit=", 400, "bad limit"},
		{http.MethodGet, "/v1/batch?limit=1&limit=2", 400, `parameter "limit" given more than once`},
		{http.MethodGet, "/v1/batch?cursor=", 200, ""},
		{http.MethodGet, "/v1/batch?status=done&limit=5", 200, ""},
		{http.MethodGet, "/v1/openapi.json?v=2", 400, `unknown parameter "v"`},
		{http.MethodPost, "/v1/batch?priority=high", 400, `unknown parameter "priority"`},
	} {
		t.Run(tc.method+" "+strings.TrimPrefix(tc.path, job), func(t *testing.T) {
			var body *strings.Reader
			if tc.method == http.MethodPost {
				body = strings.NewReader(targetsBody("https://example.com/other"))
			}
			var r response
			if body != nil {
				r = b.do(t, tc.method, tc.path, "alice-key", body)
			} else {
				r = b.do(t, tc.method, tc.path, "alice-key", nil)
			}
			if tc.code != http.StatusOK {
				wantError(t, r, tc.code, tc.msg)
				return
			}
			wantCode(t, r, http.StatusOK)
			if got := bytes.Contains(r.body, []byte(`"result":`)); got != (tc.msg == "result") {
				t.Fatalf("results in the answer: %v, want %v: %.300s", got, tc.msg == "result", r.body)
			}
		})
	}
	// The refused DELETE cancelled nothing and the refused POST created
	// nothing.
	list := b.do(t, http.MethodGet, "/v1/batch", "alice-key", nil)
	wantCode(t, list, http.StatusOK)
	if jobs := list.json(t)["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["status"] != engine.StatusDone {
		t.Fatalf("jobs after refused requests: %s", list.body)
	}
}

// TestAPI_TrailingSlash: a path with a trailing slash is the resource
// without it (never a 405 for a method the resource takes); a 405 names
// the methods the resource takes; a path of no resource is 404, slash or
// not, and so is one with a "." or empty segment (never a redirect);
// 202's Location is the job's path without a slash.
func TestAPI_TrailingSlash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	live := b.submit(t, "bob-key", holdURL)
	b.waitRunning(t, live)
	for _, tc := range []struct {
		method, path, key string
		code              int
		allow             string
	}{
		{http.MethodGet, "/v1/batch/", "alice-key", 200, ""},
		{http.MethodGet, "/v1/batch/" + id + "/", "alice-key", 200, ""},
		{http.MethodGet, "/v1/batch/" + id + "/0/", "alice-key", 200, ""},
		{http.MethodGet, "/v1/batch/" + id + "/?results=1", "alice-key", 200, ""},
		{http.MethodGet, "/v1/openapi.json/", "", 200, ""},
		{http.MethodDelete, "/v1/batch/" + live + "/", "bob-key", 200, ""},
		{http.MethodDelete, "/v1/batch/" + id + "/", "alice-key", 409, ""},
		{http.MethodGet, "/v1/batch/" + id + "/1/", "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch/" + id + "/0/x/", "alice-key", 404, ""},
		{http.MethodGet, "/v1/jobs/", "alice-key", 404, ""},
		{http.MethodGet, "/v1/", "alice-key", 404, ""},
		{http.MethodPut, "/v1/batch/", "alice-key", 405, "GET, POST"},
		{http.MethodPut, "/v1/batch", "alice-key", 405, "GET, POST"},
		{http.MethodPost, "/v1/batch/" + id + "/", "alice-key", 405, "GET, DELETE"},
		{http.MethodDelete, "/v1/batch/" + id + "/0/", "alice-key", 405, "GET"},
		{http.MethodPost, "/v1/openapi.json", "alice-key", 405, "GET"},
		// Dot and empty segments name no resource: 404 (401 without a
		// key), never ServeMux's redirect to the cleaned path.
		{http.MethodGet, "/v1/batch/.", "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch/..", "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch/./" + id, "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch/" + id + "/.", "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch/" + id + "/./0", "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch//" + id, "alice-key", 404, ""},
		{http.MethodGet, "/v1/batch/%2e/" + id, "alice-key", 404, ""},
		{http.MethodDelete, "/v1/batch/./" + live, "bob-key", 404, ""},
		{http.MethodGet, "/v1/batch/./" + id, "", 401, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := b.do(t, tc.method, tc.path, tc.key, nil)
			wantCode(t, r, tc.code)
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Fatalf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
	// The same answers with and without the slash.
	for _, p := range []string{"/v1/batch", "/v1/batch/" + id, "/v1/batch/" + id + "/0"} {
		with, without := b.do(t, http.MethodGet, p+"/", "alice-key", nil), b.do(t, http.MethodGet, p, "alice-key", nil)
		if !bytes.Equal(with.body, without.body) {
			t.Errorf("%s/ answers %s; %s answers %s", p, with.body, p, without.body)
		}
	}
	// A submit to /v1/batch/ is a submit; its Location has no slash.
	r := b.do(t, http.MethodPost, "/v1/batch/", "carol-key", strings.NewReader(targetsBody("https://example.com/b")))
	wantCode(t, r, http.StatusAccepted)
	newID, _ := r.json(t)["id"].(string)
	if loc := r.header.Get("Location"); newID == "" || loc != "/v1/batch/"+newID {
		t.Fatalf("Location %q for %s", loc, r.body)
	}
}

// TestAPI_EdgeRequests sends requests the other tests do not: methods the
// document does not list, malformed path segments and query values, a
// top-level field in another case, a body of another type. Each answers
// the status below with the API's JSON error, and each exchange conforms
// to the OpenAPI document (the bundle's check).
func TestAPI_EdgeRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	for _, tc := range []struct {
		method, path, key, body string
		code                    int
	}{
		{http.MethodGet, "/v1/openapi.json?x=1", "", "", 400},
		{http.MethodGet, "/v1/openapi.json", "nobody-key", "", 200},
		{http.MethodGet, "/v1/batch/" + id + "/abc", "alice-key", "", 404},
		{http.MethodGet, "/v1/batch/" + id + "/-1", "alice-key", "", 404},
		{http.MethodGet, "/v1/batch/" + id + "/99999999999999999999", "alice-key", "", 404},
		{http.MethodGet, "/v1/batch/" + id + "/0?results=1", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch/" + id + "?wait=-1s", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch/" + id + "?wait=9999h", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch/" + id + "?wait=", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch/" + id + "?results=TRUE", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch/" + id + "?results=1;wait=1s", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch?limit=0", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch?limit=101", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch?limit=-1", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch?cursor=%ff%fe", "alice-key", "", 400},
		{http.MethodGet, "/v1/batch?caller=bob", "alice-key", "", 403},
		{http.MethodDelete, "/v1/batch/" + missingID, "alice-key", "", 404},
		{http.MethodDelete, "/v1/batch/" + id + "?x=1", "alice-key", "", 400},
		{http.MethodPost, "/v1/batch?x=1", "alice-key", targetsBody("https://example.com/q"), 400},
		{http.MethodPost, "/v1/batch", "alice-key", `{"TARGETS":[{"url":"https://example.com/u"}]}`, 400},
		{http.MethodPost, "/v1/batch", "alice-key", `{"targets":[{"URL":"https://example.com/u"}]}`, 400},
		{http.MethodPost, "/v1/batch", "alice-key", `[{"url":"https://example.com/u"}]`, 400},
		{http.MethodPost, "/v1/batch", "alice-key", `{"targets":[{"url":"https://example.com/u"}]} {}`, 400},
		{http.MethodPost, "/v1/batch", "alice-key", `{"targets":null}`, 422},
		{http.MethodPost, "/v1/batch", "alice-key", `{"targets":[{"url":"https://example.com/u","options":null}]}`, 202},
		{http.MethodPatch, "/v1/batch/" + id, "alice-key", "", 405},
		{http.MethodHead, "/v1/batch/" + id, "alice-key", "", 200},
		{http.MethodHead, "/v1/openapi.json", "", "", 200},
		{http.MethodOptions, "/v1/batch", "alice-key", "", 405},
		{http.MethodPost, "/v1/batch", "alice-key", `{"targets":[{"url":"https://example.com/` + strings.Repeat("p", 300<<10) + `"}]}`, 413},
		{http.MethodGet, "/v1/batch", "", "", 401},
		{http.MethodGet, "/v1/batch/" + id, "nobody-key", "", 401},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.body, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			r := b.do(t, tc.method, tc.path, tc.key, body)
			wantCode(t, r, tc.code)
			if tc.code >= 400 {
				if m := r.json(t); m["error"] == "" || m["hint"] == "" {
					t.Fatalf("error answer %s", r.body)
				}
			}
		})
	}
}

// TestAPI_ClosedRunnerAnswersConform closes the runner under the API and
// sends every route: a submit is 503 "shutting down"; the reads of a
// stored job still answer (the store stays readable); a 503 says when to
// retry (Retry-After); no answer is a 500,
// each error has the API's shape with a hint, and each conforms to the
// OpenAPI document.
func TestAPI_ClosedRunnerAnswersConform(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, id)
	b.Runner.Close()
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/batch", targetsBody("https://example.com/closed")},
		{http.MethodGet, "/v1/batch", ""},
		{http.MethodGet, "/v1/batch/" + id, ""},
		{http.MethodGet, "/v1/batch/" + id + "?results=1", ""},
		{http.MethodGet, "/v1/batch/" + id + "/0", ""},
		{http.MethodDelete, "/v1/batch/" + id, ""},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		r := b.do(t, tc.method, tc.path, "alice-key", body)
		if r.code >= 500 && r.code != http.StatusServiceUnavailable || tc.method == http.MethodPost && r.code != http.StatusServiceUnavailable {
			t.Errorf("%s %s on a closed runner: %d %s", tc.method, tc.path, r.code, r.body)
			continue
		}
		if m := r.json(t); r.code >= 400 && (m["error"] == "" || m["hint"] == "") {
			t.Errorf("%s %s: %s", tc.method, tc.path, r.body)
		}
		if r.code == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 503 without Retry-After", tc.method, tc.path)
		}
	}
}
