package fetcher_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
)

// site is a loopback test server that counts its requests.
type site struct {
	*httptest.Server
	hits atomic.Int32
	port string
}

func newSite(t *testing.T, h http.HandlerFunc) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	s.port = u.Port()
	return s
}

// errOffMachine is what a test fetcher's dial gets for an address that is
// not loopback.
var errOffMachine = errors.New("test fetcher: refused to dial off the machine")

// testBundle is what a fetcher test gets besides the fetcher (River's
// testBundle): the count of the fetcher's dial attempts.
type testBundle struct {
	dials atomic.Int32
}

// setup returns a fetcher with options o that can only ever dial loopback:
// should the guard let a non-loopback address through, the dial is refused
// all the same (no traffic leaves the machine) and the test fails. The
// fetcher is closed when the test ends.
func setup(t *testing.T, o fetcher.Options) (*fetcher.Fetcher, *testBundle) {
	t.Helper()
	b := &testBundle{}
	var off atomic.Value
	o.Control = func(ap netip.AddrPort) error {
		b.dials.Add(1)
		if !ap.Addr().Unmap().IsLoopback() {
			off.Store(ap.String())
			return errOffMachine
		}
		return nil
	}
	f, err := fetcher.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if a := off.Load(); a != nil {
			t.Errorf("the fetcher tried to dial %s, which is not loopback", a)
		}
	})
	return f, b
}

// fetch fetches u with f, under a context that ends after
// testkit.Deadline: a deadline for a fetch that has hung, never a bound
// the test asserts.
func fetch(t *testing.T, f *fetcher.Fetcher, u string) (engine.Result, error) {
	t.Helper()
	return fetchWith(t, f, u, engine.Options{})
}

// fetchWith is fetch with options.
func fetchWith(t *testing.T, f *fetcher.Fetcher, u string, o engine.Options) (engine.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	return f.Fetch(ctx, &engine.Caller{Name: "test"}, engine.Target{URL: u, Options: o})
}

// wantTargetError checks err is a *engine.TargetError with the status, a
// hint, and no trace of the URL's host or port.
func wantTargetError(t *testing.T, err error, status int, msg, host string) *engine.TargetError {
	t.Helper()
	var te *engine.TargetError
	if !errors.As(err, &te) {
		t.Fatalf("error %v (%T), want a TargetError", err, err)
	}
	if te.Status != status || !strings.Contains(te.Msg, msg) || te.Hint == "" {
		t.Fatalf("TargetError %d %q %q, want %d %q with a hint", te.Status, te.Msg, te.Hint, status, msg)
	}
	if host != "" && (strings.Contains(te.Msg, host) || strings.Contains(te.Hint, host)) {
		t.Fatalf("TargetError %q %q names %s", te.Msg, te.Hint, host)
	}
	return te
}

// funcResolver answers host lookups from a function of the host and the
// lookup's number (0 for the host's first), never from DNS, and counts
// each host's lookups.
type funcResolver struct {
	mu sync.Mutex
	n  map[string]int
	fn func(host string, n int) ([]netip.Addr, error)
}

func (r *funcResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	n := r.n[host]
	r.n[host]++
	r.mu.Unlock()
	return r.fn(host, n)
}

// lookups returns how many times host was looked up.
func (r *funcResolver) lookups(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[host]
}

