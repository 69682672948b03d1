package testkit

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/sift/batch/engine/enginetest/loopback"
)

// Ports returns n distinct loopback ports for a process that must be told
// its ports before it starts, and binds them itself (a `serve --cluster`
// child: its peers are named on its command line), picked outside the
// kernel's ephemeral range: see package
// github.com/sift/batch/engine/enginetest/loopback. A test that serves in its own
// process hands over a listener instead, and never needs this.
func Ports(tb testing.TB, n int) []int {
	tb.Helper()
	ports, err := loopback.Ports(n)
	if err != nil {
		tb.Fatal(err)
	}
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
