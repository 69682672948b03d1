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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/persistence"
)

// setup registers a new Metrics on a registry of its own and serves the
// registry over httptest; scrape reads it.
func setup(t *testing.T) (*metrics.Metrics, func() string) {
	t.Helper()
	m := metrics.New()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return m, func() string {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
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
	m, scrape := setup(t)
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
	wantValues(t, scrape(), zero)

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
	wantValues(t, scrape(), map[string]float64{
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
	m, scrape := setup(t)
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if tg.URL == "https://example.com/fail" {
			return engine.Result{}, errors.New("failed")
		}
		return engine.Result{Content: "page"}, nil
	}
	// A hook of the embedder's that panics, after the metrics' own.
	bad := engine.Hooks{JobSeconds: func(time.Duration) { panic("a bug in an embedder's hook") }}
	r, err := engine.New(store, fetch, engine.Config{Hooks: metrics.Join(m.Hooks(), bad)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m.Attach(r)
	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "a"}, "", []engine.Target{{URL: "https://example.com/ok"}, {URL: "https://example.com/fail"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	r.Close() // every hook has run once Close returns
	if r.HookPanics() != 1 {
		t.Errorf("HookPanics %d, want 1", r.HookPanics())
	}
	wantValues(t, scrape(), map[string]float64{
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

func TestJoin(t *testing.T) {
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
	m, scrape := setup(t)
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
	s := scrape()
	wantValues(t, s, map[string]float64{
		`siftbatch_http_requests_total{code="200",route="GET /v1/batch/{id}"}`: 2,
		`siftbatch_http_requests_total{code="404",route="GET /v1/batch/{id}"}`: 1,
		`siftbatch_http_requests_total{code="500",route="GET /v1/batch/{id}"}`: 1,
		`siftbatch_http_request_seconds_count{route="GET /v1/batch/{id}"}`:     4,
	})
	if regexp.MustCompile(`0123|4567|missing|abort`).MatchString(s) {
		t.Errorf("a path became a label:\n%s", s)
	}
}

// peerCounts is a cluster node's peer counters, for TestCluster.
type peerCounts struct{ panics, refusals int64 }

func (p *peerCounts) PeerPanics() int64   { return p.panics }
func (p *peerCounts) PeerRefusals() int64 { return p.refusals }

// TestCluster: the cluster collector reads a node's peer counters at each
// scrape; a Metrics alone has none of its series.
func TestCluster(t *testing.T) {
	_, scrape := setup(t)
	if got := value(t, scrape(), "siftbatch_cluster_peer_panics_total"); got != -1 {
		t.Errorf("a single node's scrape has siftbatch_cluster_peer_panics_total %v", got)
	}
	counts := &peerCounts{}
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.Cluster(counts)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	read := func() string {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	wantValues(t, read(), map[string]float64{"siftbatch_cluster_peer_panics_total": 0, "siftbatch_cluster_peer_refusals_total": 0})
	counts.panics, counts.refusals = 2, 7
	wantValues(t, read(), map[string]float64{"siftbatch_cluster_peer_panics_total": 2, "siftbatch_cluster_peer_refusals_total": 7})
}
