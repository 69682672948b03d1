package fetcher

import (
	"net/netip"
	"strings"
)

// nonPublic lists the prefixes refused besides what netip's predicates
// name: "this network", shared address space, IETF protocol assignments,
// benchmarking, reserved and broadcast, and the IPv6 forms that embed an
// IPv4 address (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo), the
// discard prefix, or are deprecated site-local.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("fec0::/10"),
}

// publicAddr reports whether a is an address the fetcher may connect to
// without AllowPrivate.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
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
