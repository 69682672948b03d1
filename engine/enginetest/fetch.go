package enginetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// PanicValue is the value [PanicFetch] panics with: unique, so that a test
// can require that no log line carries it ([testkit.RequireNoneOf]).
const PanicValue = "ENGINETEST-PANIC-VALUE-5b1f7c"

// Targets returns n targets of a job named name: http://h/name/0, …,
// http://h/name/n-1.
func Targets(name string, n int) []engine.Target {
	ts := make([]engine.Target, n)
	for i := range ts {
		ts[i] = engine.Target{URL: fmt.Sprintf("http://h/%s/%d", name, i)}
	}
	return ts
}

// Caller returns a caller named name.
func Caller(name string) *engine.Caller { return &engine.Caller{Name: name} }

// Content is what [OKFetch] returns for a URL: "content of " and the URL.
func Content(url string) string { return "content of " + url }

// OKFetch is a fetch that succeeds at once with [Content] of the URL.
func OKFetch(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	return engine.Result{Content: Content(t.URL)}, nil
}

// FailFetch returns a fetch that fails every target at once with err.
func FailFetch(err error) engine.FetchFunc {
	return func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, err
	}
}

// GatedFetch returns a fetch that waits at g (reporting on g.Entered) and
// then succeeds like [OKFetch]; if its context ends first it returns the
// context's error.
func GatedFetch(g *testkit.Gate) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		if err := g.Wait(ctx); err != nil {
			return engine.Result{}, err
		}
		return OKFetch(ctx, c, t)
	}
}

// PanicFetch is a fetch that panics with [PanicValue].
func PanicFetch(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
	panic(PanicValue)
}

// CountingFetch is a fetch that counts its calls per URL and hands each to
// Next ([OKFetch] if nil). Pass its Fetch method as the runner's fetch.
// Its methods are safe for concurrent use; the zero value is ready to use.
type CountingFetch struct {
	// Next does the fetch; nil means OKFetch. Set it before the first call.
	Next engine.FetchFunc

	mu    sync.Mutex
	calls map[string]int
	total int
}

// Fetch counts the call for t.URL and returns what Next returns.
func (f *CountingFetch) Fetch(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[t.URL]++
	f.total++
	next := f.Next
	f.mu.Unlock()
	if next == nil {
		next = OKFetch
	}
	return next(ctx, c, t)
}

// Calls returns how many times url was fetched.
func (f *CountingFetch) Calls(url string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[url]
}

// Total returns how many fetches there were, of every URL.
func (f *CountingFetch) Total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}
