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
// one: it is taken while the key is checked and given back if the key
// was known, so a tenant that presents its own key is never slowed, and
// concurrent guesses cannot overrun the bucket. An empty bucket refuses
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

	mu      sync.Mutex
	m       map[string]*bucket
	lastLog time.Time
	unseen  int64 // refusals since the last log line
}

// bucket is one address's unknown keys left, as of last.
type bucket struct {
	tokens float64
	last   time.Time
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
	return &Guard{o: o, m: make(map[string]*bucket)}, nil
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
func (g *Guard) Authenticator(a httpapi.Authenticator) httpapi.Authenticator {
	return httpapi.AuthenticatorFunc(func(ctx context.Context, key string) (*engine.Caller, string, error) {
		addr, ok := ctx.Value(addrKey{}).(string)
		if !ok {
			return a.Authenticate(ctx, key)
		}
		if wait, ok := g.take(addr); !ok {
			return nil, "", &httpapi.ThrottledError{RetryAfter: wait}
		}
		c, class, err := a.Authenticate(ctx, key)
		if errors.Is(err, httpapi.ErrUnknownKey) || err == nil && (c == nil || c.Name == "") {
			g.failures.Add(1)
		} else {
			g.giveBack(addr)
		}
		return c, class, err
	})
}

// Failures is how many unknown keys have been presented in all.
func (g *Guard) Failures() int64 { return g.failures.Load() }

// Throttled is how many requests have been refused, their key unchecked.
func (g *Guard) Throttled() int64 { return g.throttled.Load() }

// take takes one key's check from addr's bucket; if it is empty, false
// and how long until it is not.
func (g *Guard) take(addr string) (time.Duration, bool) {
	now := g.o.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.m[addr]
	if b == nil {
		g.makeRoom(now)
		b = &bucket{tokens: float64(g.o.Burst), last: now}
		g.m[addr] = b
	}
	g.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	g.throttled.Add(1)
	g.unseen++
	if now.Sub(g.lastLog) >= logEvery {
		g.o.Log.Warn("unknown keys throttled", slog.Int64(logKeyRefused, g.unseen), slog.Int(logKeyAddrs, g.emptyLocked()))
		g.lastLog, g.unseen = now, 0
	}
	return time.Duration((1 - b.tokens) * float64(g.o.Refill)), false
}

// giveBack returns the check of a known key to addr's bucket.
func (g *Guard) giveBack(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.m[addr]; b != nil {
		b.tokens = min(b.tokens+1, float64(g.o.Burst))
	}
}

// refill adds what the time since b.last has earned.
func (g *Guard) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(g.o.Burst), b.tokens+float64(d)/float64(g.o.Refill))
		b.last = now
	}
}

// makeRoom forgets the addresses whose bucket is full again once
// MaxAddrs are tracked; if more than three quarters remain (a flood of
// addresses), all of them. So a scan comes at most once per MaxAddrs/4
// new addresses.
func (g *Guard) makeRoom(now time.Time) {
	if len(g.m) < g.o.MaxAddrs {
		return
	}
	for k, b := range g.m {
		if g.refill(b, now); b.tokens >= float64(g.o.Burst) {
			delete(g.m, k)
		}
	}
	if len(g.m) > g.o.MaxAddrs*3/4 {
		clear(g.m)
	}
}

// emptyLocked counts the addresses throttled now.
func (g *Guard) emptyLocked() int {
	n := 0
	for _, b := range g.m {
		if b.tokens < 1 {
			n++
		}
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
