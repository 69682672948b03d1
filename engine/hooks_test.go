package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestRunner_HookPanics makes each hook panic (or end its goroutine) on
// every call, and on its first call only: the runner goes on, every job
// ends, the caps stay right, the panic value is never logged.
func TestRunner_HookPanics(t *testing.T) {
	t.Parallel()
	for _, hook := range []string{"Job", "Target", "JobSeconds", "Depth", "Inflight"} {
		for _, mode := range []string{"every", "first", "goexit"} {
			t.Run(hook+"/"+mode, func(t *testing.T) {
				t.Parallel()
				var calls atomic.Int32
				bad := func() {
					n := calls.Add(1)
					switch {
					case mode == "goexit" && n == 1:
						runtime.Goexit()
					case mode == "every" || n == 1:
						panic(enginetest.PanicValue)
					}
				}
				fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
					if strings.HasSuffix(tg.URL, "/1") {
						return engine.Result{}, errors.New("nope")
					}
					return engine.Result{Content: "ok"}, nil
				}
				var hooks engine.Hooks
				switch hook {
				case "Job":
					hooks.Job = func(string) { bad() }
				case "Target":
					hooks.Target = func(error, time.Duration, int) { bad() }
				case "JobSeconds":
					hooks.JobSeconds = func(time.Duration) { bad() }
				case "Depth":
					hooks.Depth = func(int) { bad() }
				case "Inflight":
					hooks.Inflight = func(int) { bad() }
				}
				b := enginetest.Setup(t, fetch, engine.Config{JobsPerCaller: 1, Hooks: hooks})
				r := b.Runner

				ctx := context.Background()
				for i := range 3 {
					id, _, err := r.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("j"+string(rune('a'+i)), 2))
					require.NoError(t, err)
					other, _, err := r.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("other"+string(rune('a'+i)), 1))
					if err != nil {
						require.ErrorIs(t, err, engine.ErrCallerBusy, "the cap holds while the job lives")
					}
					wctx, cancel := context.WithTimeout(ctx, testkit.Deadline)
					j, err := r.Wait(wctx, id)
					require.NoError(t, err)
					require.Equal(t, "partial", j.Status)
					if other != "" { // its job had ended already: wait for this one too
						_, err = r.Wait(wctx, other)
						require.NoError(t, err)
					}
					cancel()
				}
				id, _, err := r.Submit(ctx, enginetest.Caller("bob"), "", enginetest.Targets("c", 2))
				require.NoError(t, err)
				if r.Cancel(id) {
					j, _ := r.Job(id)
					require.Equal(t, "cancelled", j.Status)
				}
				done := make(chan struct{})
				go func() { r.Close(); close(done) }()
				testkit.Recv(t, done)
				require.NotZero(t, calls.Load(), "the hook ran")
				if mode == "goexit" {
					require.Contains(t, b.Logs.String(), "hook ended its goroutine")
				}
				require.NotZero(t, r.HookPanics(), "its failure was counted")
				require.Contains(t, b.Logs.String(), "hook="+hook)
				testkit.RequireNoneOf(t, b.Logs.String(), enginetest.PanicValue)
				require.NoError(t, b.Store.Jobs(func(j persistence.JobRecord) bool {
					require.False(t, engine.IsLive(j.Status), "no job left live")
					require.True(t, j.Settled)
					return true
				}))
			})
		}
	}
}

type hookSite struct {
	name string // the hook's name, as logged
	hit  func(h *engine.Hooks, bad func())
}

// hookSites are the hooks' call sites: a hook that calls bad at that site
// only (and behaves at every other).
func hookSites() []hookSite {
	var sites []hookSite
	for _, o := range []string{"", "created", "reused", "done", "partial", "failed", "cancelled"} {
		sites = append(sites, hookSite{name: "Job/" + o, hit: func(h *engine.Hooks, bad func()) {
			h.Job = func(outcome string) {
				if o == "" || outcome == o {
					bad()
				}
			}
		}})
	}
	for _, which := range []string{"all", "ok", "err"} {
		sites = append(sites, hookSite{name: "Target/" + which, hit: func(h *engine.Hooks, bad func()) {
			h.Target = func(err error, _ time.Duration, _ int) {
				if which == "all" || (which == "ok") == (err == nil) {
					bad()
				}
			}
		}})
	}
	sites = append(sites, hookSite{name: "JobSeconds/all", hit: func(h *engine.Hooks, bad func()) {
		h.JobSeconds = func(time.Duration) { bad() }
	}})
	for _, hook := range []string{"Depth", "Inflight"} {
		for _, which := range []string{"all", "zero", "nonzero"} {
			sites = append(sites, hookSite{name: hook + "/" + which, hit: func(h *engine.Hooks, bad func()) {
				g := func(n int) {
					if which == "all" || (which == "zero") == (n == 0) {
						bad()
					}
				}
				if hook == "Depth" {
					h.Depth = g
				} else {
					h.Inflight = g
				}
			}})
		}
	}
	return sites
}

