package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/metrics"
)

// testBundle is what a metrics test works with besides the Metrics: the
// registry it is registered on, and a scrape of it.
type testBundle struct {
	reg *prometheus.Registry
}

// setup registers a new Metrics on a registry of its own.
func setup(t *testing.T) (*metrics.Metrics, *testBundle) {
	t.Helper()
	m := metrics.New()
	b := &testBundle{reg: prometheus.NewRegistry()}
	if err := b.reg.Register(m); err != nil {
		t.Fatal(err)
	}
	return m, b
}

// scrape returns the registry's exposition, as Prometheus reads it.
func (b *testBundle) scrape(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(b.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// value returns the value of the series line that is series in a scrape,
// or -1 if there is none.
func value(t *testing.T, scrape, series string) float64 {
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

func wantValues(t *testing.T, scrape string, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		if got := value(t, scrape, series); got != w {
			t.Errorf("%s = %v, want %v", series, got, w)
		}
	}
}

// TestMetrics_Hooks: every hook feeds its series, and every job outcome
// and target result is there at zero from the start.
func TestMetrics_Hooks(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	zero := map[string]float64{
		`siftbatch_result_bytes_total`:   0,
		`siftbatch_target_seconds_count`: 0,
		`siftbatch_job_seconds_count`:    0,
		`siftbatch_live_jobs`:            0,
		`siftbatch_inflight_targets`:     0,
		`siftbatch_hook_panics_total`:    0,
	}
	for _, o := range []string{"created", "reused", "done", "partial", "failed", "cancelled"} {
		zero[`siftbatch_jobs_total{outcome="`+o+`"}`] = 0
	}
	for _, r := range []string{"done", "failed", "busy"} {
		zero[`siftbatch_targets_total{result="`+r+`"}`] = 0
	}
	wantValues(t, b.scrape(t), zero)

	h := m.Hooks()
	h.Job("created")
	h.Job("created")
	h.Job("partial")
	h.Target(nil, 2*time.Second, 100)
	h.Target(&engine.TargetError{Msg: "HTTP 404"}, time.Second, 0)
	h.Target(fmt.Errorf("%w: HTTP 429", engine.ErrRetryLater), time.Second, 0)
	h.JobSeconds(3 * time.Second)
	h.Depth(4)
	h.Inflight(2)
	wantValues(t, b.scrape(t), map[string]float64{
		`siftbatch_jobs_total{outcome="created"}`:  2,
		`siftbatch_jobs_total{outcome="partial"}`:  1,
		`siftbatch_jobs_total{outcome="done"}`:     0,
		`siftbatch_targets_total{result="done"}`:   1,
		`siftbatch_targets_total{result="failed"}`: 1,
		`siftbatch_targets_total{result="busy"}`:   1,
		`siftbatch_target_seconds_count`:           3,
		`siftbatch_target_seconds_sum`:             4,
		`siftbatch_result_bytes_total`:             100,
		`siftbatch_job_seconds_count`:              1,
		`siftbatch_job_seconds_sum`:                3,
		`siftbatch_live_jobs`:                      4,
		`siftbatch_inflight_targets`:               2,
	})
}

// TestMetrics_Runner runs a job on a real runner with the metrics' hooks,
// joined with one that panics: the series follow the runner, and
// siftbatch_hook_panics_total reads its count once attached.
func TestMetrics_Runner(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if tg.URL == "https://example.com/fail" {
			return engine.Result{}, errors.New("failed")
		}
		return engine.Result{Content: "page"}, nil
	}
	// A hook of the embedder's that panics, after the metrics' own.
	bad := engine.Hooks{JobSeconds: func(time.Duration) { panic("a bug in an embedder's hook") }}
	eb := enginetest.Setup(t, fetch, engine.Config{Hooks: metrics.Join(m.Hooks(), bad)})
	r := eb.Runner
	m.Attach(r)
	id := eb.Submit(t, "a", []engine.Target{{URL: "https://example.com/ok"}, {URL: "https://example.com/fail"}})
	if j := eb.WaitSettled(t, id); j.Status != engine.StatusPartial {
		t.Fatalf("job %s, want partial", j.Status)
	}
	r.Close() // every hook has run once Close returns
	if r.HookPanics() != 1 {
		t.Errorf("HookPanics %d, want 1", r.HookPanics())
	}
	wantValues(t, b.scrape(t), map[string]float64{
		`siftbatch_jobs_total{outcome="created"}`:  1,
		`siftbatch_jobs_total{outcome="partial"}`:  1,
		`siftbatch_targets_total{result="done"}`:   1,
		`siftbatch_targets_total{result="failed"}`: 1,
		`siftbatch_job_seconds_count`:              1,
		`siftbatch_live_jobs`:                      0,
		`siftbatch_inflight_targets`:               0,
		`siftbatch_hook_panics_total`:              float64(r.HookPanics()),
	})
}

// TestMetrics_JoinCallsEachInOrder: a joined hook calls each hook's field
// in the order given, skipping nil ones.
func TestMetrics_JoinCallsEachInOrder(t *testing.T) {
	t.Parallel()
	var calls []string
	rec := func(name string) engine.Hooks {
		return engine.Hooks{
			Job: func(o string) { calls = append(calls, name+" job "+o) },
			Target: func(err error, _ time.Duration, n int) {
				calls = append(calls, fmt.Sprint(name, " target ", err, " ", n))
			},
			JobSeconds: func(d time.Duration) { calls = append(calls, fmt.Sprint(name, " seconds ", d)) },
			Depth:      func(n int) { calls = append(calls, fmt.Sprint(name, " depth ", n)) },
			Inflight:   func(n int) { calls = append(calls, fmt.Sprint(name, " inflight ", n)) },
		}
	}
	j := metrics.Join(rec("a"), engine.Hooks{}, rec("b"))
	j.Job("done")
	j.Target(nil, time.Second, 7)
	j.JobSeconds(time.Second)
	j.Depth(1)
	j.Inflight(2)
	want := []string{
		"a job done", "b job done",
		"a target <nil> 7", "b target <nil> 7",
		"a seconds 1s", "b seconds 1s",
		"a depth 1", "b depth 1",
		"a inflight 2", "b inflight 2",
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}

	// A field nil everywhere stays nil: the runner skips it.
	only := metrics.Join(engine.Hooks{Depth: func(int) {}}, engine.Hooks{})
	if only.Job != nil || only.Target != nil || only.JobSeconds != nil || only.Inflight != nil || only.Depth == nil {
		t.Fatalf("Join of one Depth hook: %+v", only)
	}
	if none := metrics.Join(); none.Job != nil || none.Depth != nil {
		t.Fatal("Join() has hooks")
	}
}

// TestMetrics_Middleware: requests count under the fixed route, whatever
// the path, with the code written; a panicking handler counts as 500.
func TestMetrics_Middleware(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/batch/{id}", m.Middleware("GET /v1/batch/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "missing":
			http.NotFound(w, r)
		case "abort":
			// Part of an answer is out (so the client does not retry),
			// then the handler drops the connection.
			fmt.Fprint(w, "part")
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		default:
			fmt.Fprint(w, "ok")
		}
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, id := range []string{"0123", "4567", "missing", "abort"} {
		resp, err := srv.Client().Get(srv.URL + "/v1/batch/" + id)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if (err != nil) != (id == "abort") {
			t.Fatalf("%s: %v", id, err)
		}
	}
	s := b.scrape(t)
	wantValues(t, s, map[string]float64{
		`siftbatch_http_requests_total{code="200",route="GET /v1/batch/{id}"}`: 2,
		`siftbatch_http_requests_total{code="404",route="GET /v1/batch/{id}"}`: 1,
		`siftbatch_http_requests_total{code="500",route="GET /v1/batch/{id}"}`: 1,
		`siftbatch_http_request_seconds_count{route="GET /v1/batch/{id}"}`:     4,
	})
	// Only label values (quoted) can carry a path; a sample's value may
	// hold the digits (a latency sum of 0.000123454 once did).
	if regexp.MustCompile(`"[^"]*(0123|4567|missing|abort)[^"]*"`).MatchString(s) {
		t.Errorf("a path became a label:\n%s", s)
	}
}