// tableResolver answers from tables: a host in answers gets its next
// address on each lookup (the last one again once they run out), a host
// in all gets all its addresses at once, and any other host does not
// exist.
func tableResolver(answers, all map[string][]string) *funcResolver {
	return &funcResolver{fn: func(host string, n int) ([]netip.Addr, error) {
		if as, ok := all[host]; ok {
			return addrs(as...), nil
		}
		as, ok := answers[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return addrs(as[min(n, len(as)-1)]), nil
	}}
}

// addrs parses addresses.
func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// wantNoURL checks that an error (and its hint) names neither the URL, its host nor its port.
func wantNoURL(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	var te *engine.TargetError
	text := err.Error()
	if errors.As(err, &te) {
		text += " " + te.Hint
	}
	for _, p := range parts {
		if p != "" && strings.Contains(text, p) {
			t.Errorf("%s: error %q names %q", what, text, p)
		}
	}
	for _, p := range []string{"127.0.0.1", "::1", "dial tcp", "lookup "} {
		if strings.Contains(text, p) {
			t.Errorf("%s: error %q holds %q", what, text, p)
		}
	}
}

func TestFetcher_Statuses(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("hello"))
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/429":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/403":
			w.WriteHeader(http.StatusForbidden)
		case "/500":
			w.WriteHeader(http.StatusInternalServerError)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		default:
			http.NotFound(w, r)
		}
	})
	f, _ := setup(t, fetcher.Options{AllowPrivate: true})
	host := strings.TrimPrefix(s.URL, "http://")

	res, err := fetch(t, f, s.URL+"/ok")
	if err != nil || res.Content != "hello" || res.Meta["status"] != 200 || res.Meta["content_type"] != "text/plain" {
		t.Fatalf("ok: %+v %v", res, err)
	}
	res, err = fetch(t, f, s.URL+"/redirect")
	if err != nil || res.Content != "hello" || res.Meta["final_url"] != s.URL+"/ok" {
		t.Fatalf("redirect: %+v %v", res, err)
	}
	for _, path := range []string{"/429", "/503"} {
		_, err := fetch(t, f, s.URL+path)
		if !errors.Is(err, engine.ErrRetryLater) {
			t.Fatalf("%s: %v, want ErrRetryLater", path, err)
		}
		if strings.Contains(err.Error(), host) {
			t.Fatalf("%s: %v names the host", path, err)
		}
	}
	_, err = fetch(t, f, s.URL+"/missing")
	wantTargetError(t, err, 404, "HTTP 404", host)
	_, err = fetch(t, f, s.URL+"/403")
	wantTargetError(t, err, 403, "HTTP 403", host)
	_, err = fetch(t, f, s.URL+"/500")
	wantTargetError(t, err, 500, "HTTP 500", host)
	_, err = fetch(t, f, s.URL+"/304")
	wantTargetError(t, err, http.StatusBadGateway, "HTTP 304", host)
	_, err = fetch(t, f, s.URL+"/loop")
	wantTargetError(t, err, http.StatusBadGateway, "too many redirects", host)
	_, err = fetch(t, f, "ftp://example.com/")
	wantTargetError(t, err, http.StatusUnprocessableEntity, "bad url", "")
	for _, port := range []string{"99999", "0", "65536"} {
		_, err = fetch(t, f, "http://example.com:"+port+"/")
		if te := wantTargetError(t, err, http.StatusUnprocessableEntity, "bad url", ""); !strings.Contains(te.Hint, "port") {
			t.Errorf("port %s: hint %q", port, te.Hint)
		}
	}

	// A port bound but not listening: connection refused, without the
	// address.
	closed := testkit.RefusedAddr(t)
	_, err = fetch(t, f, "http://"+closed+"/")
	wantTargetError(t, err, http.StatusBadGateway, "connection refused", closed)
}

// TestFetcher_RetriedThenDone runs a 429-twice page through a runner: the
// target stays pending while busy and ends done.
func TestFetcher_RetriedThenDone(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("finally"))
	})
	f, _ := setup(t, fetcher.Options{AllowPrivate: true})
	var stored []error
	var mu sync.Mutex
	eb := enginetest.Setup(t, f.Fetch, engine.Config{RetryWait: 10 * time.Millisecond, Hooks: engine.Hooks{
		Target: func(err error, _ time.Duration, _ int) { mu.Lock(); stored = append(stored, err); mu.Unlock() },
	}})
	r := eb.Runner
	id := eb.Submit(t, "t", []engine.Target{{URL: s.URL + "/busy"}})
	eb.WaitSettled(t, id)
	job, ts, _ := r.Status(id)
	if job.Status != engine.StatusDone || ts[0].Result == nil || ts[0].Result.Content != "finally" {
		t.Fatalf("job %+v targets %+v", job, ts)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("fetched %d times, want 3", got)
	}
	// Status reads the job done once its row is written; Hooks.Target runs
	// after that. Close returns once every job actor has stopped.
	r.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(stored) != 1 || stored[0] != nil {
		t.Fatalf("Hooks.Target saw %v, want one success", stored)
	}
}

