// Package connlimit bounds the connections an HTTP server holds, so that
// no client, with or without a key, can take them all: an overall cap
// below the process's file limit, a cap per client address, and, when a
// cap is reached, the longest-idle connection closed to make room for the
// new one, so that a new client is still served while idle keep-alive
// connections are what fills the server.
//
// A [Limiter] wraps the server's listener ([Limiter.Listener]) and sees
// each connection's state through [Limiter.ConnState], which must be the
// [http.Server]'s ConnState:
//
//	lim, _ := connlimit.New(connlimit.Options{})
//	srv := &http.Server{Handler: h, IdleTimeout: 10 * time.Second, ConnState: lim.ConnState}
//	srv.Serve(lim.Listener(ln))
//
// A connection is idle from its accept until its first request begins,
// and between requests (a keep-alive connection). When a new connection
// would pass a cap, the oldest idle connection (of the same address for
// the per-address cap, of any for the overall one) is closed and the new
// one takes its place; if none is idle, the new connection is closed at
// once (refused, counted by [Limiter.Refused]) rather than left in the
// kernel's queue. A connection closed as idle at the moment its next
// request arrives loses that request, as with [http.Server.Shutdown]'s
// closing of idle connections; its client sees a closed keep-alive
// connection, which HTTP clients retry for idempotent requests.
package connlimit

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// The defaults a zero [Options] field takes.
const (
	// DefaultPerAddr is the connections one client address may hold.
	DefaultPerAddr = 256
	// MaxDefault bounds [DefaultMax]: past it, connections cost more
	// memory (each holds a goroutine and its buffers) than a file limit
	// says the process can spare.
	MaxDefault = 16384
	// minHeadroom is the least of the files [DefaultMax] keeps for the
	// process's other files: the store's, the fetcher's connections and
	// its filters' pipes, a cluster's peers.
	minHeadroom = 256
)

// DefaultMax is the overall cap a zero [Options.Max] takes: the process's
// file limit (RLIMIT_NOFILE, which Go raises to its hard limit at start),
// less an eighth of it and at least 256 kept for the store, the fetcher
// and a cluster's peers, and at most [MaxDefault]. With a limit of
// 20,000: 16,384; of 1,024: 768; below 512, half the limit. It also
// returns the limit it read (0 if it could not, then the cap is 768).
func DefaultMax() (max int, limit uint64) {
	limit = fileLimit()
	if limit == 0 {
		return MaxFromLimit(1024), 0
	}
	return MaxFromLimit(limit), limit
}

// MaxFromLimit is [DefaultMax] for a file limit of limit.
func MaxFromLimit(limit uint64) int {
	if limit < 2*minHeadroom {
		return max(1, int(limit/2))
	}
	headroom := max(limit/8, minHeadroom)
	return int(min(limit-headroom, MaxDefault))
}

// Options configure a [Limiter]. A zero field takes its default; a
// negative one makes [New] fail.
type Options struct {
	// Max caps the connections held at once. Default [DefaultMax].
	Max int
	// PerAddr caps the connections of one client address (an IPv6
	// address by its /64). Behind a proxy every client has the proxy's
	// address: set it to Max there. Default [DefaultPerAddr] (256), at
	// most Max.
	PerAddr int
}

// Limiter is the connection caps of one server. Safe for concurrent use.
type Limiter struct {
	max, perAddr int

	refusedMax, refusedAddr, closedIdle atomic.Int64

	mu     sync.Mutex
	open   int
	byAddr map[string]*addrConns
	idle   list.List // of *conn, oldest idle first
}

// addrConns is one address's connections.
type addrConns struct {
	open int
	idle list.List // of *conn, oldest idle first
}

// New returns a Limiter with the options o.
func New(o Options) (*Limiter, error) {
	if o.Max < 0 || o.PerAddr < 0 {
		return nil, errors.New("connlimit: negative cap")
	}
	if o.Max == 0 {
		o.Max, _ = DefaultMax()
	}
	if o.PerAddr == 0 {
		o.PerAddr = DefaultPerAddr
	}
	return &Limiter{max: o.Max, perAddr: min(o.PerAddr, o.Max), byAddr: make(map[string]*addrConns)}, nil
}

// Max is the overall cap.
func (l *Limiter) Max() int { return l.max }

