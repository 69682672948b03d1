package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestRunner_Close(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		close(started)
		<-ctx.Done()
		return engine.Result{}, fmt.Errorf("interrupted: %w", ctx.Err())
	}, engine.Config{JobsPerCaller: 2})
	running := b.Submit(t, "alice", enginetest.Targets("a", 3))
	queued := b.Submit(t, "alice", enginetest.Targets("q", 1))
	testkit.Recv(t, started)

	b.Runner.Close()
	b.Runner.Close() // idempotent

	j, ts, ok := b.Runner.Status(running)
	require.True(t, ok, "Status still reads the store after Close")
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "shutdown", j.Error)
	require.Equal(t, "failed", ts[0].Status, "the in-flight outcome is stored")
	require.Equal(t, "interrupted: context canceled", ts[0].Error)
	require.Equal(t, "pending", ts[1].Status)
	require.Contains(t, ts[1].Hint, "not run: the server shut down", "a target the shutdown left says it will not run")
	j, _, _ = b.Runner.Status(queued)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "shutdown", j.Error)
	require.False(t, b.Runner.Cancel(running))
	left, err := b.Store.Unsettled()
	require.NoError(t, err)
	require.Empty(t, left)
	require.Contains(t, b.Logs.String(), `msg="runner closed; live jobs failed \"shutdown\"" count=2`, "a close that failed live jobs says how many")
}

// TestRunner_CleanCloseSaysNothingFailed: a runner closed with no live job
// logs only that it closed: no "jobs failed" with a count of 0 to read as
// an alarm.
func TestRunner_CleanCloseSaysNothingFailed(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 1))
	b.WaitSettled(t, id)
	b.Runner.Close()
	logs := b.Logs.String()
	require.Contains(t, logs, `msg="runner closed"`)
	require.NotContains(t, logs, "failed \"shutdown\"")
}

// TestRunner_CloseStartsNoTarget: Close stops the dispatching before it
// cancels the fetches, so a fetch that returns at the cancel never has its
// job's next target dispatched (and fetched under a cancelled context): the
// job fails "shutdown" with that target pending. The window is narrow, so
// the test closes many runners.
func TestRunner_CloseStartsNoTarget(t *testing.T) {
	t.Parallel()
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	var late atomic.Int32
	store := enginetest.OpenStore(t, "") // one store: each round's runner reaps none
	for range rounds {
		started := make(chan struct{})
		r, err := engine.New(store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
			if _, idx := jobOf(tg.URL); idx > 0 {
				late.Add(1)
				return engine.Result{Content: "late"}, nil
			}
			close(started)
			<-ctx.Done()
			return engine.Result{}, ctx.Err()
		}, engine.Config{}, nil)
		require.NoError(t, err)
		id, _, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a", 2))
		require.NoError(t, err)
		testkit.Recv(t, started)
		r.Close()
		j, ts, ok := r.Status(id)
		require.True(t, ok)
		require.Equal(t, "failed", j.Status)
		require.Equal(t, "shutdown", j.Error)
		require.Equal(t, "failed", ts[0].Status, "the target in flight is stored")
		require.Equal(t, "pending", ts[1].Status, "no target starts after Close")
	}
	require.Zero(t, late.Load(), "targets fetched after Close")
}

// TestRunner_ReadsDuringCloseShowFetchRunning: while Close waits for a
// fetch in flight, that target reads running, every read agrees, and
// Cancel answers false.
func TestRunner_ReadsDuringCloseShowFetchRunning(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 0 {
			return engine.Result{Content: "first"}, nil
		}
		<-ctx.Done()
		close(cancelled)
		<-release
		return engine.Result{}, &engine.TargetError{Msg: "cancelled"}
	}
	b := enginetest.Setup(t, fetch, engine.Config{})
	id := b.Submit(t, "alice", []engine.Target{tgt("ok", 0), tgt("ok", 1), tgt("ok", 2)})
	waitRunning(t, b.Runner, id, 1)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		b.Runner.Close()
	}()
	testkit.Recv(t, cancelled)
	for range 50 {
		j, ts, ok := b.Runner.Status(id)
		require.True(t, ok)
		require.Equal(t, engine.TargetDone, ts[0].Status)
		require.Equal(t, engine.TargetRunning, ts[1].Status, "the fetch Close waits for reads running")
		require.Equal(t, engine.TargetPending, ts[2].Status)
		require.Equal(t, 1, j.TargetsDone)
		jj, ok := b.Runner.Job(id)
		require.True(t, ok)
		require.Equal(t, j, jj)
		_, ok = b.Runner.ResultJSON(id, 1)
		require.False(t, ok)
		require.False(t, b.Runner.Cancel(id), "Cancel after Close began")
	}
	close(release)
	testkit.Recv(t, closed)
	j := requireSettled(t, b, id)
	require.Equal(t, engine.StatusFailed, j.Status)
	require.Equal(t, "shutdown", j.Error)
	_, ts, _ := b.Runner.Status(id)
	require.Equal(t, engine.TargetFailed, ts[1].Status, "the outcome Close waited for is stored")
	require.Equal(t, engine.TargetPending, ts[2].Status)
}