func TestFetcher_PrivateAddresses(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })

	t.Run("a name that resolves to loopback", func(t *testing.T) {
		res := tableResolver(map[string][]string{"intranet.example": {"127.0.0.1"}}, nil)
		f, _ := setup(t, fetcher.Options{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://intranet.example:"+s.port+"/")
		te := wantTargetError(t, err, http.StatusForbidden, "address not allowed", "intranet.example")
		if !strings.Contains(te.Hint, "serve --allow-private") {
			t.Errorf("hint %q: want it to point at the operator's serve --allow-private", te.Hint)
		}
		if s.hits.Load() != before {
			t.Fatal("the request reached the loopback server")
		}
		// With --allow-private the same name is fetched, dialled through
		// the injected resolver.
		f, _ = setup(t, fetcher.Options{Resolver: res, AllowPrivate: true})
		got, err := fetch(t, f, "http://intranet.example:"+s.port+"/")
		if err != nil || got.Content != "inside" {
			t.Fatalf("allow-private: %+v %v", got, err)
		}
	})

	t.Run("refused at dial time", func(t *testing.T) {
		// The name looks public when the URL is checked, then resolves to
		// loopback when dialled (DNS rebinding): Control refuses the dial.
		res := tableResolver(map[string][]string{"rebind.example": {"93.184.216.34", "127.0.0.1"}}, nil)
		f, _ := setup(t, fetcher.Options{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://rebind.example:"+s.port+"/")
		wantTargetError(t, err, http.StatusForbidden, "address not allowed", "rebind.example")
		if s.hits.Load() != before {
			t.Fatal("the request reached the loopback server")
		}
		if res.lookups("rebind.example") != 2 {
			t.Fatalf("%d lookups, want 2 (check, then dial)", res.lookups("rebind.example"))
		}
	})

	t.Run("addresses in the URL", func(t *testing.T) {
		f, _ := setup(t, fetcher.Options{Resolver: tableResolver(nil, nil)})
		for _, host := range []string{
			"127.0.0.1", "127.1.2.3", "[::1]", "0.0.0.0", "[::]", "10.1.2.3", "172.16.0.1", "192.168.1.1",
			"169.254.169.254", "[fe80::1]", "[fc00::1]", "[::ffff:127.0.0.1]", "[::ffff:10.0.0.1]",
			"100.64.0.1", "255.255.255.255", "[64:ff9b::7f00:1]",
			"2130706433", "0x7f000001", "0x7f.1", "017700000001", "127.1",
			// Each range at its edges, and more spellings.
			"127.255.255.255", "10.255.255.255", "172.31.255.255", "192.168.255.255", "169.254.0.1",
			"[fdff:ffff::1]", "[febf:ffff::1]", "[fe80::1%25lo]", "[::ffff:7f00:1]", "[::ffff:169.254.169.254]",
			"[::ffff:0.0.0.0]", "0", "0.0.0.0.", "127.0.0.1.", "0177.0.0.1", "0x7f.0.0.1", "0X7F.0.0.1",
			"0x7f.0x0.0x0.0x1", "0177.1", "127.0.1", "[::7f00:1]", "[::127.0.0.1]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
			"[::ffff:0:7f00:1]", "[100::1]",
		} {
			before := s.hits.Load()
			_, err := fetch(t, f, "http://"+host+":"+s.port+"/")
			wantTargetError(t, err, http.StatusForbidden, "address not allowed", "")
			if s.hits.Load() != before {
				t.Fatalf("%s: the request reached the server", host)
			}
		}
	})
}

func TestFetcher_BodyCap(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write([]byte(strings.Repeat("x", 5000)))
		case "/utf8":
			w.Write([]byte(strings.Repeat("é", 1000))) // 2 bytes each
		default:
			w.Write([]byte(strings.Repeat("y", 1000)))
		}
	})
	f, _ := setup(t, fetcher.Options{AllowPrivate: true, MaxBody: 1000})
	res, err := fetch(t, f, s.URL+"/big")
	if err != nil || len(res.Content) != 1000 || res.Meta["truncated"] != true || res.Meta["bytes"] != 1000 {
		t.Fatalf("big: %d bytes, meta %v, %v", len(res.Content), res.Meta, err)
	}
	res, err = fetch(t, f, s.URL+"/exact")
	if err != nil || len(res.Content) != 1000 || res.Meta["truncated"] != nil {
		t.Fatalf("exact: %d bytes, meta %v, %v", len(res.Content), res.Meta, err)
	}
	f, _ = setup(t, fetcher.Options{AllowPrivate: true, MaxBody: 999})
	res, err = fetch(t, f, s.URL+"/utf8")
	if err != nil || len(res.Content) != 998 || !utf8.ValidString(res.Content) || res.Meta["truncated"] != true {
		t.Fatalf("utf8: %d bytes, valid %v, %v", len(res.Content), utf8.ValidString(res.Content), err)
	}
}

func TestFetcher_Deadline(t *testing.T) {
	t.Parallel()
	unblock := make(chan struct{})
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-body" {
			w.Write([]byte("start"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-unblock:
		}
	})
	defer close(unblock)
	f, _ := setup(t, fetcher.Options{AllowPrivate: true, Timeout: 200 * time.Millisecond})
	for _, path := range []string{"/slow-headers", "/slow-body"} {
		// The server never answers in full: only the deadline ends the
		// fetch (fetch's own context ends far later, as "fetch stopped").
		_, err := fetch(t, f, s.URL+path)
		wantTargetError(t, err, http.StatusGatewayTimeout, "timed out", strings.TrimPrefix(s.URL, "http://"))
	}

	t.Run("a cancelled context is a stop, with a hint", func(t *testing.T) {
		f, _ := setup(t, fetcher.Options{AllowPrivate: true})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := f.Fetch(ctx, &engine.Caller{Name: "t"}, engine.Target{URL: s.URL + "/slow-headers"})
			errc <- err
		}()
		testkit.WaitFor(t, "the request", func() bool { return s.hits.Load() >= 3 })
		cancel()
		err := testkit.Recv(t, errc)
		var te *engine.TargetError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &te) || te.Msg != "fetch stopped" || te.Hint == "" {
			t.Fatalf("got %v (%+v), want context.Canceled and a TargetError with a hint", err, te)
		}
	})
}

