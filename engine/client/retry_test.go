package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/httpapi"
)

// waits records the waits a client asked for before its retries, and
// runs then, if set, during each (without waiting).
type waits struct {
	mu   sync.Mutex
	got  []time.Duration
	then func(n int)
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.got = append(w.got, d)
	n := len(w.got)
	w.mu.Unlock()
	if w.then != nil {
		w.then(n)
	}
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.got...)
}

// TestClient_RetriesA429AfterItsRetryAfter submits while the caller is at
// its cap: the client asks again after each Retry-After (3 s, plus at most
// a quarter of jitter), as many times as allowed, and counts as one
// request each; once the cap frees during a wait, the retry is admitted.
func TestClient_RetriesA429AfterItsRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{RetryAfter: 3 * time.Second})
	ctx := context.Background()
	var told []client.Retry
	c := b.client(t, "alice-key", client.WithRetry(3, time.Minute), client.WithOnRetry(func(r client.Retry) { told = append(told, r) }))
	w := &waits{}
	client.SetSleep(c, w.sleep)

	held, err := c.Submit(ctx, []client.Target{{URL: "https://example.com/h/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(ctx, targets("second", 1))
	if !errors.Is(err, engine.ErrCallerBusy) {
		t.Fatalf("submit at the cap: %v; want busy once the retries are spent", err)
	}
	if n := b.count("POST /v1/batch"); n != 1+3 {
		t.Fatalf("%d submits reached the server; want 1, then 3 for the refused one", n)
	}
	got := w.all()
	if len(got) != 2 {
		t.Fatalf("waits %v; want 2 (3 attempts)", got)
	}
	for _, d := range got {
		if d < 3*time.Second || d > 3*time.Second+3*time.Second/4 {
			t.Fatalf("waited %v; want Retry-After 3s plus at most 25%% jitter", d)
		}
	}
	// WithOnRetry is told of each wait, before it: why, how long, which
	// attempt comes next.
	if len(told) != len(got) {
		t.Fatalf("told of %d retries, waited %d times", len(told), len(got))
	}
	for i, r := range told {
		if r.Err == nil || r.Err.Status != http.StatusTooManyRequests || r.Err.RetryAfter != 3*time.Second || r.Wait != got[i] ||
			r.Attempt != i+2 || r.MaxAttempts != 3 {
			t.Errorf("retry %d told %+v (err %+v), want the 429 with Retry-After 3s, wait %v, attempt %d of 3", i, r, r.Err, got[i], i+2)
		}
	}

	// The held job ends during the first wait: the retry is admitted.
	w2 := &waits{then: func(int) {
		b.gate.Open()
		b.WaitSettled(t, held.ID)
	}}
	client.SetSleep(c, w2.sleep)
	sub, err := c.Submit(ctx, targets("second", 1))
	if err != nil || sub.Reused {
		t.Fatalf("submit once the cap freed: %+v, %v", sub, err)
	}
	// One request after each wait (the runner may count the ended job a
	// moment after it reads ended, so there may be two waits).
	if n, waited := b.count("POST /v1/batch"), len(w2.all()); waited < 1 || n != 4+1+int64(waited) {
		t.Fatalf("%d submits in all after %d waits; want 4 before, then 1 and one after each wait", n, waited)
	}
}

// TestClient_DoesNotWaitPastItsBound answers a 429 whose Retry-After is
// longer than the client's bound at once, after one request.
func TestClient_DoesNotWaitPastItsBound(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{RetryAfter: time.Minute})
	ctx := context.Background()
	c := b.client(t, "alice-key", client.WithRetry(5, 10*time.Second))
	w := &waits{}
	client.SetSleep(c, w.sleep)
	if _, err := c.Submit(ctx, []client.Target{{URL: "https://example.com/h/hold"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Submit(ctx, targets("second", 1))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter != time.Minute {
		t.Fatalf("submit at the cap: %v; want 429 with Retry-After 1m", err)
	}
	if n, got := b.count("POST /v1/batch"), w.all(); n != 2 || len(got) != 0 {
		t.Fatalf("%d submits, waits %v; want 2 and none", n, got)
	}
}

// TestClient_DoesNotWaitPastItsDeadline answers a 429 whose Retry-After
// is within the client's bound but past the context's deadline at once,
// after one request: the 429 (which says when to retry), not a sleep that
// would end in the deadline's error.
func TestClient_DoesNotWaitPastItsDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{RetryAfter: 20 * time.Second})
	c := b.client(t, "alice-key", client.WithRetry(5, time.Minute))
	w := &waits{}
	client.SetSleep(c, w.sleep)
	if _, err := c.Submit(context.Background(), []client.Target{{URL: "https://example.com/h/hold"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := c.Submit(ctx, targets("deadline-far", 1)); !errors.Is(err, engine.ErrCallerBusy) || len(w.all()) == 0 {
		t.Fatalf("a deadline an hour away: %v, waits %v; want the retries waited for", err, w.all())
	}
	before, waited := b.count("POST /v1/batch"), len(w.all())
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Submit(ctx, targets("deadline-near", 1))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.RetryAfter != 20*time.Second {
		t.Fatalf("a deadline 5s away: %v; want the 429 with Retry-After 20s", err)
	}
	if n, got := b.count("POST /v1/batch")-before, len(w.all())-waited; n != 1 || got != 0 {
		t.Fatalf("%d submits, %d waits; want 1 and none", n, got)
	}
}

// TestClient_RetriesA503 reads through an authenticator that fails twice
// (503 with the API's Retry-After, 5 s): the client waits it each time
// (plus at most a quarter) and the third read is served; a cancel that
// fails once is sent again. (The backoff of a 503 without Retry-After is
// TestBackoff's.)
func TestClient_RetriesA503(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{}, httpapi.Options{})
	ctx := context.Background()
	c := b.client(t, "alice-key")
	sub, err := c.Submit(ctx, targets("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fails := 2
	f := func() error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return errors.New("directory down")
		}
		return nil
	}
	b.auth.Store(&f)
	w := &waits{}
	client.SetSleep(c, w.sleep)
	before := b.count("GET /v1/batch/{id}")
	if _, err := c.Job(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if n := b.count("GET /v1/batch/{id}") - before; n != 3 {
		t.Fatalf("%d reads; want 3", n)
	}
	got := w.all()
	if len(got) != 2 || got[0] < 5*time.Second || got[0] > 6250*time.Millisecond || got[1] < 5*time.Second || got[1] > 6250*time.Millisecond {
		t.Fatalf("waits %v; want Retry-After 5s twice, each plus at most 25%%", got)
	}

	// A cancel answered 503 is sent again, and cancels.
	held, err := c.Submit(ctx, []client.Target{{URL: "https://example.com/h/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fails = 1
	mu.Unlock()
	if err := c.Cancel(ctx, held.ID); err != nil {
		t.Fatal(err)
	}
	if n := b.count("DELETE /v1/batch/{id}"); n != 2 {
		t.Fatalf("%d cancels; want 2", n)
	}
	if j := b.WaitSettled(t, held.ID); j.Status != engine.StatusCancelled {
		t.Fatalf("job %s", j.Status)
	}
}

// TestClient_HostileRetryAfter answers every request 429 with a
// Retry-After the client must not wait for: one far past its bound (in
// seconds beyond 31 bits, or as a date years away), or malformed. A
// Retry-After longer than the bound is returned at once (one request,
// no wait); none is ever waited for beyond the bound.
func TestClient_HostileRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		requests    int64 // the requests the client sends in all
	}{
		{"seconds past the bound", "3600", 1},
		{"seconds beyond 31 bits", "4294967296", 1},
		{"seconds beyond 64 bits", "99999999999999999999999", 1},
		{"a date years away", time.Now().Add(10 * 365 * 24 * time.Hour).UTC().Format(http.TimeFormat), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				w.Header().Set("Retry-After", tc.value)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":"too many jobs","hint":"wait"}`))
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, "alice-key", client.WithRetry(4, 30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			w := &waits{}
			client.SetSleep(c, w.sleep)
			_, err = c.Job(context.Background(), "x")
			var e *client.Error
			if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests {
				t.Fatalf("Job: %v; want the 429", err)
			}
			if got := n.Load(); got != tc.requests {
				t.Fatalf("Retry-After %q: %d requests (waits %v); want %d: a wait past the bound is not waited for", tc.value, got, w.all(), tc.requests)
			}
			for _, d := range w.all() {
				if d > 30*time.Second {
					t.Fatalf("waited %v, past the bound", d)
				}
			}
		})
	}
}
