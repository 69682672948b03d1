package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/httpapi/internal/apispec"
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
	enginetest.Main(m)
}

// Test keys: alice and bob are standard callers, carol is restricted,
// root is an admin.
const testKeys = `# name key [restricted|admin]
alice alice-key
bob   bob-key
carol carol-key restricted
root  root-key  admin
`

// holdURL is a target whose fake fetch waits at the bundle's gate.
const holdURL = "https://example.com/hold"

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// bundle is the API under test and what it runs on: the kit's runner
// bundle (Runner, Store, Clock, Logs, Log), with the API served over a
// loopback test server.
type bundle struct {
	*enginetest.Bundle
	url    string
	client *http.Client
	// handler serves the API and /metrics, for calls without a network
	// hop.
	handler http.Handler
	api     *httpapi.Handler
	// gate holds every fetch of holdURL (or of a URL ending in /hold)
	// until release opens it.
	gate *testkit.Gate
}

// release lets every held fetch finish.
func (b *bundle) release() { b.gate.Open() }

// fakeFetch answers from the URL: ".../hold" waits at g (or until the
// runner's close), ".../fail" fails with a hint, anything else succeeds.
func fakeFetch(g *testkit.Gate) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			if err := g.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		return engine.Result{Content: "page " + t.URL, Meta: map[string]any{"status": 200}}, nil
	}
}

// bigFetch succeeds with a 256 KiB page: a job of such targets is costly to
// read and to answer.
func bigFetch(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	return engine.Result{Content: strings.Repeat("x", 256<<10), Meta: map[string]any{"status": 200}}, nil
}

// setup starts the API on an in-memory store with a fake fetch: at most 4
// targets a job, 1 live job per caller, 2 in all; its routes wrapped in
// the metrics' middleware, and /metrics beside it.
func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, nil, httpapi.Options{})
}

// setupWith is setup with a fetch of its own (nil: fakeFetch) and options
// (TargetsPerJob is set for it, and Log unless set: the bundle's; the
// metrics' middleware wraps o.Wrap).
func setupWith(t testing.TB, fetch engine.FetchFunc, o httpapi.Options) *bundle {
	t.Helper()
	return setupOn(t, enginetest.OpenStore(t, ""), engine.Config{}, fetch, o)
}

// setupOn is setupWith on a store the test opened, with base's
// Durability.
func setupOn(t testing.TB, store *persistence.Store, base engine.Config, fetch engine.FetchFunc, o httpapi.Options) *bundle {
	t.Helper()
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	gate := testkit.NewGate()
	if fetch == nil {
		fetch = fakeFetch(gate)
	}
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	cfg := engine.Config{TargetsPerJob: 4, JobsPerCaller: 1, JobsTotal: 2, RetryWait: 10 * time.Millisecond, Hooks: m.Hooks(), Durability: base.Durability}
	b := &bundle{Bundle: enginetest.SetupOn(t, store, fetch, cfg), gate: gate}
	m.Attach(b.Runner)
	o.TargetsPerJob = cfg.TargetsPerJob
	if o.Log == nil {
		o.Log = b.Log
	}
	if inner := o.Wrap; inner != nil {
		o.Wrap = func(route string, h http.Handler) http.Handler { return m.Middleware(route, inner(route, h)) }
	} else {
		o.Wrap = m.Middleware
	}
	api, err := httpapi.New(b.Runner, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// Every request to /v1/ and its answer are checked against the
	// OpenAPI document (package apispec).
	b.handler, b.api = apispec.Conform(t, httpapi.OpenAPI(), httpapi.Front(api, mux)), api
	srv := httptest.NewServer(b.handler)
	b.url = srv.URL
	transport := &http.Transport{}
	b.client = &http.Client{Transport: transport, Timeout: testkit.Deadline}
	// Cleanups run last first: this one before the runner's and the
	// store's (registered by Setup).
	t.Cleanup(func() {
		b.release()
		transport.CloseIdleConnections()
		srv.Close()
	})
	return b
}

// newServer serves h, under the OpenAPI conformance check, on a loopback
// test server that configure (if not nil) sets up before it starts, and
// closes it when the test ends.
func newServer(t testing.TB, h http.Handler, configure func(*httptest.Server)) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(apispec.Conform(t, httpapi.OpenAPI(), h))
	if configure != nil {
		configure(srv)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
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

// rawExchange sends raw on a new connection to addr and reads the answer.
func rawExchange(t testing.TB, addr, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(testkit.Deadline)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
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
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	j, err := b.Runner.Wait(ctx, id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return j
}

// waitRunning waits until the job's first target is being fetched.
func (b *bundle) waitRunning(t testing.TB, id string) {
	t.Helper()
	testkit.WaitFor(t, "job "+id+" to run", func() bool {
		_, ts, ok := b.Runner.Targets(id)
		return ok && len(ts) > 0 && ts[0].Status == engine.TargetRunning
	})
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

// leaks are strings no error answer may hold: Go type names, Go's own
// error prefixes, socket addresses, keys, panics.
var leaks = []string{
	"engine.", "httpapi.", "submitRequest", "Go struct", "Go value", "json: cannot unmarshal", `"error":"json:`, "map[", "interface {",
	"[]engine", "*url.", "net/http", "127.0.0.1", "[::1]", "i/o timeout", "alice-key", "bob-key", "carol-key",
	"goroutine", "panic",
}

// wantNoLeak fails the test (and goes on) for each of leaks and extra that
// body holds.
func wantNoLeak(t testing.TB, what string, body []byte, extra ...string) {
	t.Helper()
	for _, s := range append(append([]string{}, leaks...), extra...) {
		if bytes.Contains(body, []byte(s)) {
			t.Errorf("%s: answer holds %q: %s", what, s, body)
		}
	}
}