// TestFetcher_Redirects: with AllowPrivate off, a redirect is checked like
// the first URL (before connecting, and again at the dial), and at most
// fetcher.DefaultMaxRedirects are followed. The first hop is a loopback test server that
// the guard exempts (a test hook), so the guard meets what comes after it.
func TestFetcher_Redirects(t *testing.T) {
	t.Parallel()
	inside := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	entry := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/page":
			w.Write([]byte("entry page"))
		case r.URL.Path == "/to":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/hop/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
			if n == 0 {
				w.Write([]byte("landed"))
				return
			}
			http.Redirect(w, r, "/hop/"+strconv.Itoa(n-1), http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	})
	entryAddr := netip.MustParseAddrPort(strings.TrimPrefix(entry.URL, "http://"))
	res := tableResolver(
		map[string][]string{
			"internal.example": {"10.1.2.3"},
			"loop.example":     {"127.0.0.1"},
			"mapped.example":   {"::ffff:127.0.0.1"},
			"rebind.example":   {"93.184.216.34", "127.0.0.1"}, // public when checked, loopback when dialled
		},
		map[string][]string{"mixed.example": {"93.184.216.34", "192.168.1.1"}},
	)
	f, _ := setup(t, fetcher.Options{Resolver: res, Exempt: func(ap netip.AddrPort) bool { return ap == entryAddr }})

	// The exemption lets the first hop through, and only it.
	got, err := fetch(t, f, entry.URL+"/page")
	if err != nil || got.Content != "entry page" {
		t.Fatalf("first hop: %+v %v", got, err)
	}
	_, err = fetch(t, f, inside.URL+"/")
	wantTargetError(t, err, http.StatusForbidden, "address not allowed", "")

	for _, to := range []string{
		inside.URL + "/",
		"http://[::1]:" + inside.port + "/",
		"http://0x7f000001:" + inside.port + "/",
		"http://2130706433:" + inside.port + "/",
		"http://127.1:" + inside.port + "/",
		"http://[::ffff:127.0.0.1]:" + inside.port + "/",
		"http://internal.example:" + inside.port + "/",
		"http://loop.example:" + inside.port + "/",
		"http://mapped.example:" + inside.port + "/",
		"http://mixed.example:" + inside.port + "/",
		"http://rebind.example:" + inside.port + "/",
		"http://169.254.169.254/latest/meta-data/",
	} {
		before := inside.hits.Load()
		_, err := fetch(t, f, entry.URL+"/to?u="+url.QueryEscape(to))
		wantTargetError(t, err, http.StatusForbidden, "address not allowed", "")
		if inside.hits.Load() != before {
			t.Fatalf("redirect to %s reached the loopback server", to)
		}
	}
	if n := res.lookups("rebind.example"); n != 2 {
		t.Fatalf("rebind.example looked up %d times, want 2 (the redirect's check, then the dial)", n)
	}
	_, err = fetch(t, f, entry.URL+"/to?u="+url.QueryEscape("file:///etc/passwd"))
	wantTargetError(t, err, http.StatusUnprocessableEntity, "bad url", "")

	t.Run("capped", func(t *testing.T) {
		before := entry.hits.Load()
		got, err := fetch(t, f, entry.URL+"/hop/"+strconv.Itoa(fetcher.DefaultMaxRedirects))
		if err != nil || got.Content != "landed" {
			t.Fatalf("%d redirects: %+v %v", fetcher.DefaultMaxRedirects, got, err)
		}
		if n := entry.hits.Load() - before; n != fetcher.DefaultMaxRedirects+1 {
			t.Fatalf("%d requests for %d redirects", n, fetcher.DefaultMaxRedirects)
		}
		before = entry.hits.Load()
		_, err = fetch(t, f, entry.URL+"/hop/"+strconv.Itoa(fetcher.DefaultMaxRedirects+1))
		wantTargetError(t, err, http.StatusBadGateway, "too many redirects", "")
		if n := entry.hits.Load() - before; n != fetcher.DefaultMaxRedirects+1 {
			t.Fatalf("%d requests for %d redirects, want %d: the one past the cap was made", n, fetcher.DefaultMaxRedirects+1, fetcher.DefaultMaxRedirects+1)
		}
	})
}

