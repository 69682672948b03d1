package fetcher

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// special lists the IANA special-purpose address registries (IPv4 and
// IPv6), each block with its "globally reachable" flag; the guard refuses
// an address whose most specific block here is not globally reachable.
// The deprecated blocks the registries mark "N/A" (6to4, Teredo, ORCHID,
// the 6to4 relay anycast) are refused too, as are IPv4-compatible IPv6
// addresses and deprecated site-local ones. Multicast, and IPv6 outside
// 2000::/3 (global unicast) but for the translation prefix, are refused by
// publicAddr itself.
var special = []struct {
	prefix    netip.Prefix
	reachable bool
}{
	// IPv4.
	{netip.MustParsePrefix("0.0.0.0/8"), false},        // "this network"
	{netip.MustParsePrefix("10.0.0.0/8"), false},       // private-use
	{netip.MustParsePrefix("100.64.0.0/10"), false},    // shared address space
	{netip.MustParsePrefix("127.0.0.0/8"), false},      // loopback
	{netip.MustParsePrefix("169.254.0.0/16"), false},   // link-local
	{netip.MustParsePrefix("172.16.0.0/12"), false},    // private-use
	{netip.MustParsePrefix("192.0.0.0/24"), false},     // IETF protocol assignments
	{netip.MustParsePrefix("192.0.0.9/32"), true},      // port control protocol anycast
	{netip.MustParsePrefix("192.0.0.10/32"), true},     // traversal using relays around NAT anycast
	{netip.MustParsePrefix("192.0.2.0/24"), false},     // documentation (TEST-NET-1)
	{netip.MustParsePrefix("192.31.196.0/24"), true},   // AS112-v4
	{netip.MustParsePrefix("192.52.193.0/24"), true},   // AMT
	{netip.MustParsePrefix("192.88.99.0/24"), false},   // deprecated 6to4 relay anycast
	{netip.MustParsePrefix("192.168.0.0/16"), false},   // private-use
	{netip.MustParsePrefix("192.175.48.0/24"), true},   // direct delegation AS112 service
	{netip.MustParsePrefix("198.18.0.0/15"), false},    // benchmarking
	{netip.MustParsePrefix("198.51.100.0/24"), false},  // documentation (TEST-NET-2)
	{netip.MustParsePrefix("203.0.113.0/24"), false},   // documentation (TEST-NET-3)
	{netip.MustParsePrefix("240.0.0.0/4"), false},      // reserved, and the limited broadcast address
	{netip.MustParsePrefix("::/96"), false},            // IPv4-compatible (deprecated), unspecified, loopback
	{netip.MustParsePrefix("::ffff:0:0:0/96"), false},  // IPv4-translated
	{netip.MustParsePrefix("64:ff9b::/96"), true},      // IPv4-IPv6 translation: the IPv4 address inside is checked
	{netip.MustParsePrefix("64:ff9b:1::/48"), false},   // local-use IPv4-IPv6 translation
	{netip.MustParsePrefix("100::/64"), false},         // discard-only
	{netip.MustParsePrefix("100:0:0:1::/64"), false},   // dummy IPv6 prefix
	{netip.MustParsePrefix("2001::/23"), false},        // IETF protocol assignments
	{netip.MustParsePrefix("2001:1::1/128"), true},     // port control protocol anycast
	{netip.MustParsePrefix("2001:1::2/128"), true},     // traversal using relays around NAT anycast
	{netip.MustParsePrefix("2001:1::3/128"), true},     // DNS-SD service registration protocol anycast
	{netip.MustParsePrefix("2001:3::/32"), true},       // AMT
	{netip.MustParsePrefix("2001:4:112::/48"), true},   // AS112-v6
	{netip.MustParsePrefix("2001:20::/28"), true},      // ORCHIDv2
	{netip.MustParsePrefix("2001:30::/28"), true},      // drone remote ID protocol entity tags
	{netip.MustParsePrefix("2001:db8::/32"), false},    // documentation
	{netip.MustParsePrefix("2002::/16"), false},        // 6to4
	{netip.MustParsePrefix("2620:4f:8000::/48"), true}, // direct delegation AS112 service
	{netip.MustParsePrefix("3fff::/20"), false},        // documentation
	{netip.MustParsePrefix("5f00::/16"), false},        // segment routing (SRv6) SIDs
	{netip.MustParsePrefix("fc00::/7"), false},         // unique-local
	{netip.MustParsePrefix("fe80::/10"), false},        // link-local unicast
	{netip.MustParsePrefix("fec0::/10"), false},        // site-local (deprecated)
}

// globalUnicast is IPv6's global unicast space, 2000::/3.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// nat64 is the IPv4-IPv6 translation prefix: its last 32 bits are an IPv4
// address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// publicAddr reports whether a is an address the fetcher may connect to
// without AllowPrivate: globally reachable by the special-purpose
// registries, not multicast, and, for IPv6, global unicast (or the
// translation of a public IPv4 address).
func publicAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	if nat64.Contains(a) {
		b := a.As16()
		return publicAddr(netip.AddrFrom4([4]byte(b[12:])))
	}
	best, reachable := -1, true
	for _, s := range special {
		if s.prefix.Contains(a) && s.prefix.Bits() > best {
			best, reachable = s.prefix.Bits(), s.reachable
		}
	}
	if best >= 0 {
		return reachable
	}
	return a.Is4() || globalUnicast.Contains(a)
}

// localAddrs is the host's own interface addresses, read at most once a
// minute: a public address of the host itself reaches its own services.
type localAddrs struct {
	read func() ([]netip.Addr, error) // nil: the host's interfaces

	mu    sync.Mutex
	addrs map[netip.Addr]bool
	at    time.Time
}

// localRefresh is how long the host's interface addresses are kept.
const localRefresh = time.Minute

// has reports whether a is one of the host's own addresses.
func (l *localAddrs) has(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addrs == nil || time.Since(l.at) > localRefresh {
		read := l.read
		if read == nil {
			read = interfaceAddrs
		}
		addrs, err := read()
		if err == nil || l.addrs == nil {
			l.addrs = make(map[netip.Addr]bool, len(addrs))
			for _, x := range addrs {
				l.addrs[x.Unmap().WithZone("")] = true
			}
			l.at = time.Now()
		}
	}
	return l.addrs[a]
}

// interfaceAddrs returns the addresses of the host's network interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if p, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(p.IP); ok {
				out = append(out, x)
			}
		}
	}
	return out, nil
}

// numericHost reports whether host is made only of digits, dots and hex
// notation: an IP address in a spelling netip does not accept but some
// resolvers do.
func numericHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return false
		}
		digits := strings.TrimPrefix(label, "0x")
		if digits == "" {
			return false
		}
		for _, r := range digits {
			if !(r >= '0' && r <= '9' || label != digits && r >= 'a' && r <= 'f') {
				return false
			}
		}
	}
	return true
}
