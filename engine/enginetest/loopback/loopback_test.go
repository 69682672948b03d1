package loopback

import (
	"net"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPorts_DistinctFreeAndOutsideTheEphemeralRange: the ports are
// distinct, bindable once returned, and outside the kernel's range.
func TestPorts_DistinctFreeAndOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	ports, err := Ports(9)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := pickRange()
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if p < lo || p > hi || p >= 32768 && p <= 60999 {
			t.Errorf("port %d: outside %d-%d, or in the kernel's default ephemeral range", p, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		_ = l.Close()
	}
}