// TestFetcher_NamesThatResolvePrivate: a name is refused if any address it
// resolves to is not public, one range at a time.
func TestFetcher_NamesThatResolvePrivate(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	for _, a := range []string{
		"127.0.0.1", "127.9.9.9", "::1", "10.0.0.1", "172.16.0.1", "172.31.255.254", "192.168.0.1",
		"fc00::1", "fd00::1", "169.254.169.254", "fe80::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
		"::ffff:169.254.169.254", "0.0.0.0", "::", "100.64.0.1", "::7f00:1", "64:ff9b::a00:1",
	} {
		res := tableResolver(nil, map[string][]string{"name.example": {"93.184.216.34", a}})
		f, _ := setup(t, fetcher.Options{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://name.example:"+s.port+"/")
		wantTargetError(t, err, http.StatusForbidden, "address not allowed", "name.example")
		if s.hits.Load() != before {
			t.Fatalf("%s: the request reached the server", a)
		}
	}
}

// TestFetcher_Options: grep and jq on real pages from a local server,
// their checks, and jq's bounds.
func TestFetcher_Options(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/text":
			w.Write([]byte("alpha one\r\nBeta two\nalpha three\ngamma\n"))
		case "/json":
			w.Write([]byte(`{"items":[{"name":"a","n":1},{"name":"b","n":12345678901234567890}],"secret":"<b>x</b>"}`))
		case "/big-json":
			w.Write([]byte(`[` + strings.Repeat(`"xxxxxxxxxx",`, 200) + `"end"]`))
		default:
			w.Write([]byte("not json"))
		}
	})
	f, _ := setup(t, fetcher.Options{AllowPrivate: true, MaxBody: 1000})
	if got := f.Honours(); !slices.Equal(got, []string{"grep", "jq"}) {
		t.Fatalf("Honours %v", got)
	}
	run := func(path string, o engine.Options) (engine.Result, error) {
		return f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: s.URL + path, Options: o})
	}

	res, err := run("/text", engine.Options{Grep: "^alpha"})
	if err != nil || res.Content != "alpha one\nalpha three" || res.Meta["grep_lines"] != 2 {
		t.Fatalf("grep: %q %v %v", res.Content, res.Meta, err)
	}
	res, err = run("/text", engine.Options{Grep: "beta"})
	if err != nil || res.Content != "" || res.Meta["grep_lines"] != 0 {
		t.Fatalf("grep is case-sensitive: %q %v", res.Content, err)
	}
	res, err = run("/text", engine.Options{Grep: "(?i)beta|GAMMA"})
	if err != nil || res.Content != "Beta two\ngamma" {
		t.Fatalf("grep (?i): %q %v", res.Content, err)
	}
	res, err = run("/json", engine.Options{JQ: ".items[].name"})
	if err != nil || res.Content != "\"a\"\n\"b\"" || res.Meta["jq_outputs"] != 2 {
		t.Fatalf("jq: %q %v %v", res.Content, res.Meta, err)
	}
	res, err = run("/json", engine.Options{JQ: ".items[1].n, .secret"})
	if err != nil || res.Content != "12345678901234567890\n\"<b>x</b>\"" {
		t.Fatalf("jq keeps big numbers and HTML as they are: %q %v", res.Content, err)
	}
	res, err = run("/json", engine.Options{JQ: `.items[] | "\(.name)=\(.n)"`, Grep: `=1"$`})
	if err != nil || res.Content != `"a=1"` {
		t.Fatalf("jq then grep: %q %v", res.Content, err)
	}
	res, err = run("/json", engine.Options{JQ: "$ENV | length"})
	if err != nil || res.Content != "0" {
		t.Fatalf("jq sees the environment: %q %v", res.Content, err)
	}

	for _, tc := range []struct {
		path string
		o    engine.Options
		msg  string
	}{
		{"/text", engine.Options{JQ: "."}, "page is not JSON"},
		{"/json", engine.Options{JQ: ".items | .name"}, "jq: "},
		{"/json", engine.Options{JQ: `error("boom")`}, "jq: "},
		{"/json", engine.Options{JQ: "[range(1e9)] | length"}, "jq ran longer than 1s"},
		{"/json", engine.Options{JQ: "range(1000)"}, "jq output too large"},
		{"/big-json", engine.Options{JQ: "length"}, "page too large for jq"},
		{"/json", engine.Options{JQ: "input"}, "bad jq program"},
	} {
		_, err := run(tc.path, tc.o)
		wantTargetError(t, err, http.StatusUnprocessableEntity, tc.msg, "")
	}

	// Check: the values a handler refuses at submit, with the parser's
	// message.
	for _, o := range []engine.Options{{Grep: "a("}, {Grep: `\p{Nope}`}, {JQ: ".a |"}, {JQ: "nosuchfunc"}, {JQ: "input"}, {JQ: `import "x" as x; .`}} {
		if err := f.Check(engine.Target{URL: "https://example.com/", Options: o}); err == nil {
			t.Errorf("Check(%+v) passed", o)
		}
	}
	for _, o := range []engine.Options{{}, {Grep: "(?i)a.b"}, {JQ: ".a[] | select(.x > 1)"}, {Mode: "whatever"}} {
		if err := f.Check(engine.Target{URL: "https://example.com/", Options: o}); err != nil {
			t.Errorf("Check(%+v): %v", o, err)
		}
	}
}