// peerCounts is a cluster node's peer counters, for
// TestMetrics_ClusterReadsPeerCounters.
type peerCounts struct{ panics, refusals int64 }

func (p *peerCounts) PeerPanics() int64   { return p.panics }
func (p *peerCounts) PeerRefusals() int64 { return p.refusals }

// TestMetrics_ClusterReadsPeerCounters: the cluster collector reads a
// node's peer counters at each scrape; a Metrics alone has none of its
// series.
func TestMetrics_ClusterReadsPeerCounters(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	if got := value(t, b.scrape(t), "siftbatch_cluster_peer_panics_total"); got != -1 {
		t.Errorf("a single node's scrape has siftbatch_cluster_peer_panics_total %v", got)
	}
	counts := &peerCounts{}
	if err := b.reg.Register(metrics.Cluster(counts)); err != nil {
		t.Fatal(err)
	}
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_cluster_peer_panics_total": 0, "siftbatch_cluster_peer_refusals_total": 0})
	counts.panics, counts.refusals = 2, 7
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_cluster_peer_panics_total": 2, "siftbatch_cluster_peer_refusals_total": 7})
}

// TestMetrics_MiddlewareLabelsStayFixed: under concurrent requests with
// long and hostile paths and every status code, each request counts once
// under the fixed route and the code it was answered with; a path never
// becomes a label, nor does a second or an informational WriteHeader.
func TestMetrics_MiddlewareLabelsStayFixed(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	codes := []int{200, 201, 204, 301, 400, 401, 404, 409, 413, 422, 429, 500, 503, 599}
	h := m.Middleware("GET /v1/batch/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c int
		fmt.Sscan(r.URL.Query().Get("c"), &c)
		if c == 0 {
			w.WriteHeader(http.StatusContinue) // a 1xx is not the answer's code
			w.Write([]byte("x"))
			return
		}
		w.WriteHeader(c)
		w.WriteHeader(999) // a second WriteHeader changes nothing
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j, c := range codes {
				path := fmt.Sprintf("/v1/batch/%032x/%d/%s?c=%d", i*100+j, j, strings.Repeat("e", j*50), c)
				resp, err := client.Get(srv.URL + path)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			resp, err := client.Get(srv.URL + "/evil%22%7D%20label?c=0")
			if err == nil {
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	s := b.scrape(t)
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "siftbatch_http_requests_total{") {
			continue
		}
		if !strings.Contains(line, `route="GET /v1/batch/{id}"`) || strings.Contains(line, "eee") || strings.Contains(line, "evil") {
			t.Errorf("unexpected series: %s", line)
		}
	}
	for _, c := range codes {
		want := fmt.Sprintf(`siftbatch_http_requests_total{code="%d",route="GET /v1/batch/{id}"}`, c)
		n := 16.0
		if c == 200 {
			n = 32 // and the 1xx-then-body requests
		}
		if v := value(t, s, want); v != n {
			t.Errorf("%s = %v, want %v", want, v, n)
		}
	}
	if strings.Contains(s, `code="999"`) || strings.Contains(s, `code="100"`) {
		t.Errorf("a second or informational WriteHeader became a label:\n%s", s)
	}
}

// TestMetrics_MiddlewarePanicsGoOn: a handler's panic goes on up, as the
// same value, and counts as a 500.
func TestMetrics_MiddlewarePanicsGoOn(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	for _, v := range []any{"boom", http.ErrAbortHandler, fmt.Errorf("wrapped")} {
		h := m.Middleware("POST /v1/batch", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(v) }))
		got := func() (r any) {
			defer func() { r = recover() }()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/batch", nil))
			return nil
		}()
		if got != v {
			t.Errorf("panic %v came out as %v", v, got)
		}
	}
	if v := value(t, b.scrape(t), `siftbatch_http_requests_total{code="500",route="POST /v1/batch"}`); v != 3 {
		t.Errorf("panics counted %v, want 3", v)
	}
}

