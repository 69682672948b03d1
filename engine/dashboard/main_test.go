package dashboard_test

import (
	"context"
	"io"
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
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/persistence"
)

// TestMain checks that no test leaves a goroutine behind: every runner,
// store, dashboard, server, event stream and browser a test starts is
// stopped by its end; but the goroutines protoactor-go leaves behind the
// clusters of cluster_test.go (enginetest.ClusterMain, and as
// engine/cluster's TestMain ignores them: the test provider's TTL loop,
// gRPC's connections to a peer that has gone). Under the race detector,
// protoactor's own data races are suppressed (engine/cluster's
// testdata/race.supp).
func TestMain(m *testing.M) {
	enginetest.ClusterMain(m, "../cluster/testdata/race.supp",
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster/clusterproviders/test.(*Provider).startTtlReport.func1"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransport"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.newClientStreamWithParams.func4"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/remote.(*endpointWriter).initialize"),
		// protoactor's gossip loop, caught in a request to its gossip actor
		// as the node stopped: it ends at the cluster's request timeout
		// (Config.TimeoutTime), after goleak's last look (seen once in
		// engine/dashboard under -race).
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).gossipLoop"),
		// protoactor's graceful stop of a remote, left to end by itself
		// (engine/cluster's TestMain ignores it too): seen once in a
		// make test/stress run.
		goleak.IgnoreAnyFunction("github.com/sift/batch/engine/cluster.stopGracefully"),
	)
}

// Test keys: alice and bob are callers, root is an admin.
const testKeys = `alice alice-key
bob   bob-key
root  root-key admin
`

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// Hostile strings a fetch hands back or a caller submits.
const (
	hostileScript = `<script>alert("xss")</script>`
	hostileImg    = `"><img src=x onerror=alert(1)>`
	hostileJSURL  = `javascript:alert(document.cookie)//hostile.example/ok`
	panicText     = "PANIC-VALUE-7f3a https://panic-secret.example/"
)

// bundle is the dashboard under test, mounted with the API as serve
// mounts them, and what it runs on: the kit's runner bundle (Runner,
// Store, Clock, Logs, Log).
type bundle struct {
	*enginetest.Bundle
	url     string
	handler http.Handler
	dash    *dashboard.Handler
	client  *http.Client
	// active counts the requests being served: event streams, mostly.
	active atomic.Int64
	// gate holds every fetch of a URL ending in /hold until release
	// opens it.
	gate *testkit.Gate
}

// release lets every held fetch finish.
func (b *bundle) release() { b.gate.Open() }

// fakeFetch answers from the URL. On hostile.example: "/xss-err" and
// "/cr-err" fail with hostile error texts and hints, "/panic" panics with
// panicText, anything else succeeds with hostile content and meta.
// Elsewhere: ".../hold" waits at g (or until the runner's close),
// ".../stuck" until the runner's close, ".../fail" fails with a hint,
// ".../slow" moves the clock (once set) on by 1.5 s and succeeds,
// ".../flaky" fails the first time that URL is fetched and succeeds after,
// anything else succeeds.
func fakeFetch(g *testkit.Gate, clock *atomic.Pointer[testkit.Clock]) engine.FetchFunc {
	var fetched sync.Map // URL → true: the flaky URLs fetched once
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		if strings.Contains(t.URL, "hostile.example") {
			switch {
			case strings.Contains(t.URL, "/xss-err"):
				return engine.Result{}, &engine.TargetError{Status: 500, Msg: "boom " + hostileScript + hostileImg, Hint: "try " + hostileJSURL + " " + hostileScript}
			case strings.Contains(t.URL, "/cr-err"):
				return engine.Result{}, &engine.TargetError{Status: 500, Msg: "line1\r\revent: signedout\rdata: injected\r\rtail", Hint: "h\rretry: 1"}
			case strings.Contains(t.URL, "/panic"):
				panic(panicText)
			}
			return engine.Result{Content: "content " + hostileScript + hostileImg + " " + hostileJSURL,
				Meta: map[string]any{"k" + hostileScript: hostileImg, "link": hostileJSURL}}, nil
		}
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			if err := g.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		case strings.HasSuffix(t.URL, "/stuck"):
			<-ctx.Done() // until the runner closes
			return engine.Result{}, ctx.Err()
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		case strings.HasSuffix(t.URL, "/flaky"):
			if _, again := fetched.LoadOrStore(t.URL, true); !again {
				return engine.Result{}, &engine.TargetError{Status: 503, Msg: "HTTP 503 Service Unavailable", Hint: "try again later"}
			}
		case strings.HasSuffix(t.URL, "/slow"):
			if c := clock.Load(); c != nil {
				c.Advance(1500 * time.Millisecond)
			}
		}
		return engine.Result{Content: "<h1>page</h1> of " + t.URL, Meta: map[string]any{"status": 200}}, nil
	}
}