// TestFetcher_GuardRefusesAddressLiterals: a URL whose host is an address
// in any special-purpose range (IPv4 and IPv6, at the ranges' edges, and
// numeric spellings some resolvers read as addresses) is refused before a
// dial, with an error that names neither the host, the port nor the path.
func TestFetcher_GuardRefusesAddressLiterals(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	f, b := setup(t, fetcher.Options{Resolver: &funcResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
	}}})
	hosts := []string{
		// IPv4 special-purpose ranges, at their edges.
		"0.0.0.0", "0.255.255.255", "10.0.0.0", "100.64.0.0", "100.127.255.255", "127.0.0.0", "127.255.255.254",
		"169.254.169.254", "169.254.255.255", "172.16.0.0", "172.31.255.255", "192.0.0.0", "192.0.0.8", "192.0.0.170",
		"192.0.0.171", "192.0.0.255", "192.0.2.0", "192.0.2.255", "192.88.99.1", "192.168.0.0", "198.18.0.0",
		"198.19.255.255", "198.51.100.7", "203.0.113.255", "224.0.0.1", "233.252.0.1", "239.255.255.250",
		"240.0.0.0", "250.1.2.3", "255.255.255.254", "255.255.255.255",
		// IPv6.
		"[::]", "[::1]", "[0:0:0:0:0:0:0:1]", "[::0.0.0.1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
		"[0:0:0:0:0:ffff:127.0.0.1]", "[::FFFF:127.0.0.1]", "[::ffff:192.168.0.1]", "[::ffff:100.64.0.1]",
		"[::ffff:0:127.0.0.1]", "[::127.0.0.1]", "[::a9fe:a9fe]",
		"[64:ff9b::127.0.0.1]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b::c0a8:1]", "[64:ff9b::0.0.0.0]", "[64:ff9b:1::a00:1]",
		"[100::]", "[100::ffff:ffff:ffff:ffff]", "[2001::1]", "[2001:2::1]", "[2001:10::1]", "[2001:db8::]",
		"[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]", "[2002:7f00:1::]", "[2002:a9fe:a9fe::1]", "[3fff::1]",
		"[5f00::1]", "[fc00::]", "[fd00:ec2::254]", "[fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]", "[fe80::]",
		"[fe80::1%25eth0]", "[fe80::1%25lo]", "[febf::1]", "[fec0::1]", "[ff00::1]", "[ff02::1]", "[ff05::1:3]",
		"[1::1]", "[4000::1]", "[e000::1]",
		// Numeric spellings some resolvers read as addresses.
		"2130706433", "0x7f000001", "0X7F000001", "017700000001", "0177.0.0.01", "127.1", "127.0.1", "0x7f.1",
		"0x7f.0.0.1", "0", "0x0", "00", "0.0", "127.0.0.1.", "2852039166", "0xa9fea9fe", "0251.0376.0251.0376",
		"0xA9.0xFE.0xA9.0xFE", "10.1", "192.168.1", "4294967295", "4294967296", "0x100000000",
	}
	for _, host := range hosts {
		before, d := s.hits.Load(), b.dials.Load()
		_, err := fetch(t, f, "http://"+host+":"+s.port+"/secret")
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Status != http.StatusForbidden && te.Msg != "bad url" {
			t.Errorf("%s: %v, want address not allowed", host, err)
			continue
		}
		if s.hits.Load() != before || b.dials.Load() != d {
			t.Errorf("%s: dialled (hits %d→%d, dials %d→%d)", host, before, s.hits.Load(), d, b.dials.Load())
		}
		wantNoURL(t, host, err, strings.Trim(host, "[]"), s.port, "secret")
	}
}

// TestFetcher_GuardRefusesNamesOfPrivateAddresses: a name that resolves to
// a private address (alone or among public ones, in any case, with a
// trailing dot) is refused before a dial, and the error does not name it.
func TestFetcher_GuardRefusesNamesOfPrivateAddresses(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	public := "93.184.215.14"
	table := map[string][]string{
		"localhost":                {"127.0.0.1", "::1"},
		"metadata.google.internal": {"169.254.169.254"},
		"mixed.example":            {public, "127.0.0.1"},
		"mixed2.example":           {"127.0.0.1", public},
		"v6loop.example":           {"::1"},
		"mapped.example":           {"::ffff:127.0.0.1"},
		"nat64.example":            {"64:ff9b::7f00:1"},
		"sixtofour.example":        {"2002:7f00:1::1"},
		"doc.example":              {"192.0.2.10"},
		"ula.example":              {"fd12:3456::1"},
		"zero.example":             {"0.0.0.0"},
		"bcast.example":            {"255.255.255.255"},
	}
	res := &funcResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if as, ok := table[h]; ok {
			return addrs(as...), nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
	}}
	f, b := setup(t, fetcher.Options{Resolver: res})
	for name := range table {
		for _, spelled := range []string{name, strings.ToUpper(name), name + "."} {
			before, d := s.hits.Load(), b.dials.Load()
			_, err := fetch(t, f, "http://"+spelled+":"+s.port+"/p")
			var te *engine.TargetError
			if !errors.As(err, &te) || te.Status != http.StatusForbidden {
				t.Errorf("%s: %v, want address not allowed", spelled, err)
				continue
			}
			if s.hits.Load() != before || b.dials.Load() != d {
				t.Errorf("%s: dialled", spelled)
			}
			wantNoURL(t, spelled, err, name, s.port)
		}
	}
}