// TestMetrics_JoinOddHooks: joined hooks with empty ones among them keep
// every field, are safe for concurrent calls, and take odd values
// (negative durations and depths, huge sizes) without a panic.
func TestMetrics_JoinOddHooks(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	var own []string
	var mu sync.Mutex
	j := metrics.Join(engine.Hooks{}, m.Hooks(), engine.Hooks{Job: func(o string) {
		mu.Lock()
		own = append(own, o)
		mu.Unlock()
	}}, engine.Hooks{})
	if j.Job == nil || j.Target == nil || j.Depth == nil {
		t.Fatal("joined hooks lost a field")
	}
	if z := metrics.Join(); z.Job != nil || z.Target != nil || z.JobSeconds != nil || z.Depth != nil || z.Inflight != nil {
		t.Fatal("Join() has non-nil fields")
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 100; k++ {
				j.Job(engine.StatusDone)
				j.Target(nil, -time.Second, 0)
				j.Target(fmt.Errorf("x: %w", engine.ErrRetryLater), time.Duration(1<<62), 1<<40)
				j.JobSeconds(-time.Hour)
				j.Depth(-1)
				j.Inflight(1 << 30)
			}
		}()
	}
	wg.Wait()
	s := b.scrape(t)
	if v := value(t, s, `siftbatch_jobs_total{outcome="done"}`); v != 800 {
		t.Errorf("jobs done %v, want 800", v)
	}
	if v := value(t, s, `siftbatch_targets_total{result="busy"}`); v != 800 {
		t.Errorf("targets busy %v, want 800", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(own) != 800 {
		t.Errorf("own hook called %d times, want 800", len(own))
	}
}

// TestMetrics_TargetHookNegativeBytes: the Target hook is a public
// function; a negative byte count (an embedder's own accounting, or a
// wrapper passing a difference) neither panics (a Prometheus counter panics
// when it decreases) nor makes the bytes counter go down.
func TestMetrics_TargetHookNegativeBytes(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	m.Hooks().Target(nil, time.Millisecond, 100)
	var v any
	func() {
		defer func() { v = recover() }()
		m.Hooks().Target(nil, time.Millisecond, -1)
	}()
	if v != nil {
		t.Fatalf("Target hook with -1 bytes panicked: %v", v)
	}
	if got := value(t, b.scrape(t), "siftbatch_result_bytes_total"); got != 100 {
		t.Fatalf("result bytes %v after 100 and -1, want 100", got)
	}
}
