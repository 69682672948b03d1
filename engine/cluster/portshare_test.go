package cluster

import (
	"errors"
	"io"
	"net"
	"testing"
)

// TestSharedListener_ViewsTakeTurns: a node's manage port stays bound
// across its incarnations: each view accepts the port's connections until
// it is closed or the next view is made; a connection with no view is
// closed; close ends the view (and the port's goroutine: goleak).
func TestSharedListener_ViewsTakeTurns(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := share(l)
	addr := l.Addr().String()
	accept := func(v net.Listener, what string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := v.Accept()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_ = got.Close()
	}
	refused := func(what string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("%s: read %d, %v: want EOF (closed by the port)", what, n, err)
		}
	}

	refused("before any view")
	first := s.view()
	if first.Addr().String() != addr {
		t.Errorf("view's address %s, want %s", first.Addr(), addr)
	}
	accept(first, "first view")
	second := s.view()
	if _, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("first view after the second was made: %v, want net.ErrClosed", err)
	}
	accept(second, "second view")
	_ = second.Close()
	refused("after the view closed")
	third := s.view()
	s.close()
	if _, err := third.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a view after close: %v, want net.ErrClosed", err)
	}
}