// TestFetcher_GuardRefusesRebinding: a name whose answer changes between
// the check and the dial (public, or nothing, then loopback in any
// spelling) never reaches the loopback server.
func TestFetcher_GuardRefusesRebinding(t *testing.T) {
	t.Parallel()
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	public := "93.184.215.14"
	cases := map[string]func(n int) []netip.Addr{
		// Public when checked, private when dialled.
		"public-then-loopback": func(n int) []netip.Addr {
			if n == 0 {
				return addrs(public)
			}
			return addrs("127.0.0.1")
		},
		// Nothing when checked (nothing to refuse), loopback when dialled.
		"empty-then-loopback": func(n int) []netip.Addr {
			if n == 0 {
				return nil
			}
			return addrs("127.0.0.1")
		},
		"public-then-mapped": func(n int) []netip.Addr {
			if n == 0 {
				return addrs(public)
			}
			return addrs("::ffff:127.0.0.1")
		},
		"public-then-v6": func(n int) []netip.Addr {
			if n == 0 {
				return addrs(public)
			}
			return addrs("::1")
		},
		// The loopback address last, after public ones (the dial tries
		// each in turn).
		"public-then-public-and-loopback": func(n int) []netip.Addr {
			if n == 0 {
				return addrs(public)
			}
			return addrs("127.0.0.1", "::1")
		},
	}
	for name, answer := range cases {
		host := name + ".example"
		res := &funcResolver{fn: func(h string, n int) ([]netip.Addr, error) {
			if h != host {
				return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
			}
			return answer(n), nil
		}}
		f, _ := setup(t, fetcher.Options{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://"+host+":"+s.port+"/")
		if err == nil {
			t.Errorf("%s: fetched", name)
			continue
		}
		if s.hits.Load() != before {
			t.Errorf("%s: the request reached the loopback server", name)
		}
		wantNoURL(t, name, err, host, s.port)
	}
}

// TestFetcher_GuardRefusesRedirectsInside: from an exempt site standing for
// a public one, a redirect of every kind (301, 302, 303, 307, 308) to a
// private address, a bad port or another scheme fails its target with a
// hint, never reaching the private server; so does a chain of exempt hops
// ending inside; a redirect loop ends.
func TestFetcher_GuardRefusesRedirectsInside(t *testing.T) {
	t.Parallel()
	inner := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("private")) })
	var outerPort uint16
	outer := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/loop" {
			http.Redirect(w, r, "/loop", http.StatusFound)
			return
		}
		to := r.URL.Query().Get("to")
		code := http.StatusFound
		if c := r.URL.Query().Get("code"); c != "" {
			fmt.Sscan(c, &code)
		}
		if to == "" {
			w.Write([]byte("outer"))
			return
		}
		w.Header().Set("Location", to)
		w.WriteHeader(code)
	})
	fmt.Sscan(outer.port, &outerPort)
	res := &funcResolver{fn: func(h string, n int) ([]netip.Addr, error) {
		switch h {
		case "localhost", "inner.example":
			return addrs("127.0.0.1"), nil
		case "outer.example":
			return addrs("127.0.0.1"), nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
	}}
	// Only the outer site is exempt from the guard: a test server that
	// stands for a public site.
	f, _ := setup(t, fetcher.Options{Resolver: res, Exempt: func(ap netip.AddrPort) bool {
		return ap.Addr().Unmap() == netip.MustParseAddr("127.0.0.1") && ap.Port() == outerPort
	}})
	// The outer site is fetched.
	got, err := fetch(t, f, outer.URL+"/")
	if err != nil || got.Content != "outer" {
		t.Fatalf("exempt site: %+v %v", got, err)
	}
	p := inner.port
	for _, to := range []string{
		"http://127.0.0.1:" + p + "/", "http://localhost:" + p + "/", "http://inner.example:" + p + "/",
		"http://[::ffff:127.0.0.1]:" + p + "/", "http://2130706433:" + p + "/", "http://0x7f.1:" + p + "/",
		"http://127.1:" + p + "/", "//127.0.0.1:" + p + "/", "http://[::1]:" + p + "/",
		"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/",
		"http://127.0.0.1:0/", "http://127.0.0.1:99999/", "http://127.0.0.1:65536/",
		"file:///etc/passwd", "gopher://127.0.0.1:" + p + "/", "ftp://127.0.0.1:" + p + "/",
		"http://user:pw@127.0.0.1:" + p + "/",
	} {
		for _, code := range []int{301, 302, 303, 307, 308} {
			before := inner.hits.Load()
			u := fmt.Sprintf("%s/?code=%d&to=%s", outer.URL, code, url.QueryEscape(to))
			_, err := fetch(t, f, u)
			if err == nil {
				t.Errorf("redirect %d to %s: fetched", code, to)
				continue
			}
			if inner.hits.Load() != before {
				t.Errorf("redirect %d to %s: reached the private server", code, to)
			}
			var te *engine.TargetError
			if !errors.As(err, &te) || te.Hint == "" {
				t.Errorf("redirect %d to %s: %v, want a TargetError with a hint", code, to, err)
			}
			wantNoURL(t, "redirect to "+to, err, p, "etc/passwd", "169.254")
		}
	}
	// A chain of redirects that ends at a private address, after several
	// exempt hops, is refused too.
	to := "http://127.0.0.1:" + p + "/"
	for i := 0; i < 3; i++ {
		to = outer.URL + "/?to=" + url.QueryEscape(to)
	}
	before := inner.hits.Load()
	if _, err := fetch(t, f, to); err == nil || inner.hits.Load() != before {
		t.Errorf("chain to a private address: %v, hits %d→%d", err, before, inner.hits.Load())
	}
	// A redirect loop ends, at the cap on redirects.
	before = outer.hits.Load()
	_, err = fetch(t, f, outer.URL+"/loop")
	wantTargetError(t, err, http.StatusBadGateway, "too many redirects", "")
	if n := outer.hits.Load() - before; n != fetcher.DefaultMaxRedirects+1 {
		t.Errorf("redirect loop: %d requests, want %d", n, fetcher.DefaultMaxRedirects+1)
	}
}

