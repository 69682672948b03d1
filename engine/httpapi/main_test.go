package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/persistence"
)

// TestMain serves the fetcher's filters when the test binary runs as a
// filter process (the tests that filter pages use a real fetcher), and
// otherwise checks that no test leaves a goroutine behind: every runner,
// store, server and client a test starts is stopped by its end. No
// allow-list is needed.
func TestMain(m *testing.M) {
	fetcher.RunFilterChild()
	goleak.VerifyTestMain(m)
}

// Test keys: alice and bob are standard callers, carol is restricted.
const testKeys = `# name key [restricted]
alice alice-key
bob   bob-key
carol carol-key restricted
`

// holdURL is a target whose fake fetch waits until the test releases it.
const holdURL = "https://example.com/hold"

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// bundle is the API under test and what it runs on.
type bundle struct {
	url    string
	client *http.Client
	// handler serves the API and /metrics, for calls without a network
	// hop.
	handler http.Handler
	api     *httpapi.Handler
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

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Read(p)
}

// String returns what was written and not yet read.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
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

// setup starts the API on an in-memory store with a fake fetch: at most 4
// targets a job, 1 live job per caller, 2 in all; its routes wrapped in
// the metrics' middleware, and /metrics beside it.
func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, nil, httpapi.Options{})
}

// setupWith is setup with a fetch of its own (nil: fakeFetch) and options
// (Log and TargetsPerJob are set for it; the metrics' middleware wraps
// o.Wrap).
func setupWith(t testing.TB, fetch engine.FetchFunc, o httpapi.Options) *bundle {
	t.Helper()
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
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
	b := &bundle{store: store, clock: &fakeClock{now: time.Now()}, logs: &syncBuffer{},
		release: func() { once.Do(func() { close(release) }) }}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	cfg := engine.Config{TargetsPerJob: 4, JobsPerCaller: 1, JobsTotal: 2, RetryWait: 10 * time.Millisecond, Hooks: m.Hooks(), Now: b.clock.Now}
	runner, err := engine.New(store, fetch, cfg, log)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	m.Attach(runner)
	b.runner = runner
	o.TargetsPerJob, o.Log = cfg.TargetsPerJob, log
	if inner := o.Wrap; inner != nil {
		o.Wrap = func(route string, h http.Handler) http.Handler { return m.Middleware(route, inner(route, h)) }
	} else {
		o.Wrap = m.Middleware
	}
	api, err := httpapi.New(runner, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	b.handler, b.api = mux, api
	srv := httptest.NewServer(mux)
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

func (b *bundle) do(t testing.TB, method, path, key string, body io.Reader) response {
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
func (b *bundle) submit(t testing.TB, key string, urls ...string) string {
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
func (b *bundle) waitTerminal(t testing.TB, id string) engine.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := b.runner.Wait(ctx, id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return j
}

// waitRunning waits until the job's first target is being fetched.
func (b *bundle) waitRunning(t testing.TB, id string) {
	t.Helper()
	waitFor(t, 10*time.Second, "job "+id+" to run", func() bool {
		_, ts, ok := b.runner.Targets(id)
		return ok && len(ts) > 0 && ts[0].Status == engine.TargetRunning
	})
}

// waitFor checks cond every few milliseconds until it holds, failing the
// test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		case <-tick.C:
		}
	}
}

func wantCode(t testing.TB, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %d, want %d: %s", r.code, code, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("answer %d has Content-Type %q, want JSON", code, ct)
	}
}

// wantError checks an error answer: its code, and a JSON error with a hint.
func wantError(t testing.TB, r response, code int, msg string) {
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
