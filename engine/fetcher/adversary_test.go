package fetcher_test

// Adversarial black-box tests of the hardened fetcher: the SSRF guard
// (literals, names, DNS answers that change, redirects, ports), errors
// that never carry a URL, and jq/grep bounds. Every test passes against
// the contract. Everything is loopback: Control refuses any other dial.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
)

// advResolver answers from a function of the host and the lookup's number.
type advResolver struct {
	mu sync.Mutex
	n  map[string]int
	fn func(host string, n int) ([]netip.Addr, error)
}

func (r *advResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	n := r.n[host]
	r.n[host]++
	r.mu.Unlock()
	return r.fn(host, n)
}

func advAddrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// advFetcher is a fetcher that counts its dial attempts and never dials
// off the machine.
func advFetcher(t *testing.T, o fetcher.Options) (*fetcher.Fetcher, *atomic.Int32) {
	t.Helper()
	var dials atomic.Int32
	var off atomic.Value
	o.Control = func(ap netip.AddrPort) error {
		dials.Add(1)
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
	return f, &dials
}

// advNoURL checks an error names neither the URL, its host nor its port.
func advNoURL(t *testing.T, what string, err error, parts ...string) {
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

func TestAdversary_GuardLiterals(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	f, dials := advFetcher(t, fetcher.Options{Resolver: &advResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
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
		before, d := s.hits.Load(), dials.Load()
		_, err := fetch(t, f, "http://"+host+":"+s.port+"/secret")
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Status != http.StatusForbidden && te.Msg != "bad url" {
			t.Errorf("%s: %v, want address not allowed", host, err)
			continue
		}
		if s.hits.Load() != before || dials.Load() != d {
			t.Errorf("%s: dialled (hits %d→%d, dials %d→%d)", host, before, s.hits.Load(), d, dials.Load())
		}
		advNoURL(t, host, err, strings.Trim(host, "[]"), s.port, "secret")
	}
}

func TestAdversary_GuardNames(t *testing.T) {
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
	res := &advResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if as, ok := table[h]; ok {
			return advAddrs(as...), nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
	}}
	f, dials := advFetcher(t, fetcher.Options{Resolver: res})
	for name := range table {
		for _, spelled := range []string{name, strings.ToUpper(name), name + "."} {
			before, d := s.hits.Load(), dials.Load()
			_, err := fetch(t, f, "http://"+spelled+":"+s.port+"/p")
			var te *engine.TargetError
			if !errors.As(err, &te) || te.Status != http.StatusForbidden {
				t.Errorf("%s: %v, want address not allowed", spelled, err)
				continue
			}
			if s.hits.Load() != before || dials.Load() != d {
				t.Errorf("%s: dialled", spelled)
			}
			advNoURL(t, spelled, err, name, s.port)
		}
	}
}

func TestAdversary_GuardRebinding(t *testing.T) {
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("inside")) })
	public := "93.184.215.14"
	cases := map[string]func(n int) []netip.Addr{
		// Public when checked, private when dialled.
		"public-then-loopback": func(n int) []netip.Addr {
			if n == 0 {
				return advAddrs(public)
			}
			return advAddrs("127.0.0.1")
		},
		// Nothing when checked (nothing to refuse), loopback when dialled.
		"empty-then-loopback": func(n int) []netip.Addr {
			if n == 0 {
				return nil
			}
			return advAddrs("127.0.0.1")
		},
		"public-then-mapped": func(n int) []netip.Addr {
			if n == 0 {
				return advAddrs(public)
			}
			return advAddrs("::ffff:127.0.0.1")
		},
		"public-then-v6": func(n int) []netip.Addr {
			if n == 0 {
				return advAddrs(public)
			}
			return advAddrs("::1")
		},
		// The loopback address last, after public ones (the dial tries
		// each in turn).
		"public-then-public-and-loopback": func(n int) []netip.Addr {
			if n == 0 {
				return advAddrs(public)
			}
			return advAddrs("127.0.0.1", "::1")
		},
	}
	for name, answer := range cases {
		host := name + ".example"
		res := &advResolver{fn: func(h string, n int) ([]netip.Addr, error) {
			if h != host {
				return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
			}
			return answer(n), nil
		}}
		f, _ := advFetcher(t, fetcher.Options{Resolver: res})
		before := s.hits.Load()
		_, err := fetch(t, f, "http://"+host+":"+s.port+"/")
		if err == nil {
			t.Errorf("%s: fetched", name)
			continue
		}
		if s.hits.Load() != before {
			t.Errorf("%s: the request reached the loopback server", name)
		}
		advNoURL(t, name, err, host, s.port)
	}
}