// PerAddr is the per-address cap.
func (l *Limiter) PerAddr() int { return l.perAddr }

// Refused is how many new connections were closed at once because a cap
// was reached with no idle connection to close: perAddr those over the
// per-address cap, overall those over the overall one.
func (l *Limiter) Refused() (perAddr, overall int64) {
	return l.refusedAddr.Load(), l.refusedMax.Load()
}

// ClosedIdle is how many idle connections were closed to make room.
func (l *Limiter) ClosedIdle() int64 { return l.closedIdle.Load() }

// Open is how many connections are held now.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Listener returns ln with the caps applied to what it accepts.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

// Accept returns the next connection within the caps; those past them are
// closed as they come.
func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := ln.l.admit(c); tc != nil {
			return tc, nil
		}
		_ = c.Close()
	}
}

// conn is an admitted connection. Its fields but Conn are guarded by the
// Limiter's mu.
type conn struct {
	net.Conn
	l       *Limiter
	addr    *addrConns
	key     string
	counted bool          // still among open: until Close, or closed as idle
	idleE   *list.Element // in l.idle while idle
	addrE   *list.Element // in addr.idle while idle
}

// Close closes the connection and gives its place back.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// admit takes c within the caps, closing idle connections to make room;
// nil if it cannot.
func (l *Limiter) admit(c net.Conn) *conn {
	key := addrKey(c.RemoteAddr())
	var victims []*conn
	defer func() {
		for _, v := range victims {
			_ = v.Conn.Close() // its server goroutine sees the close and ends
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.byAddr[key]
	if a == nil {
		a = &addrConns{}
		l.byAddr[key] = a
	}
	if a.open >= l.perAddr {
		v := l.oldest(&a.idle)
		if v == nil {
			l.refusedAddr.Add(1)
			l.dropEmpty(key, a)
			return nil
		}
		victims = append(victims, v)
	}
	if l.open >= l.max {
		v := l.oldest(&l.idle)
		if v == nil {
			l.refusedMax.Add(1)
			l.dropEmpty(key, a)
			return nil
		}
		victims = append(victims, v)
	}
	for _, v := range victims {
		l.forget(v)
		l.closedIdle.Add(1)
	}
	tc := &conn{Conn: c, l: l, addr: a, key: key, counted: true}
	l.open++
	a.open++
	l.setIdle(tc, true) // idle until its first request
	return tc
}

// oldest is the front of an idle list, or nil.
func (l *Limiter) oldest(idle *list.List) *conn {
	if e := idle.Front(); e != nil {
		return e.Value.(*conn)
	}
	return nil
}

// forget gives c's place back, once.
func (l *Limiter) forget(c *conn) {
	if !c.counted {
		return
	}
	c.counted = false
	l.setIdle(c, false)
	l.open--
	c.addr.open--
	l.dropEmpty(c.key, c.addr)
}

// dropEmpty forgets an address that holds no connection.
func (l *Limiter) dropEmpty(key string, a *addrConns) {
	if a.open == 0 {
		delete(l.byAddr, key)
	}
}

// setIdle puts c at the back of the idle lists, or takes it off them.
func (l *Limiter) setIdle(c *conn, idle bool) {
	if c.idleE != nil {
		l.idle.Remove(c.idleE)
		c.addr.idle.Remove(c.addrE)
		c.idleE, c.addrE = nil, nil
	}
	if idle && c.counted {
		c.idleE = l.idle.PushBack(c)
		c.addrE = c.addr.idle.PushBack(c)
	}
}

// ConnState is the [http.Server]'s ConnState: it tells the Limiter which
// connections are idle. A connection that is not one of the Limiter's
// (the server was not given [Limiter.Listener]) is ignored.
func (l *Limiter) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		l.setIdle(c, true)
	case http.StateActive, http.StateHijacked:
		l.setIdle(c, false)
	case http.StateClosed:
		l.forget(c)
	}
}

// addrKey is the address a connection counts by: its IP, an IPv6 one by
// its /64.
func addrKey(a net.Addr) string {
	var ip net.IP
	switch t := a.(type) {
	case *net.TCPAddr:
		ip = t.IP
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String()
		}
		ip = net.ParseIP(host)
		if ip == nil {
			return host
		}
	}
	if ip.To4() == nil && len(ip) == net.IPv6len {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
