package testkit

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/sift/batch/engine/enginetest/loopback"
)

// HeldPorts returns n distinct loopback ports held for the test, for a
// process that must be told its ports before it starts (a `serve
// --cluster` child: its peers are named on its command line): hand it
// listening sockets on them ([loopback.Port.Listen], [loopback.Command]),
// never their numbers alone to bind. The ports are given up when the test
// ends; meanwhile nothing else can take them, and while no process
// listens on one a connection to it is refused. A test that serves in its
// own process hands over a listener instead, and never needs this.
func HeldPorts(tb testing.TB, n int) []*loopback.Port {
	tb.Helper()
	ports, err := loopback.HoldN(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, p := range ports {
			p.Close()
		}
	})
	return ports
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
