package activation

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listenerFD returns a descriptor of a new loopback listener, dup'd to a
// number of its own, and the listener's address.
func listenerFD(t *testing.T) (int, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd, l.Addr().String()
}

// TestFromEnv: sockets handed (taken from their descriptors: the
// descriptors are closed) to this pid are taken by address, once;
// those meant for another pid, or none, make an empty set; a bad count is
// an error.
func TestFromEnv(t *testing.T) {
	fd1, addr1 := listenerFD(t)
	fd2, addr2 := listenerFD(t)
	s, err := fromEnv(strconv.Itoa(os.Getpid()), "1", os.Getpid(), fd2)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := fromEnv(strconv.Itoa(os.Getpid()), "1", os.Getpid(), fd1)
	if err != nil {
		t.Fatal(err)
	}
	s.ls[addr1] = s1.ls[addr1] // one set of both: a supervisor hands them as 3, 4
	if _, ok := s.Take("127.0.0.1:0"); ok {
		t.Error("Take of port 0 found a socket")
	}
	l, ok := s.Take(addr2)
	if !ok {
		t.Fatalf("no socket for %s", addr2)
	}
	if _, ok := s.Take(addr2); ok {
		t.Error("a socket taken twice")
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	c, err := net.Dial("tcp", addr2)
	if err != nil {
		t.Fatalf("dial the socket taken: %v", err)
	}
	_ = c.Close()
	_ = l.Close()
	// Listen takes the one left, or binds.
	l1, err := s.Listen(addr1)
	if err != nil || l1.Addr().String() != addr1 {
		t.Fatalf("Listen %s: %v %v", addr1, l1, err)
	}
	_ = l1.Close()
	l3, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = l3.Close()
	s.Close()

	for _, tc := range []struct{ pid, fds string }{{"", ""}, {"1", "2"}, {strconv.Itoa(os.Getpid()), ""}} {
		s, err := fromEnv(tc.pid, tc.fds, os.Getpid(), 1000)
		if err != nil || len(s.ls) != 0 {
			t.Errorf("LISTEN_PID %q LISTEN_FDS %q: %d sockets, %v; want none", tc.pid, tc.fds, len(s.ls), err)
		}
	}
	if _, err := fromEnv(strconv.Itoa(os.Getpid()), "x", os.Getpid(), 1000); err == nil {
		t.Error("LISTEN_FDS x: no error")
	}
	// A descriptor that is not a socket is an error, and nothing is kept.
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fromEnv(strconv.Itoa(os.Getpid()), "1", os.Getpid(), fd); err == nil {
		t.Error("a file handed as a socket: no error")
	}
}
