package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sift/batch/engine"
)

// cookieName is the session cookie's name. The cookie holds a random
// token, never a key.
const cookieName = "siftbatch_session"

// maxSessions bounds the sessions held at once: past it, signing in
// first drops the expired ones, then the one that expires first.
const maxSessions = 10000

// session is one signed-in browser. It holds who signed in, never the key
// it signed in with.
type session struct {
	name      string // the caller's name
	admin     bool
	caller    engine.Caller // who signed in, as the key names them: what a resubmit runs as
	class     string        // the key's class (httpapi.ClassStandard, …)
	csrf      string        // the token every state-changing form carries
	expires   time.Time
	tokenHash [sha256.Size]byte
	streams   atomic.Int32 // event streams open (at most maxStreams)
}

// maxStreams bounds the event streams one session holds open at once: a
// few tabs; each holds a connection and a goroutine.
const maxStreams = 16

// maxCallerStreams bounds the event streams one caller (one API key's
// name) holds open at once, across all its sessions: a key may sign in as
// often as the sign-in throttle lets it, and every stream costs a render
// every Refresh (320 streams of one key took 20% of a core).
const maxCallerStreams = 32

// callerStreams counts the event streams each caller holds open, by
// caller name (never a key). A caller with none has no entry, so the map
// holds at most the callers streaming now. Safe for concurrent use.
type callerStreams struct {
	mu sync.Mutex
	m  map[string]int
}

// take counts one more stream for name: false, counting nothing, if name
// holds maxCallerStreams already.
func (c *callerStreams) take(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[name] >= maxCallerStreams {
		return false
	}
	if c.m == nil {
		c.m = make(map[string]int)
	}
	c.m[name]++
	return true
}

// give counts one stream of name fewer.
func (c *callerStreams) give(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[name]--; c.m[name] <= 0 {
		delete(c.m, name)
	}
}

// sessions are the signed-in browsers, keyed by the SHA-256 of their
// token: a lookup compares hashes, so its timing tells nothing of a
// token's bytes. Safe for concurrent use.
type sessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*session
}

// randomToken returns 32 random bytes, base64url.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create starts a session for name until expires and returns its token.
func (s *sessions) create(name string, admin bool, expires, now time.Time) (string, *session) {
	return s.createAs(engine.Caller{Name: name}, "", admin, expires, now)
}

// createAs is create for caller c, signed in with a key of class.
func (s *sessions) createAs(c engine.Caller, class string, admin bool, expires, now time.Time) (string, *session) {
	token := randomToken()
	ss := &session{name: c.Name, admin: admin, caller: c, class: class, csrf: randomToken(), expires: expires, tokenHash: sha256.Sum256([]byte(token))}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		var first *session
		for k, o := range s.m {
			if !o.expires.After(now) {
				delete(s.m, k)
			} else if first == nil || o.expires.Before(first.expires) {
				first = o
			}
		}
		if len(s.m) >= maxSessions && first != nil {
			delete(s.m, first.tokenHash)
		}
	}
	s.m[ss.tokenHash] = ss
	return token, ss
}

// get returns the session of token, if it has not expired; an expired one
// is dropped.
func (s *sessions) get(token string, now time.Time) (*session, bool) {
	if token == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(token))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.m[h]
	if !ok {
		return nil, false
	}
	if !ss.expires.After(now) {
		delete(s.m, h)
		return nil, false
	}
	return ss, true
}

// end drops a session.
func (s *sessions) end(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, ss.tokenHash)
}

// validCSRF reports whether the form's token is the session's, in
// constant time.
func (ss *session) validCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(ss.csrf)) == 1
}

// throttle limits sign-in attempts per client address: a token bucket of
// perMinute attempts, refilled at perMinute a minute. Safe for concurrent
// use.
type throttle struct {
	perMinute int
	mu        sync.Mutex
	m         map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the addresses tracked: past it, the full buckets (the
// addresses that have not tried for a minute) are dropped.
const maxBuckets = 10000

// allow takes one attempt for addr; if none is left it returns false and
// how long until one is.
func (t *throttle) allow(addr string, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rate := float64(t.perMinute) / float64(time.Minute) // tokens per nanosecond
	refill := func(b *bucket) {
		b.tokens = math.Min(float64(t.perMinute), b.tokens+float64(now.Sub(b.last))*rate)
		b.last = now
	}
	b, ok := t.m[addr]
	if !ok {
		if len(t.m) >= maxBuckets {
			for k, o := range t.m {
				if refill(o); o.tokens >= float64(t.perMinute) {
					delete(t.m, k)
				}
			}
			if len(t.m) > maxBuckets/2 {
				// Too many addresses tried within the minute (a flood):
				// start again rather than grow without bound. The
				// scan above then runs once per maxBuckets/2 new ones.
				t.m = make(map[string]*bucket)
			}
		}
		b = &bucket{tokens: float64(t.perMinute), last: now}
		t.m[addr] = b
	}
	refill(b)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / rate)
	}
	b.tokens--
	return true, 0
}