// TestRunner_WaitDuringCloseNeverReturnsLive: a Wait that runs while Close
// waits for a fetch in flight returns ErrClosed "with the job as it was
// left once the runner has stopped": never a live job, and the same job
// the reads give once Close has returned (Wait does not return early;
// SPEC rule 9: Close leaves no job live).
func TestRunner_WaitDuringCloseNeverReturnsLive(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-ctx.Done()
		close(cancelled)
		<-release // the fetch takes a moment to return at the cancel
		return engine.Result{Content: "finished at the cancel"}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{})
	id := b.Submit(t, "alice", []engine.Target{tgt("ok", 0)})
	waitRunning(t, b.Runner, id, 0)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		b.Runner.Close()
	}()
	testkit.Recv(t, cancelled)
	// Close is under way and waits for the fetch. A Wait now may block
	// (and end on its ctx: the job as it stands, running) or return
	// ErrClosed with the job as Close leaves it: never ErrClosed with a
	// live job. The Wait is watched for half a second (a window to
	// observe, not a bound on anything).
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	j, err := b.Runner.Wait(ctx, id)
	close(release)
	testkit.Recv(t, closed)
	final, ok := b.Runner.Job(id)
	require.True(t, ok)
	require.False(t, engine.IsLive(final.Status))
	if errors.Is(err, context.DeadlineExceeded) {
		return
	}
	require.ErrorIs(t, err, engine.ErrClosed)
	require.False(t, engine.IsLive(j.Status), "Wait returned ErrClosed with the job %s while Close was still waiting for its fetch; Close then left it %s", j.Status, final.Status)
	require.Equal(t, final, j)
}

// TestRunner_ShutdownGivesUpOnStubbornFetch: a fetch that ignores its
// context does not hold Shutdown(ctx) past ctx: Shutdown returns ctx's
// error, the job fails "shutdown" with its target pending, another job
// settles, a second Shutdown returns nil; the late outcome is dropped (and
// logged), never written, and no hook runs after Shutdown returned.
func TestRunner_ShutdownGivesUpOnStubbornFetch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	returned := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if kind, _ := jobOf(tg.URL); kind == "stubborn" {
			defer close(returned)
			started <- struct{}{}
			<-release // ignores ctx
			return engine.Result{Content: "late <result>"}, nil
		}
		return engine.Result{Content: "ok"}, nil
	}
	var hooksAfter atomic.Int32
	var shutdownDone atomic.Bool
	after := func() {
		if shutdownDone.Load() {
			hooksAfter.Add(1)
		}
	}
	b := enginetest.Setup(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 4, Hooks: engine.Hooks{
		Target: func(error, time.Duration, int) { after() },
		Job:    func(string) { after() },
	}})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	id := b.Submit(t, "alice", []engine.Target{tgt("stubborn", 0), tgt("ok", 1)})
	other := b.Submit(t, "bob", []engine.Target{tgt("ok", 0)})
	testkit.Recv(t, started)
	waitRunning(t, b.Runner, id, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var err error
	returns(t, "Shutdown", func() { err = b.Runner.Shutdown(ctx) })
	shutdownDone.Store(true)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	j, ts, ok := b.Runner.Status(id)
	require.True(t, ok)
	require.Equal(t, engine.StatusFailed, j.Status)
	require.Equal(t, "shutdown", j.Error)
	require.Equal(t, engine.TargetPending, ts[0].Status)
	require.NoError(t, b.Runner.Shutdown(context.Background()), "a second Shutdown")

	j = requireSettled(t, b, id)
	require.Equal(t, engine.StatusFailed, j.Status)
	requireSettled(t, b, other)
	before, beforeTs, err := b.Store.JobWithTargets(id)
	require.NoError(t, err)
	require.Equal(t, persistence.TargetPending, beforeTs[0].Status)

	releaseOnce.Do(func() { close(release) })
	testkit.RequireClosed(t, returned)
	testkit.WaitFor(t, "the late outcome dropped and logged", func() bool {
		return strings.Contains(b.Logs.String(), "outcome is dropped")
	})
	afterRec, afterTs, err := b.Store.JobWithTargets(id)
	require.NoError(t, err)
	require.Equal(t, before, afterRec, "the job's row after Shutdown returned")
	require.Equal(t, beforeTs, afterTs, "the targets after Shutdown returned: never written")
	j2, ts, ok := b.Runner.Status(id)
	require.True(t, ok)
	require.Equal(t, j, j2)
	require.Equal(t, engine.TargetPending, ts[0].Status)
	require.Zero(t, hooksAfter.Load(), "a hook ran after Shutdown returned")
}

