package connlimit_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sift/batch/engine/connlimit"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// setup serves on a loopback listener through a Limiter with o; GET /block
// holds its answer until release is closed. It returns the server's
// address.
func setup(t *testing.T, o connlimit.Options) (*connlimit.Limiter, string, chan struct{}) {
	t.Helper()
	lim, err := connlimit.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /block", func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "done")
	})
	srv := &http.Server{Handler: mux, ConnState: lim.ConnState, ReadHeaderTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lim.Listener(ln)) }()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		_ = srv.Close()
		<-done
	})
	return lim, ln.Addr().String(), release
}

// client is one raw keep-alive connection, from local address from.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr, from string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// get sends GET path and reads its answer; an error if the connection
// was closed.
func (c *client) get(path string) error {
	if _, err := io.WriteString(c.c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if err != nil { // the answer cut short: the connection was closed
		return err
	}
	if res.StatusCode != http.StatusOK {
		return errors.New(res.Status)
	}
	return err
}

// send sends GET path without reading its answer.
func (c *client) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c.c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// closed reports whether the server closed the connection: false if it
// is still open after 30 seconds, or sent a byte.
func (c *client) closed() bool {
	_ = c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := c.r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestLimiter_PerAddrClosesIdleFirst(t *testing.T) {
	lim, addr, _ := setup(t, connlimit.Options{Max: 10, PerAddr: 2})
	// a goes idle before b: the server marks a connection idle after its
	// answer is written, so a client can read its answer first. Waiting on
	// the Limiter's idle list keeps a the longest idle.
	a := dial(t, addr, "127.0.0.1")
	if err := a.get("/ok"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a idle", func() bool { return connlimit.IdleCount(lim) == 1 })
	b := dial(t, addr, "127.0.0.1")
	if err := b.get("/ok"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "b idle", func() bool { return connlimit.IdleCount(lim) == 2 })
	// A third from the same address: a, the longest idle, makes room.
	c := dial(t, addr, "127.0.0.1")
	if err := c.get("/ok"); err != nil {
		t.Fatalf("third connection: %v", err)
	}
	if !a.closed() {
		t.Error("the oldest idle connection is still open")
	}
	if err := b.get("/ok"); err != nil {
		t.Errorf("the second connection: %v", err)
	}
	if lim.ClosedIdle() != 1 {
		t.Errorf("ClosedIdle = %d, want 1", lim.ClosedIdle())
	}
	// Another address is not counted with them.
	if err := dial(t, addr, "127.0.0.2").get("/ok"); err != nil {
		t.Errorf("another address: %v", err)
	}
}

func TestLimiter_RefusesWhenNoneIdle(t *testing.T) {
	lim, addr, release := setup(t, connlimit.Options{Max: 10, PerAddr: 2})
	a := dial(t, addr, "127.0.0.1")
	b := dial(t, addr, "127.0.0.1")
	a.send(t, "/block")
	b.send(t, "/block")
	testkit.WaitFor(t, "both connections busy", func() bool { return lim.Open() == 2 && busy(lim) })
	c := dial(t, addr, "127.0.0.1")
	if !c.closed() {
		t.Fatal("a third connection with none idle was served")
	}
	if per, all := lim.Refused(); per != 1 || all != 0 {
		t.Errorf("Refused = %d, %d; want 1, 0", per, all)
	}
	close(release)
	for _, x := range []*client{a, b} {
		if _, err := http.ReadResponse(x.r, nil); err != nil {
			t.Errorf("a busy connection's answer: %v", err)
		}
	}
}

func TestLimiter_OverallCap(t *testing.T) {
	lim, addr, release := setup(t, connlimit.Options{Max: 2, PerAddr: 2})
	// Each step waits on the Limiter's idle list before the next: a
	// connection is idle from its accept until its request is read, and
	// goes idle again only after its client may have read the answer.
	a := dial(t, addr, "127.0.0.1")
	if err := a.get("/ok"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a idle", func() bool { return lim.Open() == 1 && connlimit.IdleCount(lim) == 1 })
	b := dial(t, addr, "127.0.0.2")
	b.send(t, "/block")
	// a stays idle, so one idle of two open means b's request was read.
	testkit.WaitFor(t, "b busy", func() bool { return lim.Open() == 2 && connlimit.IdleCount(lim) == 1 })
	// A third address: a, idle, makes room.
	c := dial(t, addr, "127.0.0.3")
	if err := c.get("/ok"); err != nil {
		t.Fatalf("third address: %v", err)
	}
	if !a.closed() {
		t.Error("the idle connection is still open")
	}
	testkit.WaitFor(t, "c idle", func() bool { return lim.Open() == 2 && connlimit.IdleCount(lim) == 1 })
	c.send(t, "/block")
	testkit.WaitFor(t, "c busy", func() bool { return lim.Open() == 2 && busy(lim) })
	// None idle: refused.
	if d := dial(t, addr, "127.0.0.4"); !d.closed() {
		t.Fatal("a connection past the overall cap was served")
	}
	if per, all := lim.Refused(); per != 0 || all != 1 {
		t.Errorf("Refused = %d, %d; want 0, 1", per, all)
	}
	close(release)
}

// busy reports whether no connection of lim is idle: a new one from a
// fresh address (past its caps) would be refused. It asks through a
// test hook rather than a sleep.
func busy(lim *connlimit.Limiter) bool { return connlimit.IdleCount(lim) == 0 }

func TestMaxFromLimit(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		want  int
	}{
		{20000, 16384},
		{1 << 20, connlimit.MaxDefault},
		{4096, 3584},
		{1024, 768},
		{300, 150},
		{1, 1},
	} {
		if got := connlimit.MaxFromLimit(tc.limit); got != tc.want {
			t.Errorf("MaxFromLimit(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
	if m, limit := connlimit.DefaultMax(); limit != 0 && m != connlimit.MaxFromLimit(limit) {
		t.Errorf("DefaultMax = %d for a limit of %d", m, limit)
	}
}

func TestNew_Negative(t *testing.T) {
	if _, err := connlimit.New(connlimit.Options{Max: -1}); err == nil {
		t.Error("Max -1: no error")
	}
}
