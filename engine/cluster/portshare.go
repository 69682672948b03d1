package cluster

import (
	"net"
	"sync"
)

// sharedListener keeps a node's manage port bound for the node's whole
// life, across its incarnations (rejoin.go): each incarnation's health
// endpoint serves a view of it ([sharedListener.view]) that its server may
// close, while the port itself stays the node's until [sharedListener.close].
// Nothing else can take the port between one incarnation and the next.
type sharedListener struct {
	l    net.Listener
	mu   sync.Mutex
	cur  *listenerView // the view connections go to now; nil: none
	done sync.WaitGroup
}

// share starts accepting on l, handing each connection to the view of the
// moment (closing it when there is none).
func share(l net.Listener) *sharedListener {
	s := &sharedListener{l: l}
	s.done.Go(s.accept)
	return s
}

func (s *sharedListener) accept() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return // closed: close ends the node's use of the port
		}
		s.mu.Lock()
		v := s.cur
		s.mu.Unlock()
		if v == nil {
			_ = c.Close()
			continue
		}
		select {
		case v.conns <- c:
		case <-v.closed:
			_ = c.Close()
		}
	}
}

// view returns a listener on the shared port for one incarnation: it
// accepts the port's connections from now until it is closed, or until
// the next view is made.
func (s *sharedListener) view() net.Listener {
	v := &listenerView{addr: s.l.Addr(), conns: make(chan net.Conn), closed: make(chan struct{})}
	s.mu.Lock()
	old := s.cur
	s.cur = v
	s.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return v
}

// close closes the port and the view of the moment, and waits for the
// port's accepting goroutine (which may be handing that view a
// connection: the view is closed first).
func (s *sharedListener) close() {
	s.mu.Lock()
	v := s.cur
	s.cur = nil
	s.mu.Unlock()
	if v != nil {
		_ = v.Close()
	}
	_ = s.l.Close()
	s.done.Wait()
}

// listenerView is one incarnation's listener on a [sharedListener].
type listenerView struct {
	addr   net.Addr
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func (v *listenerView) Accept() (net.Conn, error) {
	select {
	case c := <-v.conns:
		return c, nil
	case <-v.closed:
		return nil, net.ErrClosed
	}
}

func (v *listenerView) Close() error {
	v.once.Do(func() { close(v.closed) })
	return nil
}

func (v *listenerView) Addr() net.Addr { return v.addr }
