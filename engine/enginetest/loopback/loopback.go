// Package loopback holds loopback ports for processes that must be told
// their ports before they start: the serve processes of `siftbatch
// demo-cluster` and of the command's tests (their peers are named on
// their command lines, and a node restarted comes back on its ports). A
// program that serves in its own process hands a listener over instead,
// and never needs this.
//
// A port is never picked, closed and bound again by another: [Hold] binds
// it for as long as the [Port] lives, and a process is handed a listening
// socket on it ([Port.Listen], passed with [Command] as systemd's socket
// activation passes one), never its number alone. While no process
// listens on it, a connection to it is refused, as to a node that is down.
package loopback

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Port is a port of 127.0.0.1 held by this process: bound by a socket
// that never listens, with SO_REUSEPORT, so that only this process's
// sockets of the same port (its listeners) can bind it too. Its methods
// are safe for concurrent use.
type Port struct {
	mu   sync.Mutex
	fd   int // the holding socket; -1 once closed
	port int
}

// Hold binds a free port of 127.0.0.1 and holds it until [Port.Close].
func Hold() (*Port, error) {
	fd, err := reusePortSocket()
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold loopback port: bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold loopback port: %w", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold loopback port: bound to %T", sa)
	}
	return &Port{fd: fd, port: in.Port}, nil
}

// HoldN holds n distinct ports; on an error it holds none.
func HoldN(n int) ([]*Port, error) {
	ports := make([]*Port, 0, n)
	for range n {
		p, err := Hold()
		if err != nil {
			for _, q := range ports {
				q.Close()
			}
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// Number is the port's number.
func (p *Port) Number() int { return p.port }

// Addr is the port's address, 127.0.0.1:PORT.
func (p *Port) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Listen returns a new listening socket on the port, as a file to hand to
// a process ([Command]); the caller closes its copy once the process has
// started. Several may listen at once (a process being replaced): the
// kernel spreads connections between them.
func (p *Port) Listen() (*os.File, error) {
	p.mu.Lock()
	closed := p.fd < 0
	p.mu.Unlock()
	if closed {
		return nil, errors.New("listen on held port: closed")
	}
	fd, err := reusePortSocket()
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: p.port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("listen on held port %d: bind: %w", p.port, err)
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("listen on held port %d: %w", p.port, err)
	}
	return os.NewFile(uintptr(fd), p.Addr()), nil
}

// Listener is [Port.Listen] as a listener of this process.
func (p *Port) Listener() (net.Listener, error) {
	f, err := p.Listen()
	if err != nil {
		return nil, err
	}
	defer f.Close() // FileListener has its own copy
	return net.FileListener(f)
}

// Close gives the port up. It is idempotent.
func (p *Port) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		_ = syscall.Close(p.fd)
		p.fd = -1
	}
}

// reusePortSocket is a new TCP socket, close-on-exec, with SO_REUSEPORT.
func reusePortSocket() (int, error) {
	syscall.ForkLock.RLock() // no process forked meanwhile inherits it
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, fmt.Errorf("loopback port: socket: %w", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		_ = syscall.Close(fd)
		return -1, fmt.Errorf("loopback port: SO_REUSEPORT: %w", err)
	}
	return fd, nil
}

// Command is exec.Command(name, arg...) handed the listening sockets
// files as systemd's socket activation hands them (LISTEN_FDS: the files
// as descriptors 3, 4, …; LISTEN_PID: the process's own pid, which only
// a shell that then execs the program can set). Its Env is the
// environment with those two: append to it, do not replace it. The
// caller closes files once the command has started.
func Command(files []*os.File, name string, arg ...string) *exec.Cmd {
	if len(files) == 0 {
		return exec.Command(name, arg...)
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"`, name}, arg...)...)
	cmd.ExtraFiles = files
	cmd.Env = append(os.Environ(), "LISTEN_FDS="+strconv.Itoa(len(files)))
	return cmd
}
