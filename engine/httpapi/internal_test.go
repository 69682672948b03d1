package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// countingRunner records each call the handler makes into the runner, so
// that a test can compare the work two answers did. Requests are served
// in-process, one at a time, so the call log needs no lock.
type countingRunner struct {
	runner
	calls *[]string
}

func (c countingRunner) Submit(ctx context.Context, ca *engine.Caller, class string, ts []engine.Target) (string, bool, error) {
	*c.calls = append(*c.calls, "Submit")
	return c.runner.Submit(ctx, ca, class, ts)
}

func (c countingRunner) Cancel(id string) bool {
	*c.calls = append(*c.calls, "Cancel")
	return c.runner.Cancel(id)
}

func (c countingRunner) Job(id string) (engine.Job, bool) {
	*c.calls = append(*c.calls, "Job")
	return c.runner.Job(id)
}

func (c countingRunner) Status(id string) (engine.Job, []engine.TargetStatus, bool) {
	*c.calls = append(*c.calls, "Status")
	return c.runner.Status(id)
}

func (c countingRunner) Touch(id string) {
	*c.calls = append(*c.calls, "Touch")
	c.runner.Touch(id)
}

// newRunner starts a runner on an in-memory store whose fetch succeeds at
// once, or waits for hold's close on a URL ending in /hold.
func newRunner(t *testing.T, hold <-chan struct{}) *engine.Runner {
	t.Helper()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/hold") {
			select {
			case <-hold:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		}
		return engine.Result{Content: "page"}, nil
	}
	r, err := engine.New(store, fetch, engine.Config{JobsPerCaller: 2}, nil)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// testAuth knows two keys: alice-key and bob-key.
var testAuth = AuthenticatorFunc(func(_ context.Context, key string) (*engine.Caller, string, error) {
	name, ok := strings.CutSuffix(key, "-key")
	if !ok || (name != "alice" && name != "bob") {
		return nil, "", ErrUnknownKey
	}
	return &engine.Caller{Name: name}, ClassStandard, nil
})

// TestAPI_NotYoursSameWork: "not yours" (another caller's finished or live
// job) and "missing" make exactly the same calls into the runner: one Job,
// no read of targets, no Touch, no Cancel. It counts calls instead of
// timing them: the runner's Job costs one store point read whatever the
// case, and a count is exact where a clock is noisy.
func TestAPI_NotYoursSameWork(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	r := newRunner(t, hold)
	ctx := context.Background()
	done, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/a"}, {URL: "https://example.com/b"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.Wait(wctx, done); err != nil {
		t.Fatal(err)
	}
	live, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	h, err := newHandler(countingRunner{runner: r, calls: &calls}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(method, path, key string) []string {
		calls = nil
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		h.ServeHTTP(httptest.NewRecorder(), req)
		return slices.Clone(calls)
	}
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/batch/%s"},
		{http.MethodGet, "/v1/batch/%s?results=1"},
		{http.MethodGet, "/v1/batch/%s/0"},
		{http.MethodGet, "/v1/batch/%s/9"},
		{http.MethodDelete, "/v1/batch/%s"},
	} {
		for _, id := range []string{done, live, "00112233445566778899aabbccddeeff", "not-an-id"} {
			got := serve(rt.method, strings.Replace(rt.path, "%s", id, 1), "bob-key")
			if !slices.Equal(got, []string{"Job"}) {
				t.Errorf("%s %s by another caller: called %v, want [Job]", rt.method, rt.path, got)
			}
		}
	}
	// The owner's read is what reads the targets, then touches.
	if got := serve(http.MethodGet, "/v1/batch/"+done, "alice-key"); !slices.Equal(got, []string{"Job", "Status", "Touch"}) {
		t.Errorf("owner's GET called %v", got)
	}
}

// TestAPI_HandlerPanic: a handler that panics (a bug) is answered 500 and
// logged with its route only, never the panic value, and the server goes on.
func TestAPI_HandlerPanic(t *testing.T) {
	const panicValue = "PANIC-VALUE-7e1f"
	var mu sync.Mutex
	var logs strings.Builder
	h := &Handler{log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}
	g := h.guard(routeJob, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("https://secret.example/page " + panicValue)
	}))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "internal error") {
		t.Fatalf("answer %d %s", rec.Code, rec.Body)
	}
	if l := logs.String(); !strings.Contains(l, "handler panicked") || strings.Contains(l, "secret") || strings.Contains(l, panicValue) {
		t.Fatalf("log:\n%s", l)
	}

	// A panic after the answer started drops the connection, through
	// net/http's ErrAbortHandler, which it does not log.
	late := h.guard(routeJob, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		panic(panicValue)
	}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		late.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil))
	}()
	if strings.Contains(logs.String(), panicValue) {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
