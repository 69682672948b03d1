package fetcher

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// staticResolver answers host lookups from a table, never from DNS.
type staticResolver map[string][]string

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	as, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// newChecker returns a fetcher for the checks that dial nothing.
func newChecker(t *testing.T, o Options) *Fetcher {
	t.Helper()
	f, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// TestGuard_Control: the dial guard on its own, on an address it is
// handed (it dials nothing itself).
func TestGuard_Control(t *testing.T) {
	g := newChecker(t, Options{Resolver: staticResolver{}})
	if err := g.control("tcp4", "127.0.0.1:80", nil); !errors.Is(err, errAddrRefused) {
		t.Fatalf("control: %v", err)
	}
	if err := g.control("tcp4", "93.184.216.34:80", nil); err != nil {
		t.Fatalf("control on a public address: %v", err)
	}
}

func TestGuard_PublicAddresses(t *testing.T) {
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
}

// TestFetcher_RedirectPolicy: the client's redirect policy on its own.
func TestFetcher_RedirectPolicy(t *testing.T) {
	g := newChecker(t, Options{Resolver: staticResolver{
		"internal.example": {"10.1.2.3"},
		"mixed.example":    {"93.184.216.34", "192.168.1.1"},
	}})
	req := func(u string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	via := func(n int) []*http.Request {
		var v []*http.Request
		for i := 0; i < n; i++ {
			v = append(v, req("http://93.184.216.34/"))
		}
		return v
	}
	policy := g.client.CheckRedirect
	// Following redirect number n, via holds the first request and the
	// n-1 redirects before it.
	if err := policy(req("http://93.184.216.34/next"), via(DefaultMaxRedirects)); err != nil {
		t.Fatalf("redirect %d of %d: %v", DefaultMaxRedirects, DefaultMaxRedirects, err)
	}
	if err := policy(req("http://93.184.216.34/next"), via(DefaultMaxRedirects+1)); !errors.Is(err, errTooManyRedirects) {
		t.Fatalf("redirect %d: %v, want errTooManyRedirects", DefaultMaxRedirects+1, err)
	}
	for _, u := range []string{"http://10.0.0.1/", "http://[fe80::1]/", "http://internal.example/", "http://mixed.example/", "http://0177.0.0.1/"} {
		if err := policy(req(u), via(1)); !errors.Is(err, errAddrRefused) {
			t.Errorf("redirect to %s: %v, want errAddrRefused", u, err)
		}
	}
	if err := policy(req("gopher://93.184.216.34/"), via(1)); !errors.Is(err, errBadURL) {
		t.Errorf("redirect to gopher: %v, want errBadURL", err)
	}
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

// TestGuard_SpecialPurpose: every block the IANA special-purpose
// registries mark not globally reachable is refused, at its edges; the
// globally reachable ones inside refused blocks, and ordinary public
// addresses, pass.
func TestGuard_SpecialPurpose(t *testing.T) {
	refused := []string{
		// IPv4: this network, documentation, benchmarking, reserved,
		// broadcast, IETF assignments, the 6to4 relay, shared space.
		"0.0.0.1", "0.255.255.255", "192.0.2.1", "192.0.2.255", "198.51.100.7", "203.0.113.200",
		"198.18.0.1", "198.19.255.255", "240.0.0.1", "254.255.255.255", "255.255.255.255",
		"192.0.0.1", "192.0.0.8", "192.0.0.170", "192.0.0.255", "192.88.99.1", "100.64.0.1", "100.127.255.255",
		// IPv6: documentation (both), benchmarking, discard, dummy,
		// SRv6, IETF assignments, Teredo, 6to4, ORCHID (deprecated),
		// local-use translation, NAT64 of a private address, outside
		// global unicast, site-local.
		"2001:db8::1", "2001:db8:ffff::1", "3fff::1", "3fff:fff::1", "2001:2::1", "100::1", "100:0:0:1::1",
		"5f00::1", "2001::1", "2001:0:4136:e378::1", "2002:c000:204::1", "2001:10::1", "64:ff9b:1::1",
		"64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b::c000:201", "4000::1", "::2", "fec0::1",
		// Multicast.
		"224.0.0.1", "239.255.255.255", "ff02::1", "ff0e::1",
	}
	for _, a := range refused {
		if publicAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s passes the guard", a)
		}
	}
	reachable := []string{
		"192.0.0.9", "192.0.0.10", "192.31.196.1", "192.52.193.1", "192.175.48.1",
		"2001:1::1", "2001:1::2", "2001:1::3", "2001:3::1", "2001:4:112::1", "2001:20::1", "2001:30::1",
		"2620:4f:8000::1", "64:ff9b::808:808",
		"93.184.216.34", "1.1.1.1", "2606:4700::1111", "2a00:1450:4001::1",
	}
	for _, a := range reachable {
		if !publicAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s is refused, though globally reachable", a)
		}
	}
}

// TestGuard_OwnAddresses: the host's own interface addresses are refused,
// a public one too, by the URL check and at the dial.
func TestGuard_OwnAddresses(t *testing.T) {
	g := newChecker(t, Options{Resolver: staticResolver{"self.example": {"93.184.216.34"}}})
	g.local.read = func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("2a00:1450:4001::1")}, nil
	}
	for _, u := range []string{"http://93.184.216.34/", "http://self.example/", "https://[2a00:1450:4001::1]/", "http://[::ffff:93.184.216.34]/"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if err := g.checkURL(context.Background(), req.URL); !errors.Is(err, errAddrRefused) {
			t.Errorf("%s: %v, want errAddrRefused", u, err)
		}
	}
	if err := g.control("tcp4", "93.184.216.34:443", nil); !errors.Is(err, errAddrRefused) {
		t.Errorf("control: %v", err)
	}
	if err := g.control("tcp4", "93.184.216.35:443", nil); err != nil {
		t.Errorf("control on another public address: %v", err)
	}
	// The host's real interfaces are read when no reader is set.
	var l localAddrs
	if !l.has(netip.MustParseAddr("127.0.0.1")) {
		t.Error("127.0.0.1 is not among the host's own addresses")
	}
}