// hookScenarioFetch: "ok" succeeds, "fail" fails with a TargetError, "block"
// waits for release (or the context), "hang" waits for the context; each
// start is reported on started (by URL).
type hookScenarioFetch struct {
	release chan struct{}
	started chan string
}

func (f *hookScenarioFetch) fetch(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
	kind, _ := jobOf(tg.URL)
	select {
	case f.started <- tg.URL:
	default:
	}
	switch kind {
	case "fail":
		return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "look elsewhere"}
	case "block":
		select {
		case <-f.release:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	case "hang":
		<-ctx.Done()
		return engine.Result{}, ctx.Err()
	}
	return engine.Result{Content: "page <b>" + tg.URL + "</b>"}, nil
}

// runHookScenario runs jobs through every hook call site (created, reused,
// done, partial, failed, cancelled, shutdown; targets ok and failed; depth
// and inflight up and down) and checks the runner's promises.
func runHookScenario(t *testing.T, hooks engine.Hooks) *enginetest.Bundle {
	t.Helper()
	f := &hookScenarioFetch{release: make(chan struct{}), started: make(chan string, 64)}
	rig := enginetest.Setup(t, f.fetch, engine.Config{JobsPerCaller: 1, Workers: 1, RetryWait: time.Millisecond, Hooks: hooks})
	r := rig.Runner
	ctx := context.Background()
	wait := func(id string) engine.Job {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, testkit.Deadline)
		defer cancel()
		j, err := r.Wait(wctx, id)
		require.NoError(t, err, "Wait")
		return j
	}
	submit := func(c string, ts ...engine.Target) string {
		t.Helper()
		var id string
		var reused bool
		var err error
		returns(t, "Submit", func() { id, reused, err = r.Submit(ctx, enginetest.Caller(c), "", ts) })
		require.NoError(t, err)
		require.False(t, reused)
		return id
	}

	a := submit("alice", tgt("ok", 0), tgt("fail", 1))
	require.Equal(t, engine.StatusPartial, wait(a).Status)
	id, reused, err := r.Submit(ctx, enginetest.Caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("fail", 1)})
	require.NoError(t, err)
	require.True(t, reused)
	require.Equal(t, a, id)

	b := submit("bob", tgt("ok", 0))
	require.Equal(t, engine.StatusDone, wait(b).Status)
	c := submit("carol", tgt("fail", 0))
	require.Equal(t, engine.StatusFailed, wait(c).Status)

	d := submit("dave", tgt("block", 0), tgt("ok", 1))
	waitRunning(t, r, d, 0)
	var cancelled bool
	returns(t, "Cancel", func() { cancelled = r.Cancel(d) })
	require.True(t, cancelled)
	require.False(t, r.Cancel(d), "a second Cancel")
	jd, ok := r.Job(d)
	require.True(t, ok)
	require.Equal(t, engine.StatusCancelled, jd.Status)
	close(f.release)
	require.Equal(t, engine.StatusCancelled, wait(d).Status)

	// Dave's job is cancelled: dave may submit again.
	d2 := submit("dave", tgt("ok", 3))
	require.Equal(t, engine.StatusDone, wait(d2).Status)
	// The caps: alice's first job has ended, so a second one is accepted;
	// a third, while the second lives, is refused.
	e := submit("alice", tgt("hang", 0), tgt("ok", 1))
	_, _, err = r.Submit(ctx, enginetest.Caller("alice"), "", []engine.Target{tgt("ok", 7)})
	require.ErrorIs(t, err, engine.ErrCallerBusy)
	waitRunning(t, r, e, 0)

	returns(t, "Close", r.Close)
	je := requireSettled(t, rig, e)
	require.Equal(t, engine.StatusFailed, je.Status)
	require.Equal(t, "shutdown", je.Error)
	for _, id := range []string{a, b, c, d, d2} {
		requireSettled(t, rig, id)
	}
	require.False(t, r.Cancel(e))
	_, _, err = r.Submit(ctx, enginetest.Caller("zed"), "", []engine.Target{tgt("ok", 0)})
	require.ErrorIs(t, err, engine.ErrClosed)
	testkit.RequireNoneOf(t, rig.Logs.String(), enginetest.PanicValue)
	return rig
}

func TestRunner_HookMisbehavingAtEverySite(t *testing.T) {
	t.Parallel()
	for _, site := range hookSites() {
		for _, how := range []string{"panic", "goexit"} {
			t.Run(site.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				var bad atomic.Int64
				hooks := engine.Hooks{
					Job:        func(string) {},
					Target:     func(error, time.Duration, int) {},
					JobSeconds: func(time.Duration) {},
					Depth:      func(int) {},
					Inflight:   func(int) {},
				}
				site.hit(&hooks, func() {
					bad.Add(1)
					if how == "panic" {
						panic(errors.New(enginetest.PanicValue))
					}
					runtime.Goexit()
				})
				b := runHookScenario(t, hooks)
				require.Positive(t, bad.Load(), "the site was reached")
				require.Equal(t, uint64(bad.Load()), b.Runner.HookPanics(), "every bad call counted")
				hook, _, _ := strings.Cut(site.name, "/")
				logs := b.Logs.String()
				require.Contains(t, logs, "hook="+hook, "the hook's name is logged")
				require.Contains(t, logs, "level=ERROR")
			})
		}
	}
}

