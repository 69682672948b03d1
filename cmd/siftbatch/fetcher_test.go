package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// fakeResolver answers host lookups from a table, never from DNS. A host
// with several answers gets the next one on each lookup.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	lookups map[string]int
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lookups == nil {
		r.lookups = map[string]int{}
	}
	as, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	a := as[min(r.lookups[host], len(as)-1)]
	r.lookups[host]++
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

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

func newTestFetcher(t *testing.T, cfg FetcherConfig) *Fetcher {
	t.Helper()
	f := NewFetcher(cfg)
	t.Cleanup(f.Close)
	return f
}

func fetch(t *testing.T, f *Fetcher, u string) (engine.Result, error) {
	t.Helper()
	return f.Fetch(context.Background(), &engine.Caller{Name: "test"}, engine.Target{URL: u})
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

func TestFetcher_Statuses(t *testing.T) {
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
	f := newTestFetcher(t, FetcherConfig{AllowPrivate: true})
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

	// A closed port: connection refused, without the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, err = fetch(t, f, "http://"+closed+"/")
	wantTargetError(t, err, http.StatusBadGateway, "connection refused", closed)
}

// TestFetcher_RetriedThenDone runs a 429-twice page through a runner: the
// target stays pending while busy and ends done.
func TestFetcher_RetriedThenDone(t *testing.T) {
	var n atomic.Int32
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("finally"))
	})
	f := newTestFetcher(t, FetcherConfig{AllowPrivate: true})
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var stored []error
	var mu sync.Mutex
	r, err := engine.New(store, f.Fetch, engine.Config{RetryWait: 10 * time.Millisecond, Hooks: engine.Hooks{
		Target: func(err error, _ time.Duration, _ int) { mu.Lock(); stored = append(stored, err); mu.Unlock() },
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "t"}, classStandard, []engine.Target{{URL: s.URL + "/busy"}})
	if err != nil {
		t.Fatal(err)
	}
	var job engine.Job
	var ts []engine.TargetStatus
	waitFor(t, 10*time.Second, "the job", func() bool {
		job, ts, _ = r.Status(id)
		return !persistence.IsLive(job.Status)
	})
	if job.Status != persistence.StatusDone || ts[0].Result == nil || ts[0].Result.Content != "finally" {
		t.Fatalf("job %+v targets %+v", job, ts)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("fetched %d times, want 3", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stored) != 1 || stored[0] != nil {
		t.Fatalf("Hooks.Target saw %v, want one success", stored)
	}
}

func TestFetcher_PrivateAddresses(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })

	t.Run("a name that resolves to loopback", func(t *testing.T) {
		res := &fakeResolver{answers: map[string][]string{"intranet.example": {"127.0.0.1"}}}
		f := newTestFetcher(t, FetcherConfig{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://intranet.example:"+s.port+"/")
		wantTargetError(t, err, http.StatusForbidden, "address not allowed", "intranet.example")
		if s.hits.Load() != before {
			t.Fatal("the request reached the loopback server")
		}
		// With --allow-private the same name is fetched, dialled through
		// the injected resolver.
		f = newTestFetcher(t, FetcherConfig{Resolver: res, AllowPrivate: true})
		got, err := fetch(t, f, "http://intranet.example:"+s.port+"/")
		if err != nil || got.Content != "inside" {
			t.Fatalf("allow-private: %+v %v", got, err)
		}
	})

	t.Run("refused at dial time", func(t *testing.T) {
		// The name looks public when the URL is checked, then resolves to
		// loopback when dialled (DNS rebinding): Control refuses the dial.
		res := &fakeResolver{answers: map[string][]string{"rebind.example": {"93.184.216.34", "127.0.0.1"}}}
		f := newTestFetcher(t, FetcherConfig{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://rebind.example:"+s.port+"/")
		wantTargetError(t, err, http.StatusForbidden, "address not allowed", "rebind.example")
		if s.hits.Load() != before {
			t.Fatal("the request reached the loopback server")
		}
		if res.lookups["rebind.example"] != 2 {
			t.Fatalf("%d lookups, want 2 (check, then dial)", res.lookups["rebind.example"])
		}
		// And the dial guard on its own, on an address it is handed.
		if err := f.control("tcp4", "127.0.0.1:80", nil); !errors.Is(err, errAddrRefused) {
			t.Fatalf("control: %v", err)
		}
		if err := f.control("tcp4", "93.184.216.34:80", nil); err != nil {
			t.Fatalf("control on a public address: %v", err)
		}
	})

	t.Run("addresses in the URL", func(t *testing.T) {
		f := newTestFetcher(t, FetcherConfig{Resolver: &fakeResolver{}})
		for _, host := range []string{
			"127.0.0.1", "127.1.2.3", "[::1]", "0.0.0.0", "[::]", "10.1.2.3", "172.16.0.1", "192.168.1.1",
			"169.254.169.254", "[fe80::1]", "[fc00::1]", "[::ffff:127.0.0.1]", "[::ffff:10.0.0.1]",
			"100.64.0.1", "255.255.255.255", "[64:ff9b::7f00:1]",
			"2130706433", "0x7f000001", "0x7f.1", "017700000001", "127.1",
		} {
			before := s.hits.Load()
			_, err := fetch(t, f, "http://"+host+":"+s.port+"/")
			wantTargetError(t, err, http.StatusForbidden, "address not allowed", "")
			if s.hits.Load() != before {
				t.Fatalf("%s: the request reached the server", host)
			}
		}
	})

	t.Run("public addresses pass the guard", func(t *testing.T) {
		for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"} {
			if !publicAddr(netip.MustParseAddr(a)) {
				t.Errorf("%s refused", a)
			}
		}
		for _, h := range []string{"example.com", "deadbeef.example", "1.example", "a1.b2"} {
			if numericHost(h) {
				t.Errorf("%s taken for an IP spelling", h)
			}
		}
	})
}

func TestFetcher_BodyCap(t *testing.T) {
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
	f := newTestFetcher(t, FetcherConfig{AllowPrivate: true, MaxBody: 1000})
	res, err := fetch(t, f, s.URL+"/big")
	if err != nil || len(res.Content) != 1000 || res.Meta["truncated"] != true || res.Meta["bytes"] != 1000 {
		t.Fatalf("big: %d bytes, meta %v, %v", len(res.Content), res.Meta, err)
	}
	res, err = fetch(t, f, s.URL+"/exact")
	if err != nil || len(res.Content) != 1000 || res.Meta["truncated"] != nil {
		t.Fatalf("exact: %d bytes, meta %v, %v", len(res.Content), res.Meta, err)
	}
	f = newTestFetcher(t, FetcherConfig{AllowPrivate: true, MaxBody: 999})
	res, err = fetch(t, f, s.URL+"/utf8")
	if err != nil || len(res.Content) != 998 || !utf8.ValidString(res.Content) || res.Meta["truncated"] != true {
		t.Fatalf("utf8: %d bytes, valid %v, %v", len(res.Content), utf8.ValidString(res.Content), err)
	}
}

func TestFetcher_Deadline(t *testing.T) {
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
	f := newTestFetcher(t, FetcherConfig{AllowPrivate: true, Timeout: 200 * time.Millisecond})
	for _, path := range []string{"/slow-headers", "/slow-body"} {
		start := time.Now()
		_, err := fetch(t, f, s.URL+path)
		wantTargetError(t, err, http.StatusGatewayTimeout, "timed out", strings.TrimPrefix(s.URL, "http://"))
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: took %s with a 200ms deadline", path, d)
		}
	}

	t.Run("a cancelled context is not a target error", func(t *testing.T) {
		f := newTestFetcher(t, FetcherConfig{AllowPrivate: true})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := f.Fetch(ctx, &engine.Caller{Name: "t"}, engine.Target{URL: s.URL + "/slow-headers"})
			errc <- err
		}()
		waitFor(t, 5*time.Second, "the request", func() bool { return s.hits.Load() >= 3 })
		cancel()
		select {
		case err := <-errc:
			var te *engine.TargetError
			if !errors.Is(err, context.Canceled) || errors.As(err, &te) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Fetch did not return after cancel")
		}
	})
}

func TestReadCapped(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int64
		want string
		cut  bool
	}{
		{"abc", 5, "abc", false},
		{"abc", 3, "abc", false},
		{"abcd", 3, "abc", true},
		{"aé", 2, "a", true},                  // é is 2 bytes: not split
		{"a€b", 3, "a", true},                 // € is 3 bytes
		{"a€b", 4, "a€", true},                // whole
		{"😀😀", 5, "😀", true},                  // 4-byte rune
		{"\xff\xfe\xfd", 2, "\xff\xfe", true}, // not UTF-8: cut as is
	} {
		got, cut, err := readCapped(strings.NewReader(tc.in), tc.max)
		if err != nil || string(got) != tc.want || cut != tc.cut {
			t.Errorf("readCapped(%q, %d) = %q, %v, %v; want %q, %v", tc.in, tc.max, got, cut, err, tc.want, tc.cut)
		}
	}
}
