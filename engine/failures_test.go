package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// panicValue is what the hooks and fetches of these tests panic with: it
// must never reach a log line.
const panicValue = "PANIC-VALUE-7f3a"

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
						panic(panicValue)
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
				b := setupHooked(t, fetch, engine.Config{JobsPerCaller: 1, Hooks: hooks})
				r := b.r

				ctx := context.Background()
				for i := range 3 {
					id, _, err := r.Submit(ctx, caller("alice"), "", targets("j"+string(rune('a'+i)), 2))
					require.NoError(t, err)
					other, _, err := r.Submit(ctx, caller("alice"), "", targets("other"+string(rune('a'+i)), 1))
					if err != nil {
						require.ErrorIs(t, err, engine.ErrCallerBusy, "the cap holds while the job lives")
					}
					wctx, cancel := context.WithTimeout(ctx, waitTimeout)
					j, err := r.Wait(wctx, id)
					require.NoError(t, err)
					require.Equal(t, "partial", j.Status)
					if other != "" { // its job had ended already: wait for this one too
						_, err = r.Wait(wctx, other)
						require.NoError(t, err)
					}
					cancel()
				}
				id, _, err := r.Submit(ctx, caller("bob"), "", targets("c", 2))
				require.NoError(t, err)
				if r.Cancel(id) {
					j, _ := r.Job(id)
					require.Equal(t, "cancelled", j.Status)
				}
				done := make(chan struct{})
				go func() { r.Close(); close(done) }()
				recv(t, done)
				require.NotZero(t, calls.Load(), "the hook ran")
				if mode == "goexit" {
					require.Contains(t, b.logs.String(), "hook ended its goroutine")
				}
				require.NotZero(t, r.HookPanics(), "its failure was counted")
				require.Contains(t, b.logs.String(), "hook="+hook)
				require.NotContains(t, b.logs.String(), panicValue)
				require.NoError(t, b.store.Jobs(func(j persistence.JobRecord) bool {
					require.False(t, engine.IsLive(j.Status), "no job left live")
					require.True(t, j.Settled)
					return true
				}))
			})
		}
	}
}

// TestRunner_FetchGoexit: a FetchFunc that ends its goroutine (t.FailNow
// does) is a failed target, "internal error", like a panic; the job goes
// on and the hook is told an error with the time the fetch took.
func TestRunner_FetchGoexit(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/0") {
			time.Sleep(time.Millisecond) // a measurable duration, not a wait
			runtime.Goexit()
		}
		return engine.Result{Content: "ok"}, nil
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 2))
	_, ts := b.waitStatus(t, id, "partial")
	require.Equal(t, "failed", ts[0].Status)
	require.Equal(t, "internal error", ts[0].Error)
	require.Equal(t, "done", ts[1].Status)
	require.Contains(t, b.logs.String(), "fetch ended its goroutine")
}

// TestRunner_TypedNilTargetError: a nil *TargetError returned as an error
// is a failed target, never a panic of the runner's.
func TestRunner_TypedNilTargetError(t *testing.T) {
	t.Parallel()
	b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		var te *engine.TargetError
		return engine.Result{}, te
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 1))
	_, ts := b.waitStatus(t, id, "failed")
	require.Equal(t, "internal error", ts[0].Error)
	require.Equal(t, "", (*engine.TargetError)(nil).Error())
}

// TestRunner_LongErrorsAreCut: an error text or a hint too long to store is
// cut, and the target is stored failed as usual.
func TestRunner_LongErrorsAreCut(t *testing.T) {
	t.Parallel()
	b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, &engine.TargetError{Msg: strings.Repeat("é", 3<<20), Hint: strings.Repeat("h", 3<<20)}
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 2))
	_, ts := b.waitStatus(t, id, "failed")
	for _, tr := range ts {
		require.LessOrEqual(t, len(tr.Error), engine.MaxErrorBytes)
		require.LessOrEqual(t, len(tr.Hint), engine.MaxHintBytes)
		require.True(t, strings.HasSuffix(tr.Error, "…"))
		require.True(t, strings.HasPrefix(tr.Error, "éé"))
	}
}