// Every hook panics at every call, with a panic value of every kind.
func TestRunner_HooksPanickingAlways(t *testing.T) {
	t.Parallel()
	for _, v := range []func() any{
		func() any { return enginetest.PanicValue },
		func() any { return errors.New(enginetest.PanicValue) },
		func() any { return fmt.Stringer(stringerPanic{}) },
		func() any { return []string{enginetest.PanicValue} },
	} {
		t.Run(fmt.Sprintf("%T", v()), func(t *testing.T) {
			t.Parallel()
			var bad atomic.Int64
			p := func() { bad.Add(1); panic(v()) }
			b := runHookScenario(t, engine.Hooks{
				Job:        func(string) { p() },
				Target:     func(error, time.Duration, int) { p() },
				JobSeconds: func(time.Duration) { p() },
				Depth:      func(int) { p() },
				Inflight:   func(int) { p() },
			})
			require.Equal(t, uint64(bad.Load()), b.Runner.HookPanics())
		})
	}
}

type stringerPanic struct{}

func (stringerPanic) String() string { return enginetest.PanicValue }

func (stringerPanic) Error() string { return enginetest.PanicValue }

// TestRunner_TargetHookAfterPanicHasDuration: Hooks.Target after a
// panicked or Goexit-ed fetch gets the fetch's duration, and an error.
func TestRunner_TargetHookAfterPanicHasDuration(t *testing.T) {
	t.Parallel()
	type call struct {
		err error
		d   time.Duration
	}
	calls := make(chan call, 8)
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		start := time.Now()
		for time.Since(start) < time.Millisecond { // spend a measurable moment
			runtime.Gosched()
		}
		switch kind, _ := jobOf(tg.URL); kind {
		case "panic":
			panic(enginetest.PanicValue)
		case "goexit":
			runtime.Goexit()
		}
		return engine.Result{}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{Hooks: engine.Hooks{Target: func(err error, d time.Duration, _ int) { calls <- call{err, d} }}})
	id := b.Submit(t, "alice", []engine.Target{tgt("panic", 0), tgt("goexit", 1)})
	j := waitJob(t, b.Runner, id)
	require.Equal(t, engine.StatusFailed, j.Status)
	for range 2 {
		c := testkit.Recv(t, calls)
		require.Error(t, c.err)
		require.GreaterOrEqual(t, c.d, time.Millisecond)
	}
	testkit.RequireNoneOf(t, b.Logs.String(), enginetest.PanicValue)
}

// TestRunner_CloseFromAHook: a hook that closes the runner gets its Close
// back (Close does not wait for the hooks, which would wait for the hook
// calling it), the runner stops, the job the hook ran for stays done and
// the hooks queued after it still run; a later Close returns too. Called
// while another Close waits for the hooks, the hook's Close returns at
// once and then the other does.
func TestRunner_CloseFromAHook(t *testing.T) {
	t.Parallel()
	for _, other := range []bool{false, true} {
		t.Run(fmt.Sprintf("another Close under way %v", other), func(t *testing.T) {
			t.Parallel()
			var r *engine.Runner
			ready, closed, after := make(chan struct{}), make(chan struct{}), make(chan int, 1)
			hooks := engine.Hooks{
				Job: func(outcome string) {
					if outcome == engine.StatusDone {
						<-ready
						r.Close()
						close(closed)
					}
				},
				JobSeconds: func(time.Duration) { // queued after the Job hook's done
					select {
					case <-closed:
						after <- 1
					default:
						after <- 0
					}
				},
			}
			b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{Hooks: hooks})
			r = b.Runner
			id := b.Submit(t, "alice", enginetest.Targets("alice", 1))
			b.WaitStatus(t, id, engine.StatusDone)
			otherClosed := make(chan struct{})
			if other {
				go func() { r.Close(); close(otherClosed) }()
				testkit.WaitFor(t, "the other Close to begin", func() bool { return errors.Is(r.Err(), engine.ErrClosed) })
			}
			close(ready)
			testkit.RequireClosed(t, closed)
			if other {
				testkit.RequireClosed(t, otherClosed)
			}
			r.Close()
			require.ErrorIs(t, r.Err(), engine.ErrClosed)
			require.Equal(t, 1, testkit.Recv(t, after), "the hook queued after the closing one ran after its Close returned")
			j, ok := r.Job(id)
			require.True(t, ok)
			require.Equal(t, engine.StatusDone, j.Status)
			_, _, err := r.Submit(context.Background(), enginetest.Caller("bob"), "", enginetest.Targets("bob", 1))
			require.ErrorIs(t, err, engine.ErrClosed)
		})
	}
}