// TestRunner_ShutdownReturnsDespiteBlockingHook: with a hook that blocks,
// Shutdown(ctx) still returns once ctx is done (Shutdown's doc: it gives
// up when ctx is done; Close is bounded), and the job is settled. The Hooks
// doc asks hooks not to block: its promise that every hook has run once
// Shutdown returns cannot hold for a hook that never returns.
func TestRunner_ShutdownReturnsDespiteBlockingHook(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(block) }) }
	defer unblock()
	blocked := make(chan struct{}, 1)
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{Hooks: engine.Hooks{Job: func(o string) {
		if o == "done" {
			select {
			case blocked <- struct{}{}:
			default:
			}
			<-block
		}
	}}})
	id := b.Submit(t, "alice", []engine.Target{tgt("ok", 0)})
	testkit.Recv(t, blocked)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	returns(t, "Shutdown with a hook that blocks", func() { _ = b.Runner.Shutdown(ctx) })
	unblock()
	requireSettled(t, b, id)
}

// TestRunner_FailsClosed: when the runner's own code fails past what
// supervision contains (here the supervisor panics inside a store write),
// the runner closes itself: live jobs fail "internal error" in the store,
// Submit answers ErrClosed at once, reads answer from the store, Err
// reports it, and Close still returns promptly.
func TestRunner_FailsClosed(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return engine.Result{}, ctx.Err()
	}, engine.Config{JobsPerCaller: 1})
	live := b.Submit(t, "alice", enginetest.Targets("a", 2))
	testkit.Recv(t, started)
	testkit.WaitFor(t, "the running row", func() bool {
		rec, err := b.Store.Job(live)
		return err == nil && rec.Status == "running"
	})
	var once atomic.Bool
	b.Store.SetWriteFault(func() error {
		if once.CompareAndSwap(false, true) {
			panic(enginetest.PanicValue) // in the supervisor's CreateJob
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	_, _, err := b.Runner.Submit(ctx, enginetest.Caller("bob"), "", enginetest.Targets("b", 1))
	require.ErrorIs(t, err, engine.ErrClosed)
	require.NoError(t, ctx.Err(), "answered, not ended by its context")
	testkit.WaitFor(t, "the runner failed", func() bool { return errors.Is(b.Runner.Err(), engine.ErrFailed) })
	require.ErrorIs(t, b.Runner.Err(), engine.ErrClosed)

	j, err := b.Runner.Wait(ctx, live)
	require.ErrorIs(t, err, engine.ErrClosed)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "internal error", j.Error)
	rec, err := b.Store.Job(live)
	require.NoError(t, err)
	require.Equal(t, "failed", rec.Status)
	require.True(t, rec.Settled)
	require.False(t, b.Runner.Cancel(live))
	b.Runner.Touch(live)
	_, _, err = b.Runner.Submit(context.Background(), enginetest.Caller("carol"), "", enginetest.Targets("c", 1))
	require.ErrorIs(t, err, engine.ErrClosed)
	b.Runner.Close()
	testkit.RequireNoneOf(t, b.Logs.String(), enginetest.PanicValue)
	require.Contains(t, b.Logs.String(), "runner failed")
}

// A durable runner whose disk fails every write from a target's outcome
// on (the job waits in storing for the store's writer, which retries)
// still shuts down once Shutdown's context is done: the retried writes
// are given up, the drain ends, and Shutdown returns the context's error,
// not after the drain's own bound (minutes).
func TestRunner_DurableShutdownGivesUpAFailingDisk(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	store.SetRetryWait(time.Millisecond)
	gate := make(chan struct{})
	b := enginetest.SetupOn(t, store, func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-gate
		return enginetest.OKFetch(ctx, c, tg)
	}, engine.Config{Durability: engine.DurabilitySync, RetryWait: time.Millisecond})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	testkit.WaitFor(t, "the running row", func() bool {
		rec, err := store.Job(id)
		return err == nil && rec.Status == "running"
	})
	var failed atomic.Int64
	store.SetWriteFault(func() error {
		failed.Add(1)
		return errors.New("input/output error")
	})
	close(gate)
	testkit.WaitFor(t, "the outcome's write retried", func() bool { return failed.Load() > 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Runner.Shutdown(ctx) }()
	require.ErrorIs(t, testkit.Recv(t, done), context.DeadlineExceeded)
	store.SetWriteFault(nil)
}
