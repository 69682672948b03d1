package loopback

import (
	"bufio"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("LOOPBACK_TEST_CHILD") != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}

// child is this test binary run by Command: it accepts one connection on
// the socket handed to it as descriptor 3 and says what it saw.
func child() int {
	if os.Getenv("LISTEN_PID") != strconv.Itoa(os.Getpid()) || os.Getenv("LISTEN_FDS") != "1" {
		return 2
	}
	l, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return 3
	}
	c, err := l.Accept()
	if err != nil {
		return 4
	}
	_, _ = c.Write([]byte("child " + l.Addr().String() + "\n"))
	_ = c.Close()
	_ = l.Close()
	return 0
}

// TestPort_HeldRefusedListenedAgain: a held port refuses connections and
// cannot be bound by anyone else; a listener on it accepts; once the
// listener is closed it refuses again, and a new listener takes it again;
// a port closed cannot be listened on.
func TestPort_HeldRefusedListenedAgain(t *testing.T) {
	t.Parallel()
	ports, err := HoldN(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		defer p.Close()
		if seen[p.Number()] {
			t.Fatalf("port %d held twice", p.Number())
		}
		seen[p.Number()] = true
	}
	p := ports[0]
	refused := func(when string) {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err == nil {
			_ = c.Close()
			t.Fatalf("%s: a connection to %s was accepted", when, p.Addr())
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: %v, want refused", when, err)
		}
	}
	refused("held, no listener")
	if l, err := net.Listen("tcp", p.Addr()); err == nil {
		_ = l.Close()
		t.Fatalf("another socket bound the held port %s", p.Addr())
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("another socket's bind: %v, want EADDRINUSE", err)
	}
	for round := range 2 {
		l, err := p.Listener()
		if err != nil {
			t.Fatal(err)
		}
		if l.Addr().String() != p.Addr() {
			t.Fatalf("listener on %s, want %s", l.Addr(), p.Addr())
		}
		go func() {
			if c, err := l.Accept(); err == nil {
				_ = c.Close()
			}
		}()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		_ = c.Close()
		_ = l.Close()
		// The socket's close may come after Close returns (the poller holds
		// a socket another goroutine's Accept uses until that returns): wait
		// for the refusal, with a deadline, before asserting it.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				break
			}
			_ = c.Close()
			runtime.Gosched()
		}
		refused("listener closed")
	}
	p.Close()
	p.Close() // idempotent
	if _, err := p.Listen(); err == nil {
		t.Error("Listen on a closed port: no error")
	}
}

// TestCommand_HandsTheListener: a process started by Command gets the
// listening socket as descriptor 3, with LISTEN_PID its own pid and
// LISTEN_FDS 1, and answers on the held port.
func TestCommand_HandsTheListener(t *testing.T) {
	t.Parallel()
	p, err := Hold()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := p.Listen()
	if err != nil {
		t.Fatal(err)
	}
	cmd := Command([]*os.File{f}, os.Args[0], "-test.run=^$")
	cmd.Env = append(cmd.Env, "LOOPBACK_TEST_CHILD=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	_ = c.Close()
	if err != nil || strings.TrimSpace(line) != "child "+p.Addr() {
		t.Errorf("the child said %q (%v), want %q", line, err, "child "+p.Addr())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the child: %v", err)
	}
}
