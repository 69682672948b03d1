// Package keyguard throttles the guessing of API keys: each client
// address may present only so many unknown keys, on every route that
// checks one (the API, the MCP server, the dashboard's sign-in), before
// its keys are no longer checked for a while and every request that
// presents one is answered 429 with Retry-After.
//
// A [Guard] does two things: [Guard.Wrap] puts each request's client
// address in its context, and [Guard.Authenticator] wraps the
// [httpapi.Authenticator] that the API, the MCP server and the dashboard
// share, so that each key it checks is counted against the address. It
// never sees, keeps or logs a key: only whether the key was known.
//
// Each address has a bucket of [Options.Burst] unknown keys, refilled by
// one every [Options.Refill]. A key is checked only if the bucket holds
// one; only an unknown key takes one, so a tenant that presents its own
// key is never slowed, however many of its requests are checked at once.
// Concurrent guesses cannot overrun the bucket: a check holds one of its
// keys while it runs, and an unknown key checked while all were held is
// answered throttled (and taken all the same). An empty bucket refuses
// with an error wrapping [httpapi.ErrThrottled], which the handlers answer
// 429 with Retry-After: the time until the bucket holds one again.
package keyguard

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
)

// The defaults a zero [Options] field takes.
const (
	// DefaultBurst is how many unknown keys an address may present before
	// it is throttled.
	DefaultBurst = 20
	// DefaultRefill is how often an address may present one more unknown
	// key once it has used its burst: 10 a minute.
	DefaultRefill = 6 * time.Second
	// DefaultMaxAddrs bounds the addresses tracked at once.
	DefaultMaxAddrs = 1 << 16
	// logEvery is the least time between two log lines of the guard.
	logEvery = time.Minute
)

// Log keys: counts only, never a key or an address.
const (
	logKeyRefused = "refused"
	logKeyAddrs   = "addrs"
)

// Options configure a [Guard]. A zero field takes its default; a negative
// one makes [New] fail.
type Options struct {
	// Burst is how many unknown keys an address may present before it is
	// throttled. Default [DefaultBurst] (20).
	Burst int
	// Refill is how often a throttled address may try one more key.
	// Default [DefaultRefill] (6s: 10 a minute).
	Refill time.Duration
	// MaxAddrs bounds the addresses tracked at once: past it, those whose
	// bucket is full again are forgotten, and if that leaves more than
	// three quarters (a flood of addresses) every address is: an attacker
	// with that many addresses gets each one's burst again. IPv6
	// addresses count by their /64. Default [DefaultMaxAddrs] (65,536).
	MaxAddrs int
	// TLSProxy counts requests by the address the proxy in front of serve
	// appended to X-Forwarded-For (its rightmost entry), not the
	// connection's: set it only behind such a proxy, as the dashboard's
	// option of the same name.
	TLSProxy bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Log gets one line at most a minute while addresses are throttled,
	// with counts only. Default: nothing is logged.
	Log *slog.Logger
}

// Guard counts the unknown keys each client address presents and
// throttles the addresses that present too many. Safe for concurrent use.
type Guard struct {
	o         Options
	failures  atomic.Int64
	throttled atomic.Int64

	mu       sync.Mutex
	m        map[string]*bucket
	overflow bucket    // shared by the addresses the full table cannot take
	nextScan time.Time // no scan for room before it (the last one found too little)
	lastLog  time.Time
	unseen   int64 // refusals since the last log line
}

// bucket is one address's unknown keys left, as of last (below zero: keys
// checked past the allowance while others were, a debt the refill pays
// first), its checks running now, and how many of them hold a key.
type bucket struct {
	tokens   float64
	last     time.Time
	checking int
	holding  int
}

