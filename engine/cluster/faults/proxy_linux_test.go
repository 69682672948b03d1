package faults

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// delayProxy is a TCP proxy of the harness: this kernel has no netem
// qdisc, so delay is added in user space. It listens on the hub and
// forwards each connection to one node's address; every chunk read
// either way is written on after the delay set at the time it was read
// (order kept; throughput not bounded).
type delayProxy struct {
	ln     net.Listener
	target string
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	delay  atomic.Int64 // nanoseconds
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func newDelayProxy(ln net.Listener, target string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *delayProxy {
	p := &delayProxy{ln: ln, target: target, dial: dial, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p
}

// setDelay sets the delay of each chunk from now on.
func (p *delayProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *delayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out, err := p.dial(ctx, "tcp", p.target)
			cancel()
			if err != nil || !p.track(out) {
				in.Close()
				return
			}
			var pair sync.WaitGroup
			pair.Add(2)
			go func() { defer pair.Done(); p.pipe(out, in) }()
			go func() { defer pair.Done(); p.pipe(in, out) }()
			pair.Wait()
			in.Close()
			out.Close()
		}()
	}
}

// chunk is bytes read at a time.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies from src to dst, each chunk delayed; it closes dst's write
// side (or dst) when src ends.
func (p *delayProxy) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{data: buf[:n], due: time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range ch {
		if failed {
			continue // drain: the reader ends when src is closed
		}
		if wait := time.Until(c.due); wait > 0 {
			<-time.After(wait) // the fault itself: the chunk's delay
		}
		if _, err := dst.Write(c.data); err != nil {
			failed = true
			src.Close()
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		dst.Close()
	}
}

// close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