// TestRunner_ShutdownGivesUp: a fetch that ignores its context does not
// hold Shutdown past its ctx: the job fails "shutdown", the target stays
// pending, and the late outcome is dropped, never written.
func TestRunner_ShutdownGivesUp(t *testing.T) {
	t.Parallel()
	started, release, returned := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		defer close(returned)
		started <- struct{}{}
		<-release // ignores its context
		return engine.Result{Content: "late"}, nil
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 2))
	recv(t, started)
	waitFor(t, "the target running", func() bool {
		_, ts, _ := b.r.Targets(id)
		return ts[0].Status == "running"
	})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, b.r.Shutdown(ctx), context.DeadlineExceeded)
	j, ts, ok := b.r.Status(id)
	require.True(t, ok)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "shutdown", j.Error)
	require.Equal(t, "pending", ts[0].Status)
	require.NoError(t, b.r.Shutdown(context.Background()), "a second call")

	close(release)
	recv(t, returned)
	waitFor(t, "the late outcome dropped", func() bool { return strings.Contains(b.logs.String(), "outcome is dropped") })
	rec, stored, err := b.store.JobWithTargets(id)
	require.NoError(t, err)
	require.Equal(t, "failed", rec.Status)
	require.Equal(t, "pending", stored[0].Status, "never written after Shutdown returned")
}

// TestRunner_FailsClosed: when the runner's own code fails past what
// supervision contains (here the supervisor panics inside a store write),
// the runner closes itself: live jobs fail "internal error" in the store,
// Submit answers ErrClosed at once, reads answer from the store, Err
// reports it, and Close still returns promptly.
func TestRunner_FailsClosed(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	b := setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return engine.Result{}, ctx.Err()
	}, engine.Config{JobsPerCaller: 1})
	live := b.submit(t, "alice", targets("a", 2))
	recv(t, started)
	waitFor(t, "the running row", func() bool {
		rec, err := b.store.Job(live)
		return err == nil && rec.Status == "running"
	})
	var once atomic.Bool
	b.store.SetWriteFault(func() error {
		if once.CompareAndSwap(false, true) {
			panic(panicValue) // in the supervisor's CreateJob
		}
		return nil
	})
	begun := time.Now()
	_, _, err := b.r.Submit(context.Background(), caller("bob"), "", targets("b", 1))
	require.ErrorIs(t, err, engine.ErrClosed)
	require.Less(t, time.Since(begun), waitTimeout, "answered, not timed out")
	waitFor(t, "the runner failed", func() bool { return errors.Is(b.r.Err(), engine.ErrFailed) })
	require.ErrorIs(t, b.r.Err(), engine.ErrClosed)

	wctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	j, err := b.r.Wait(wctx, live)
	require.ErrorIs(t, err, engine.ErrClosed)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "internal error", j.Error)
	rec, err := b.store.Job(live)
	require.NoError(t, err)
	require.Equal(t, "failed", rec.Status)
	require.True(t, rec.Settled)
	require.False(t, b.r.Cancel(live))
	b.r.Touch(live)
	_, _, err = b.r.Submit(context.Background(), caller("carol"), "", targets("c", 1))
	require.ErrorIs(t, err, engine.ErrClosed)
	done := make(chan struct{})
	go func() { b.r.Close(); close(done) }()
	recv(t, done)
	require.NotContains(t, b.logs.String(), panicValue)
	require.Contains(t, b.logs.String(), "runner failed")
}

// setupHooked is setup with cfg.Hooks as given.
func setupHooked(t *testing.T, fetch engine.FetchFunc, cfg engine.Config) *bundle {
	t.Helper()
	store, err := persistence.Open("")
	require.NoError(t, err)
	b := &bundle{store: store, clock: newClock(), logs: &syncBuffer{}}
	cfg.Now = b.clock.Now
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.r, err = engine.New(store, fetch, cfg, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		b.r.Close()
		require.NoError(t, store.Close())
	})
	return b
}