// New returns a Guard with the options o.
func New(o Options) (*Guard, error) {
	if o.Burst < 0 || o.Refill < 0 || o.MaxAddrs < 0 {
		return nil, errors.New("keyguard: negative option")
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.Refill == 0 {
		o.Refill = DefaultRefill
	}
	if o.MaxAddrs == 0 {
		o.MaxAddrs = DefaultMaxAddrs
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{o: o, m: make(map[string]*bucket)}
	g.overflow.tokens = float64(o.Burst)
	return g, nil
}

// addrKey is the context key of a request's client address.
type addrKey struct{}

// Wrap returns next with each request's client address in its context,
// for [Guard.Authenticator]: wrap everything that checks keys.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), addrKey{}, ClientAddr(r, g.o.TLSProxy))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Authenticator returns a, wrapped: it counts each key it checks against
// the client address [Guard.Wrap] put in the context (a context without
// one is not counted: an in-process call, such as the MCP server's own
// calls of the API, was counted where it came in). An address whose
// bucket is empty gets an error wrapping [httpapi.ErrThrottled] (a
// [*httpapi.ThrottledError]) without its key being checked.
//
// A known key never costs its address anything, however many are checked
// at once: a check holds one of the address's unknown keys while it runs
// and gives it back if the key was known. A check that finds every one
// held by others runs at once all the same (a tenant's own requests are
// never throttled unless the address was, by unknown keys); if its key
// was unknown, it is answered throttled, not unknown, and still taken
// from the bucket (below zero: a debt paid before the address is served
// again), so no more than the bucket's keys are ever answered unknown.
func (g *Guard) Authenticator(a httpapi.Authenticator) httpapi.Authenticator {
	return httpapi.AuthenticatorFunc(func(ctx context.Context, key string) (*engine.Caller, string, error) {
		addr, ok := ctx.Value(addrKey{}).(string)
		if !ok {
			return a.Authenticate(ctx, key)
		}
		b, held, wait, ok := g.take(addr)
		if !ok {
			return nil, "", &httpapi.ThrottledError{RetryAfter: wait}
		}
		c, class, err := a.Authenticate(ctx, key)
		unknown := errors.Is(err, httpapi.ErrUnknownKey) || err == nil && (c == nil || c.Name == "")
		if wait, ok := g.settle(b, held, unknown); !ok {
			return nil, "", &httpapi.ThrottledError{RetryAfter: wait}
		}
		if unknown {
			g.failures.Add(1)
		}
		return c, class, err
	})
}

// Failures is how many unknown keys have been answered unknown in all.
func (g *Guard) Failures() int64 { return g.failures.Load() }

// Throttled is how many requests have been answered throttled: their key
// unchecked, or an unknown key checked past the address's allowance.
func (g *Guard) Throttled() int64 { return g.throttled.Load() }

// bucketLocked is addr's bucket, made if it is new: the shared overflow
// bucket if the table is full and no room can be made.
func (g *Guard) bucketLocked(addr string, now time.Time) *bucket {
	if b := g.m[addr]; b != nil {
		return b
	}
	if !g.makeRoom(now) {
		return &g.overflow
	}
	b := &bucket{tokens: float64(g.o.Burst), last: now}
	g.m[addr] = b
	return b
}

// take starts a key's check from addr, in its bucket b (kept while the
// check runs): false, and how long until b holds a key again, if it is
// empty (the address is throttled); held reports whether the check holds
// one of its keys.
func (g *Guard) take(addr string) (b *bucket, held bool, wait time.Duration, ok bool) {
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	b = g.bucketLocked(addr, now)
	g.refill(b, now)
	if b.tokens < 1 {
		return nil, false, g.refuseLocked(b, now), false
	}
	b.checking++
	if held = b.tokens-float64(b.holding) >= 1; held {
		b.holding++
	}
	return b, held, 0, true
}

// settle ends a key's check of b's: an unknown key is taken from b.
// False, and how long until b holds a key again, if the key was unknown
// and checked without holding one of b's keys.
func (g *Guard) settle(b *bucket, held, unknown bool) (time.Duration, bool) {
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refill(b, now)
	b.checking--
	if held {
		b.holding--
	}
	if !unknown {
		return 0, true
	}
	b.tokens--
	if held {
		return 0, true
	}
	return g.refuseLocked(b, now), false
}

// refuseLocked counts a request refused for b and logs, at most once a
// minute; it returns how long until b holds a key again.
func (g *Guard) refuseLocked(b *bucket, now time.Time) time.Duration {
	g.throttled.Add(1)
	g.unseen++
	if now.Sub(g.lastLog) >= logEvery {
		g.o.Log.Warn("unknown keys throttled", slog.Int64(logKeyRefused, g.unseen), slog.Int(logKeyAddrs, g.emptyLocked()))
		g.lastLog, g.unseen = now, 0
	}
	return time.Duration((1 - b.tokens) * float64(g.o.Refill))
}

// refill adds what the time since b.last has earned.
func (g *Guard) refill(b *bucket, now time.Time) {
	if b.last.IsZero() {
		b.last = now
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(g.o.Burst), b.tokens+float64(d)/float64(g.o.Refill))
		b.last = now
	}
}

// makeRoom makes room for a new address once MaxAddrs are tracked: it
// forgets the addresses whose bucket is full again (they lose nothing),
// then, down to three quarters of MaxAddrs, those not throttled (they get
// their burst again). A throttled address, or one whose key is being
// checked, is never forgotten: a flood of addresses cannot lift a
// throttle. False if no room could be made: the new address shares the
// overflow bucket with the others the table cannot take, and no scan is
// tried again for one Refill (in which every throttled address earns a
// key), so a flood costs one scan a Refill.
func (g *Guard) makeRoom(now time.Time) bool {
	if len(g.m) < g.o.MaxAddrs {
		return true
	}
	if now.Before(g.nextScan) {
		return false
	}
	for k, b := range g.m {
		if g.refill(b, now); b.tokens >= float64(g.o.Burst) && b.checking == 0 {
			delete(g.m, k)
		}
	}
	low := g.o.MaxAddrs * 3 / 4
	for k, b := range g.m {
		if len(g.m) <= low {
			break
		}
		if b.tokens >= 1 && b.checking == 0 {
			delete(g.m, k)
		}
	}
	if len(g.m) >= g.o.MaxAddrs {
		g.nextScan = now.Add(g.o.Refill)
		return false
	}
	return true
}

// emptyLocked counts the addresses throttled now.
func (g *Guard) emptyLocked() int {
	n := 0
	for _, b := range g.m {
		if b.tokens < 1 {
			n++
		}
	}
	if g.overflow.tokens < 1 {
		n++
	}
	return n
}

// ClientAddr is the address a request is counted by: the connection's
// remote IP; with behindProxy, the address the proxy appended to
// X-Forwarded-For (its rightmost entry: entries before it are the
// client's to forge). An IPv6 address counts by its /64, which one client
// usually holds whole.
func ClientAddr(r *http.Request, behindProxy bool) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if behindProxy {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if ip := net.ParseIP(strings.TrimSpace(last)); ip != nil {
				host = ip.String()
			}
		}
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil && len(ip) == net.IPv6len {
		return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
	}
	return host
}