func TestAdversary_GuardRedirects(t *testing.T) {
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
	res := &advResolver{fn: func(h string, n int) ([]netip.Addr, error) {
		switch h {
		case "localhost", "inner.example":
			return advAddrs("127.0.0.1"), nil
		case "outer.example":
			return advAddrs("127.0.0.1"), nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: h, IsNotFound: true}
	}}
	// Only the outer site is exempt from the guard: a test server that
	// stands for a public site.
	f, _ := advFetcher(t, fetcher.Options{Resolver: res, Exempt: func(ap netip.AddrPort) bool {
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
			advNoURL(t, "redirect to "+to, err, p, "etc/passwd", "169.254")
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
	// A redirect loop ends.
	loop := outer.URL + "/loop"
	start := time.Now()
	if _, err := fetch(t, f, loop); err == nil {
		t.Error("redirect loop: fetched")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("redirect loop took %s", time.Since(start))
	}
}

func TestAdversary_Ports(t *testing.T) {
	res := &advResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		t.Errorf("resolved %s for a URL with a bad port", h)
		return nil, errors.New("no")
	}}
	f, dials := advFetcher(t, fetcher.Options{Resolver: res})
	for _, port := range []string{"0", "65536", "99999", "4294967377", "18446744073709551696", "-1", "+80", "0x50", "80a", "８０"} {
		_, err := fetch(t, f, "http://public.example:"+port+"/")
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Status != http.StatusUnprocessableEntity || te.Hint == "" {
			t.Errorf("port %s: %v", port, err)
		}
	}
	// With AllowPrivate too: a port out of range is never dialled.
	g, dials2 := advFetcher(t, fetcher.Options{AllowPrivate: true, Resolver: res})
	for _, port := range []string{"0", "65536", "99999", "4294967377"} {
		if _, err := fetch(t, g, "http://127.0.0.1:"+port+"/"); err == nil {
			t.Errorf("allow-private, port %s: fetched", port)
		}
	}
	if dials.Load() != 0 || dials2.Load() != 0 {
		t.Fatalf("dialled for bad ports: %d, %d", dials.Load(), dials2.Load())
	}
}

func TestAdversary_ErrorsNeverNameTheURL(t *testing.T) {
	// A closed loopback port: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
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
	res := &advResolver{fn: func(h string, _ int) ([]netip.Addr, error) {
		if h == "secret-internal-name.example" {
			return nil, &net.DNSError{Err: "no such host", Name: h, Server: "10.1.1.1:53", IsNotFound: true}
		}
		if h == "weird.example" {
			return nil, errors.New("resolver exploded for weird.example at 10.1.1.1:53")
		}
		return advAddrs("127.0.0.1"), nil
	}}
	f, _ := advFetcher(t, fetcher.Options{Resolver: res, AllowPrivate: true, Timeout: 500 * time.Millisecond})
	g, _ := advFetcher(t, fetcher.Options{Resolver: res})
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
		advNoURL(t, c.u, err, "secret-path", "abc123", "secret-internal-name", "weird.example", "10.1.1.1", "hunter2", u.Port())
	}
}

// advJSONSite serves body as JSON on every path.
func advJSONSite(t *testing.T, body string) *site {
	return newSite(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	})
}

func TestAdversary_JQBounds(t *testing.T) {
	t.Setenv("SIFTBATCH_ADV_SECRET", "s3cr3t-env-value")
	s := advJSONSite(t, `{"items":[{"name":"a"},{"name":"b"}],"n":1}`)
	f, _ := advFetcher(t, fetcher.Options{AllowPrivate: true, MaxBody: 64 << 10})
	run := func(program string) (engine.Result, time.Duration, error) {
		t.Helper()
		if err := f.Check(engine.Target{URL: s.URL, Options: engine.Options{JQ: program}}); err != nil {
			t.Fatalf("jq %s: refused at submit: %v", program, err)
		}
		start := time.Now()
		res, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: s.URL + "/", Options: engine.Options{JQ: program}})
		return res, time.Since(start), err
	}
	// Programs that never end: failed with a hint within the second (and
	// some slack for the race detector).
	for _, p := range []string{
		"def f: f; f", "repeat(1) | empty", "last(range(1e18))", "[range(1e18)] | length",
		"def f: [f]; f", "until(false; .)", "[limit(1e12; repeat(.))] | length", "reduce range(1e18) as $i (0; . + 1)",
		"[recurse(.+1; true)] | length", "first(range(1e18) | select(. < 0))",
	} {
		_, took, err := run(p)
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Hint == "" {
			t.Errorf("jq %s: %v, want a failed target with a hint", p, err)
		}
		if took > 5*time.Second {
			t.Errorf("jq %s: ran %s, bound 1 s", p, took)
		}
	}
	// Programs with enormous output: failed, the output never kept.
	for _, p := range []string{"range(1e9)", "repeat(.)", "[range(1e5)] | ., ., ., ., .", "\"x\" * 100000 | ., ."} {
		res, took, err := run(p)
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Hint == "" || len(res.Content) > 0 {
			t.Errorf("jq %s: %v (content %d bytes), want a failed target", p, err, len(res.Content))
		}
		if took > 5*time.Second {
			t.Errorf("jq %s: ran %s", p, took)
		}
	}
	// Output just under the cap is kept.
	res, _, err := run(`"x" * 60000`)
	if err != nil || len(res.Content) != 60002 {
		t.Errorf("60 KB output: %d bytes, %v", len(res.Content), err)
	}
	// No environment, no files, no input beyond the page.
	for _, p := range []string{"env", "$ENV", "[env[]] | length", "$ENV | keys", "[inputs]", "try input catch \"none\""} {
		if f.Check(engine.Target{Options: engine.Options{JQ: p}}) != nil {
			continue // refused at submit: fine
		}
		res, _, err := run(p)
		if err == nil && strings.Contains(res.Content, "s3cr3t-env-value") {
			t.Errorf("jq %s: leaks the environment: %s", p, res.Content)
		}
		if err == nil && (p == "env" || p == "$ENV") && res.Content != "{}" {
			t.Errorf("jq %s: %s, want {}", p, res.Content)
		}
		if err != nil {
			advNoURL(t, p, err, s.port)
		}
	}
	// Failing programs: the error is the program's, the page is not.
	for _, p := range []string{"error(\"custom\")", "halt_error", ".items | .[\"x\"]", "null | implode", "\"x\" * 3000000000"} {
		_, _, err := run(p)
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Hint == "" {
			t.Errorf("jq %s: %v, want a failed target with a hint", p, err)
			continue
		}
		if len(te.Msg) > engine.MaxErrorBytes {
			t.Errorf("jq %s: error of %d bytes", p, len(te.Msg))
		}
	}
}

