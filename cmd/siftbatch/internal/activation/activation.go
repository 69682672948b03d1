// Package activation takes the listening sockets a supervisor hands serve,
// as systemd's socket activation hands them (sd_listen_fds(3)): LISTEN_PID
// is the process's pid, LISTEN_FDS the number of sockets, which are its
// file descriptors 3, 4, …. serve listens on such a socket where its
// address is one serve was told to listen on (--addr, --manage-addr), and
// binds the address itself otherwise. A supervisor that holds the ports
// (systemd, a test, the cluster demo) so never has a port picked, closed
// and bound again by another.
package activation

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
)

// Set is the listening sockets handed to this process, each taken once.
// Its methods are safe for concurrent use.
type Set struct {
	mu sync.Mutex
	ls map[string]net.Listener // by address, "127.0.0.1:7201"
}

var (
	inherited     *Set
	inheritedErr  error
	inheritedOnce sync.Once
)

// Inherited returns the sockets handed to this process, read from its
// environment once (and LISTEN_PID, LISTEN_FDS then unset, so that no
// child takes them for its own): an empty set if there are none.
func Inherited() (*Set, error) {
	inheritedOnce.Do(func() {
		inherited, inheritedErr = fromEnv(os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getpid(), 3)
		_ = os.Unsetenv("LISTEN_PID")
		_ = os.Unsetenv("LISTEN_FDS")
		_ = os.Unsetenv("LISTEN_FDNAMES")
	})
	return inherited, inheritedErr
}

// fromEnv takes the n sockets from descriptor first on, n being
// LISTEN_FDS, if LISTEN_PID is pid.
func fromEnv(listenPID, listenFDs string, pid, first int) (*Set, error) {
	s := &Set{ls: map[string]net.Listener{}}
	if listenPID == "" || listenFDs == "" {
		return s, nil
	}
	if p, err := strconv.Atoi(listenPID); err != nil || p != pid {
		return s, nil // meant for another process (a parent's)
	}
	n, err := strconv.Atoi(listenFDs)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("LISTEN_FDS %q is not a number of sockets", listenFDs)
	}
	for fd := first; fd < first+n; fd++ {
		f := os.NewFile(uintptr(fd), "listen-fd-"+strconv.Itoa(fd))
		l, err := net.FileListener(f)
		_ = f.Close() // l has its own copy
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("socket %d of LISTEN_FDS: %w", fd, err)
		}
		if _, ok := l.Addr().(*net.TCPAddr); !ok {
			_ = l.Close()
			s.Close()
			return nil, fmt.Errorf("socket %d of LISTEN_FDS: not TCP", fd)
		}
		s.ls[l.Addr().String()] = l
	}
	return s, nil
}

// Take returns the socket listening on addr (HOST:PORT, the host an IP
// address), and removes it from the set; false if there is none.
func (s *Set) Take(addr string) (net.Listener, bool) {
	if s == nil {
		return nil, false
	}
	ap, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil || ap.Port == 0 {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.ls[ap.String()]
	if ok {
		delete(s.ls, ap.String())
	}
	return l, ok
}

// Listen is [Set.Take] of addr, or else net.Listen("tcp", addr).
func (s *Set) Listen(addr string) (net.Listener, error) {
	if l, ok := s.Take(addr); ok {
		return l, nil
	}
	return net.Listen("tcp", addr)
}

// Close closes the sockets no one took.
func (s *Set) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, l := range s.ls {
		_ = l.Close()
		delete(s.ls, a)
	}
}
