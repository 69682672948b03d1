package dashboard_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/persistence"
)

// TestMain checks that no test leaves a goroutine behind: every runner,
// store, dashboard, server, event stream and browser a test starts is
// stopped by its end. No allow-list is needed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Test keys: alice and bob are callers, root is an admin.
const testKeys = `alice alice-key
bob   bob-key
root  root-key admin
`

// writeTimeout is the test server's WriteTimeout.
const writeTimeout = 500 * time.Millisecond

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// bundle is the dashboard under test, mounted with the API as serve
// mounts them, and what it runs on.
type bundle struct {
	url     string
	handler http.Handler
	dash    *dashboard.Handler
	runner  *engine.Runner
	clock   *fakeClock
	logs    *syncBuffer
	client  *http.Client
	// active counts the requests being served: event streams, mostly.
	active atomic.Int64
	// release lets every held fetch (a URL ending in /hold) finish.
	release func()
}

// fakeClock is a settable clock for Options.Now.
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

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeFetch answers from the URL: ".../hold" waits for release (or the
// runner's close), ".../stuck" for the runner's close, ".../fail" fails
// with a hint, anything else succeeds.
func fakeFetch(release <-chan struct{}) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			select {
			case <-release:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		case strings.HasSuffix(t.URL, "/stuck"):
			<-ctx.Done() // until the runner closes
			return engine.Result{}, ctx.Err()
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		return engine.Result{Content: "<h1>page</h1> of " + t.URL, Meta: map[string]any{"status": 200}}, nil
	}
}

// setup starts the dashboard and the API on an in-memory store with a
// fake fetch (1 live job per caller, 4 in all, 2 workers), its pages
// refreshed every 10ms, and serves them on a loopback test server.
func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, dashboard.Options{})
}

// setupWith is setup with options of its own (Config, Gatherer, Log, Now
// and Refresh are set for it when zero).
func setupWith(t testing.TB, o dashboard.Options) *bundle {
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
	var once sync.Once
	b := &bundle{clock: &fakeClock{now: time.Now()}, logs: &syncBuffer{},
		release: func() { once.Do(func() { close(release) }) }}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	cfg := engine.Config{JobsPerCaller: 1, JobsTotal: 4, Workers: 2, Hooks: m.Hooks()}
	runner, err := engine.New(store, fakeFetch(release), cfg, log)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	m.Attach(runner)
	b.runner = runner
	if o.Log == nil {
		o.Log = log
	}
	if o.Now == nil {
		o.Now = b.clock.Now
	}
	if o.Refresh == 0 {
		o.Refresh = 10 * time.Millisecond
	}
	if o.ChartStep == 0 {
		o.ChartStep = 10 * time.Millisecond
	}
	if o.Gatherer == nil {
		o.Gatherer = reg
	}
	o.Config = cfg
	dash, err := dashboard.New(runner, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	b.dash = dash
	api, err := httpapi.New(runner, keys, httpapi.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.Handle(dashboard.Prefix, dash)
	b.handler = mux
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.active.Add(1)
		defer b.active.Add(-1)
		mux.ServeHTTP(w, r)
	}))
	// A short WriteTimeout, as serve has a long one: event streams must
	// outlive it.
	srv.Config.WriteTimeout = writeTimeout
	srv.Config.RegisterOnShutdown(dash.Close)
	srv.Start()
	b.url = srv.URL
	transport := &http.Transport{}
	b.client = &http.Client{Transport: transport, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(func() {
		b.release()
		dash.Close()
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
	body   string
}

// browser is a signed-in session: its cookie and CSRF token.
type browser struct {
	cookie *http.Cookie
	csrf   string
}

// do sends a request with the browser's cookie (none for a nil browser)
// and reads the whole answer.
func (b *bundle) do(t testing.TB, br *browser, method, path string, form url.Values) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if br != nil {
		req.AddCookie(br.cookie)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: string(data)}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs in with key through the form and returns the session.
func (b *bundle) signIn(t testing.TB, key string) *browser {
	t.Helper()
	r := b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {key}})
	if r.code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", r.code, r.body)
	}
	c := sessionCookie(t, r)
	br := &browser{cookie: c}
	page := b.do(t, br, http.MethodGet, "/ui/", nil)
	m := csrfRE.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no CSRF token on the overview: %s", page.body)
	}
	br.csrf = m[1]
	return br
}

// sessionCookie returns the session cookie an answer sets.
func sessionCookie(t testing.TB, r response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "siftbatch_session" {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", r.header)
	return nil
}

// submit submits a job of the URLs for caller and returns its id.
func (b *bundle) submit(t testing.TB, caller string, urls ...string) string {
	t.Helper()
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	id, _, err := b.runner.Submit(context.Background(), &engine.Caller{Name: caller}, "", ts)
	if err != nil {
		t.Fatal(err)
	}
	return id
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

// waitTerminal waits until the job has ended.
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
