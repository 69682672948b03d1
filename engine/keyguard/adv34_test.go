package keyguard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/keyguard"
)

// TestAdv34_FloodOfAddrsKeepsThrottle: an address that used its burst of
// unknown keys stays throttled while other addresses come and go. Today
// once MaxAddrs addresses are tracked and more than three quarters of
// them are not full, every address is forgotten: a guesser with enough
// addresses (an IPv6 /48 holds 65,536 /64s) lifts its own throttle, and
// everyone's, at will, so guessing is unbounded again.
func TestAdv34_FloodOfAddrsKeepsThrottle(t *testing.T) {
	_, _, check := setup(t, keyguard.Options{Burst: 2, Refill: time.Hour, MaxAddrs: 8})
	const guesser = "192.0.2.1:1000"
	for range 2 {
		if err := check(guesser, "wrong-key-wrong-key"); !errors.Is(err, httpapi.ErrUnknownKey) {
			t.Fatalf("guess: %v", err)
		}
	}
	if err := check(guesser, "wrong-key-wrong-key"); !errors.Is(err, httpapi.ErrThrottled) {
		t.Fatalf("3rd guess: %v, want throttled", err)
	}
	// The same guesser's other addresses, each one guess.
	for i := range 16 {
		_ = check(fmt.Sprintf("198.51.100.%d:1000", i+1), "wrong-key-wrong-key")
	}
	if err := check(guesser, "wrong-key-wrong-key"); !errors.Is(err, httpapi.ErrThrottled) {
		t.Fatalf("the throttled address after 16 other addresses guessed once: %v, want still throttled (its burst came back)", err)
	}
}

// TestAdv34_ThrottledAddrNoOracle (holds): once an address is throttled
// even the right key is answered throttled, unchecked, so the throttle
// is no oracle that tells a right guess from a wrong one; its Retry-After
// is the refill.
func TestAdv34_ThrottledAddrNoOracle(t *testing.T) {
	_, now, check := setup(t, keyguard.Options{Burst: 3, Refill: 30 * time.Second})
	for range 3 {
		_ = check("192.0.2.7:1", "wrong-key-wrong-key")
	}
	err := check("192.0.2.7:2", goodKey)
	var te *httpapi.ThrottledError
	if !errors.As(err, &te) {
		t.Fatalf("the right key from a throttled address: %v, want throttled", err)
	}
	if s := httpapi.RetryAfterSeconds(err); s != 30 {
		t.Fatalf("Retry-After %ds, want 30", s)
	}
	// Another address is not touched.
	if err := check("192.0.2.8:1", goodKey); err != nil {
		t.Fatalf("another address's right key: %v", err)
	}
	*now = now.Add(30 * time.Second)
	if err := check("192.0.2.7:3", goodKey); err != nil {
		t.Fatalf("the right key once one refill passed: %v", err)
	}
}

// TestAdv34_ForwardedForIgnoredWithoutProxy (holds): without TLSProxy a
// client cannot pick the address it is counted by with X-Forwarded-For;
// with it, only the rightmost entry (the proxy's) counts.
func TestAdv34_ForwardedForIgnoredWithoutProxy(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
	r.RemoteAddr = "192.0.2.1:5555"
	r.Header.Add("X-Forwarded-For", "203.0.113.9")
	r.Header.Add("X-Forwarded-For", "203.0.113.10, 203.0.113.11")
	if a := keyguard.ClientAddr(r, false); a != "192.0.2.1" {
		t.Errorf("no proxy: counted as %q, want the connection's 192.0.2.1", a)
	}
	if a := keyguard.ClientAddr(r, true); a != "203.0.113.11" {
		t.Errorf("proxy: counted as %q, want the rightmost 203.0.113.11", a)
	}
	r.RemoteAddr = "[2001:db8:1:2:aaaa::1]:5555"
	r2 := r.Clone(context.Background())
	r2.RemoteAddr = "[2001:db8:1:2:bbbb::2]:5555"
	if a, b := keyguard.ClientAddr(r, false), keyguard.ClientAddr(r2, false); a != b {
		t.Errorf("two addresses of one IPv6 /64 counted apart: %q, %q", a, b)
	}
}

// slowAuth is an Authenticator whose checks of the known key block until
// release is closed, as a remote one (a database) would take time.
type slowAuth struct {
	entered chan struct{}
	release chan struct{}
}

func (a slowAuth) Authenticate(ctx context.Context, key string) (*engine.Caller, string, error) {
	if key != goodKey {
		return nil, "", httpapi.ErrUnknownKey
	}
	a.entered <- struct{}{}
	<-a.release
	return &engine.Caller{Name: "alice"}, "", nil
}

// TestAdv34_ConcurrentRightKeysNotThrottled: "a tenant that presents its
// own key is never slowed": a tenant behind one address with more
// requests in flight than the burst, none of them with a wrong key, is
// not throttled. Today each check of a right key holds a token while it
// runs, so with a slow Authenticator (an embedder's remote one) the
// tenant's Burst+1st concurrent request is answered throttled with zero
// unknown keys presented.
func TestAdv34_ConcurrentRightKeysNotThrottled(t *testing.T) {
	const burst = 4
	g, err := keyguard.New(keyguard.Options{Burst: burst, Refill: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sa := slowAuth{entered: make(chan struct{}, burst+1), release: make(chan struct{})}
	auth := g.Authenticator(sa)
	check := func(done chan<- error) {
		h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _, err := auth.Authenticate(r.Context(), goodKey)
			done <- err
		}))
		r := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
		r.RemoteAddr = "192.0.2.1:1000"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var wg sync.WaitGroup
	errs := make(chan error, burst+1)
	for range burst {
		wg.Go(func() { check(errs) })
	}
	for range burst {
		<-sa.entered
	}
	last := make(chan error, 1)
	wg.Go(func() { check(last) })
	select {
	case err := <-last:
		if errors.Is(err, httpapi.ErrThrottled) {
			t.Errorf("a right key beside %d right keys being checked: %v (no wrong key was ever presented)", burst, err)
		}
	case <-sa.entered:
	}
	close(sa.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a right key: %v", err)
		}
	}
	if n := g.Failures(); n != 0 {
		t.Errorf("%d failures counted, want 0", n)
	}
}

// TestAdv34_ThrottleLogNamesNoKeyNorAddr (holds): the throttle's log
// line, rate-limited, carries counts only: never the key guessed, the
// right key, nor the address.
func TestAdv34_ThrottleLogNamesNoKeyNorAddr(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, now, check := setup(t, keyguard.Options{Burst: 1, Refill: time.Second, Log: log})
	for i := range 50 {
		_ = check("192.0.2.99:4242", "guessed-key-number-"+fmt.Sprint(i))
		_ = check("192.0.2.99:4242", goodKey)
		*now = now.Add(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	out := logs.String()
	if !strings.Contains(out, "throttled") {
		t.Fatalf("no log line of the throttle: %q", out)
	}
	if n := strings.Count(out, "\n"); n > 1 {
		t.Errorf("%d log lines in 5 s of throttling, want at most one a minute", n)
	}
	for _, s := range []string{"guessed-key", goodKey, "192.0.2.99", "4242"} {
		if strings.Contains(out, s) {
			t.Errorf("the log names %q: %s", s, out)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