// setup starts the dashboard and the API on an in-memory store with a
// fake fetch (4 live jobs per caller, 8 in all, 2 workers), its pages
// refreshed every 10ms, and serves them on a loopback test server.
func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, dashboard.Options{})
}

// setupWith is setup with options of its own (Config, Gatherer, Log, Now,
// Refresh and ChartStep are set for it when zero: the runner's, the
// metrics', the bundle's, its clock's, 10ms; of Config only NodeTag is
// taken, for a cluster node's ids).
func setupWith(t testing.TB, o dashboard.Options) *bundle {
	t.Helper()
	return setupOn(t, enginetest.OpenStore(t, ""), o)
}

// setupOn is setupWith on a store the test opened (on disk, to open it
// again after a restart).
func setupOn(t testing.TB, store *persistence.Store, o dashboard.Options) *bundle {
	t.Helper()
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	gate := testkit.NewGate()
	cfg := engine.Config{JobsPerCaller: 4, JobsTotal: 8, Workers: 2, Hooks: m.Hooks(), NodeTag: o.Config.NodeTag}
	var clock atomic.Pointer[testkit.Clock]
	b := &bundle{Bundle: enginetest.SetupOn(t, store, fakeFetch(gate, &clock), cfg), gate: gate}
	clock.Store(b.Clock)
	m.Attach(b.Runner)
	if o.Log == nil {
		o.Log = b.Log
	}
	if o.Now == nil {
		o.Now = b.Clock.Now
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
	dash, err := dashboard.New(b.Runner, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	b.dash = dash
	api, err := httpapi.New(b.Runner, keys, httpapi.Options{Log: b.Log})
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
	srv.Config.RegisterOnShutdown(dash.Close)
	srv.Start()
	b.url = srv.URL
	transport := &http.Transport{}
	b.client = &http.Client{Transport: transport, Timeout: testkit.Deadline,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Cleanups run last first: this one before the runner's and the
	// store's (registered by Setup).
	t.Cleanup(func() {
		b.release()
		dash.Close()
		transport.CloseIdleConnections()
		srv.Close()
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
	var c *http.Cookie
	if br != nil {
		c = br.cookie
	}
	body, hdr := "", map[string]string(nil)
	if form != nil {
		body, hdr = form.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	}
	return b.raw(t, c, method, path, body, hdr)
}

// raw sends a request with a raw body (a form, if not empty), headers and
// a cookie (if not nil), and reads the whole answer.
func (b *bundle) raw(t testing.TB, c *http.Cookie, method, path, body string, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c != nil {
		req.AddCookie(c)
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

// signedOut reports whether a page is the sign-in form.
func signedOut(r response) bool {
	return strings.Contains(r.body, `action="/ui/signin"`) && !strings.Contains(r.body, "Sign out")
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

// signInAt posts key through the handler as a client at remoteAddr, with
// extra headers.
func signInAt(h http.Handler, remoteAddr, key string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader(url.Values{"key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remoteAddr
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// submit submits a job of the URLs for caller and returns its id.
func (b *bundle) submit(t testing.TB, caller string, urls ...string) string {
	t.Helper()
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	id, _, err := b.Runner.Submit(context.Background(), enginetest.Caller(caller), "", ts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitTerminal waits until the job has ended.
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
