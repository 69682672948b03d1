package testkit

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Ports returns n distinct loopback ports for a process that must be told
// its ports before it starts, and binds them itself (a `serve --cluster`
// child: its peers are named on its command line). A test that serves in
// its own process hands over a listener instead, and never needs this.
//
// A port closed and bound again later may be taken meanwhile; a port the
// kernel hands out (to any bind of port 0, or any outgoing connection) is
// the likeliest to be. So each port is picked outside the kernel's
// ephemeral range (net.ipv4.ip_local_port_range: 32768-60999 by default),
// where no kernel allocation lands, found free by binding it; the binds are
// held until all n are picked, then released for the child. What could
// still take one is another program that names that very port: a test
// elsewhere that picked the same one of some 20,000 at the same moment.
func Ports(tb testing.TB, n int) []int {
	tb.Helper()
	lo, hi := pickRange()
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			tb.Fatalf("no %d free loopback ports in %d-%d", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use, or held already by this pick
		}
		held = append(held, l)
		ports = append(ports, p)
	}
	return ports
}

// pickRange returns the ports Ports picks from: below the kernel's
// ephemeral range, or above it if it leaves too little below.
func pickRange() (lo, hi int) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			z, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= z {
				elo, ehi = a, z
			}
		}
	}
	switch {
	case elo-1 >= 12000:
		return 10000, elo - 1
	case 65535-ehi >= 2000:
		return ehi + 1, 65535
	default:
		return 1024, 65535 // the whole range is ephemeral: pick anywhere
	}
}

// RefusedAddr returns a loopback HOST:PORT that refuses connections for the
// whole test: its port is bound by a socket that never listens, so nothing
// else can take it (a port merely closed could be taken, and a connection
// then answered). The socket is closed when the test ends.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("refused address: socket: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("refused address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("refused address: %v", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("refused address: bound to %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in.Port)
}