func TestAdversary_JQOnHostilePages(t *testing.T) {
	pages := map[string]string{
		"deep":       strings.Repeat("[", 200000) + strings.Repeat("]", 200000),
		"not json":   "<html>" + strings.Repeat("x", 1000),
		"two values": `{"a":1} {"b":2}`,
		"big number": `{"n":1` + strings.Repeat("0", 100000) + `}`,
		"nan":        `{"n":NaN}`,
		"bad utf-8":  "{\"s\":\"\xff\xfe\"}",
		"dup keys":   `{"a":1,"a":2}`,
		"huge":       `[` + strings.Repeat(`1,`, 200000) + `1]`,
	}
	for name, body := range pages {
		s := advJSONSite(t, body)
		f, _ := advFetcher(t, fetcher.Options{AllowPrivate: true, MaxBody: 1 << 20})
		start := time.Now()
		_, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: s.URL, Options: engine.Options{JQ: "[.. | numbers] | length"}})
		if time.Since(start) > 5*time.Second {
			t.Errorf("%s: took %s", name, time.Since(start))
		}
		if err != nil {
			var te *engine.TargetError
			if !errors.As(err, &te) || te.Hint == "" {
				t.Errorf("%s: %v, want a failed target with a hint", name, err)
			}
		}
	}
}

func TestAdversary_GrepBounds(t *testing.T) {
	line := strings.Repeat("a", 1<<16) // under the race detector, RE2 on 2 MiB takes more than the filters' 1 s
	s := newSite(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(line + "\nneedle\r\n" + line + "b\n\n\n"))
	})
	f, _ := advFetcher(t, fetcher.Options{AllowPrivate: true})
	for _, c := range []struct {
		re    string
		lines int
	}{
		{"needle", 1}, {"(a+)+b", 1}, {"(?i)NEEDLE", 1}, {"^$", 2}, {"(a|aa)*c", 0}, {"\\r", 0}, {"(?s).", 3},
	} {
		if err := f.Check(engine.Target{Options: engine.Options{Grep: c.re}}); err != nil {
			t.Fatalf("grep %q refused: %v", c.re, err)
		}
		start := time.Now()
		res, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: s.URL, Options: engine.Options{Grep: c.re}})
		if err != nil {
			t.Fatalf("grep %q: %v", c.re, err)
		}
		if n, _ := res.Meta["grep_lines"].(int); n != c.lines {
			t.Errorf("grep %q: %v lines, want %d", c.re, res.Meta["grep_lines"], c.lines)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("grep %q took %s", c.re, time.Since(start))
		}
	}
	for _, re := range []string{"(", "a{1001}", "x{2,1}", "\\p{Nope}", strings.Repeat("(", 2000) + strings.Repeat(")", 2000), "a**", "(?<!a)b", "\\1"} {
		err := f.Check(engine.Target{Options: engine.Options{Grep: re}})
		if err == nil {
			t.Errorf("grep %.40q accepted", re)
			continue
		}
		if len(err.Error()) > 4096 {
			t.Errorf("grep %.40q: error of %d bytes", re, len(err.Error()))
		}
	}
}