// TestFetcher_BadPortsNeverDialled: a port out of range or oddly spelled
// fails its target (422, with a hint) without a lookup or a dial, with
// AllowPrivate too.
func TestFetcher_BadPortsNeverDialled(t *testing.T) {
	t.Parallel()
	res := &funcResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		t.Errorf("resolved %s for a URL with a bad port", h)
		return nil, errors.New("no")
	}}
	f, b := setup(t, fetcher.Options{Resolver: res})
	for _, port := range []string{"0", "65536", "99999", "4294967377", "18446744073709551696", "-1", "+80", "0x50", "80a", "８０"} {
		_, err := fetch(t, f, "http://public.example:"+port+"/")
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Status != http.StatusUnprocessableEntity || te.Hint == "" {
			t.Errorf("port %s: %v", port, err)
		}
	}
	// With AllowPrivate too: a port out of range is never dialled.
	g, b2 := setup(t, fetcher.Options{AllowPrivate: true, Resolver: res})
	for _, port := range []string{"0", "65536", "99999", "4294967377"} {
		if _, err := fetch(t, g, "http://127.0.0.1:"+port+"/"); err == nil {
			t.Errorf("allow-private, port %s: fetched", port)
		}
	}
	if b.dials.Load() != 0 || b2.dials.Load() != 0 {
		t.Fatalf("dialled for bad ports: %d, %d", b.dials.Load(), b2.dials.Load())
	}
}

// TestFetcher_ErrorsNeverNameTheURL: whatever fails (a refused connection,
// a lookup, a timeout, a broken body, TLS to a plain server, the guard,
// credentials in the URL), the error and its hint name neither the URL,
// its host, its port, its path or query, nor the resolver's address.
func TestFetcher_ErrorsNeverNameTheURL(t *testing.T) {
	t.Parallel()
	// A loopback port bound but not listening: connection refused.
	closed := testkit.RefusedAddr(t)
	hang := make(chan struct{})
	defer close(hang)
	slow := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	broken := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("half"))
		panic(http.ErrAbortHandler)
	})
	res := &funcResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		if h == "secret-internal-name.example" {
			return nil, &net.DNSError{Err: "no such host", Name: h, Server: "10.1.1.1:53", IsNotFound: true}
		}
		if h == "weird.example" {
			return nil, errors.New("resolver exploded for weird.example at 10.1.1.1:53")
		}
		return addrs("127.0.0.1"), nil
	}}
	f, _ := setup(t, fetcher.Options{Resolver: res, AllowPrivate: true, Timeout: 500 * time.Millisecond})
	g, _ := setup(t, fetcher.Options{Resolver: res})
	for _, c := range []struct {
		f *fetcher.Fetcher
		u string
	}{
		{f, "http://" + closed + "/secret-path?token=abc123"},
		{f, "http://secret-internal-name.example/secret-path"},
		{g, "http://secret-internal-name.example/secret-path"},
		{g, "http://weird.example/secret-path"},
		{f, slow.URL + "/secret-path?token=abc123"},
		{f, broken.URL + "/secret-path?token=abc123"},
		{f, "https://" + strings.TrimPrefix(slow.URL, "http://") + "/secret-path"},
		{g, "http://127.0.0.1/secret-path"},
		{f, "http://user:hunter2@127.0.0.1:1/"},
	} {
		_, err := fetch(t, c.f, c.u)
		if err == nil {
			t.Errorf("%s: fetched", c.u)
			continue
		}
		u, _ := url.Parse(c.u)
		wantNoURL(t, c.u, err, "secret-path", "abc123", "secret-internal-name", "weird.example", "10.1.1.1", "hunter2", u.Port())
	}
}
