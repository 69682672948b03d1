package keyguard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/keyguard"
)

const goodKey = "alice-secret-key"

// setup returns a guard over a key file of one key, its clock, and a
// function that checks key as a request from addr would.
func setup(t *testing.T, o keyguard.Options) (*keyguard.Guard, *time.Time, func(addr, key string) error) {
	t.Helper()
	keys, err := httpapi.ReadKeys(strings.NewReader("alice " + goodKey + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	o.Now = func() time.Time { return now }
	g, err := keyguard.New(o)
	if err != nil {
		t.Fatal(err)
	}
	auth := g.Authenticator(keys)
	check := func(addr, key string) error {
		var err error
		h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _, err = auth.Authenticate(r.Context(), key)
		}))
		r := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
		r.RemoteAddr = addr
		h.ServeHTTP(httptest.NewRecorder(), r)
		return err
	}
	return g, &now, check
}

func TestGuard_ThrottlesAfterBurst(t *testing.T) {
	g, now, check := setup(t, keyguard.Options{Burst: 5, Refill: 10 * time.Second})
	for i := range 5 {
		if err := check("192.0.2.1:1000", "wrong-key-wrong-key"); !errors.Is(err, httpapi.ErrUnknownKey) {
			t.Fatalf("guess %d: %v, want unknown key", i, err)
		}
	}
	err := check("192.0.2.1:1001", "wrong-key-wrong-key")
	var te *httpapi.ThrottledError
	if !errors.As(err, &te) || !errors.Is(err, httpapi.ErrThrottled) {
		t.Fatalf("6th guess: %v, want throttled", err)
	}
	if te.RetryAfter != 10*time.Second {
		t.Errorf("RetryAfter = %v, want 10s", te.RetryAfter)
	}
	// Throttled, the right key is not checked either: a guess that
	// succeeded would say so.
	if err := check("192.0.2.1:1002", goodKey); !errors.Is(err, httpapi.ErrThrottled) {
		t.Fatalf("good key while throttled: %v", err)
	}
	// Another address is not throttled.
	if err := check("192.0.2.2:1000", goodKey); err != nil {
		t.Fatalf("other address: %v", err)
	}
	if g.Failures() != 5 || g.Throttled() != 2 {
		t.Errorf("Failures, Throttled = %d, %d; want 5, 2", g.Failures(), g.Throttled())
	}
	// One refill lets one more key be checked.
	*now = now.Add(10 * time.Second)
	if err := check("192.0.2.1:1003", goodKey); err != nil {
		t.Fatalf("after a refill: %v", err)
	}
}

func TestGuard_KnownKeysCostNothing(t *testing.T) {
	_, _, check := setup(t, keyguard.Options{Burst: 2})
	for i := range 1000 {
		if err := check("192.0.2.1:1000", goodKey); err != nil {
			t.Fatalf("known key %d: %v", i, err)
		}
	}
}

func TestGuard_ConcurrentGuessesCannotOverrun(t *testing.T) {
	g, _, check := setup(t, keyguard.Options{Burst: 20})
	var wg sync.WaitGroup
	for range 500 {
		wg.Go(func() { _ = check("192.0.2.1:1000", "wrong-key-wrong-key") })
	}
	wg.Wait()
	if g.Failures() != 20 || g.Throttled() != 480 {
		t.Errorf("Failures, Throttled = %d, %d; want 20, 480", g.Failures(), g.Throttled())
	}
}

func TestGuard_IPv6CountsBySlash64(t *testing.T) {
	_, _, check := setup(t, keyguard.Options{Burst: 1})
	_ = check("[2001:db8::1]:1000", "wrong-key-wrong-key")
	if err := check("[2001:db8::ffff]:1000", goodKey); !errors.Is(err, httpapi.ErrThrottled) {
		t.Fatalf("same /64: %v, want throttled", err)
	}
	if err := check("[2001:db8:0:1::1]:1000", goodKey); err != nil {
		t.Fatalf("another /64: %v", err)
	}
}

func TestGuard_WithoutAddressNotCounted(t *testing.T) {
	g, _, _ := setup(t, keyguard.Options{Burst: 1})
	keys, _ := httpapi.ReadKeys(strings.NewReader("alice " + goodKey + "\n"))
	auth := g.Authenticator(keys)
	for range 10 {
		if _, _, err := auth.Authenticate(context.Background(), "wrong-key-wrong-key"); !errors.Is(err, httpapi.ErrUnknownKey) {
			t.Fatalf("no address: %v", err)
		}
	}
	if g.Failures() != 0 {
		t.Errorf("Failures = %d, want 0", g.Failures())
	}
}

func TestGuard_AddressesBounded(t *testing.T) {
	// Past MaxAddrs addresses, those whose bucket is full again are
	// forgotten first; a flood of throttled ones clears the table.
	_, now, check := setup(t, keyguard.Options{Burst: 1, Refill: time.Second, MaxAddrs: 4})
	_ = check("192.0.2.1:1", "wrong-key-wrong-key")
	*now = now.Add(time.Second) // 192.0.2.1 full again
	_ = check("192.0.2.2:1", "wrong-key-wrong-key")
	_ = check("192.0.2.3:1", "wrong-key-wrong-key")
	_ = check("192.0.2.4:1", "wrong-key-wrong-key")
	_ = check("192.0.2.5:1", "wrong-key-wrong-key") // 192.0.2.1 forgotten; 2, 3, 4 kept
	if err := check("192.0.2.2:1", goodKey); !errors.Is(err, httpapi.ErrThrottled) {
		t.Fatalf("192.0.2.2 kept: %v, want throttled", err)
	}
	for i := 6; i < 7; i++ { // the table fills with throttled addresses: cleared
		_ = check("192.0.2."+string(rune('0'+i))+":1", "wrong-key-wrong-key")
	}
	if err := check("192.0.2.2:1", goodKey); err != nil {
		t.Fatalf("after a flood of addresses: %v, want the table cleared", err)
	}
}

func TestNew_Negative(t *testing.T) {
	if _, err := keyguard.New(keyguard.Options{Burst: -1}); err == nil {
		t.Error("Burst -1: no error")
	}
}
