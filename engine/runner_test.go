package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// jobOf returns the job name and the target index a URL of targets() names.
func jobOf(u string) (string, int) {
	parts := strings.Split(strings.TrimPrefix(u, "http://h/"), "/")
	var idx int
	fmt.Sscan(parts[1], &idx)
	return parts[0], idx
}

func TestRunner_Submit(t *testing.T) {
	t.Parallel()

	t.Run("StoresJobBeforeReturning", func(t *testing.T) {
		t.Parallel()
		gate := make(chan struct{})
		b := setup(t, func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
			<-gate
			return engine.Result{Content: t.URL}, nil
		}, engine.Config{})
		defer close(gate)
		id := b.submit(t, "alice", targets("a", 3))
		require.Len(t, id, 32)
		rec, ts, err := b.store.JobWithTargets(id)
		require.NoError(t, err)
		require.Equal(t, "alice", rec.Caller)
		require.Len(t, ts, 3)
		for _, tr := range ts {
			require.Equal(t, persistence.TargetPending, tr.Status)
		}
		waitFor(t, "the created hook", func() bool { return b.hooks.job("created") == 1 }) // hooks run in their own actor
		require.Equal(t, 1, b.hooks.job("created"))
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := setup(t, okFetch, engine.Config{TargetsPerJob: 2})
		ctx := context.Background()
		_, _, err := b.r.Submit(ctx, nil, "", targets("a", 1))
		require.ErrorIs(t, err, engine.ErrInvalid)
		_, _, err = b.r.Submit(ctx, caller(""), "", targets("a", 1))
		require.ErrorIs(t, err, engine.ErrInvalid)
		_, _, err = b.r.Submit(ctx, caller("alice"), "", []engine.Target{{URL: "http://h/a/0"}, {URL: ""}})
		require.ErrorIs(t, err, engine.ErrInvalid)
		_, _, err = b.r.Submit(ctx, caller("alice"), "", nil)
		require.ErrorIs(t, err, engine.ErrNoTargets)
		_, _, err = b.r.Submit(ctx, caller("alice"), "", targets("a", 3))
		require.ErrorIs(t, err, engine.ErrTooManyTargets)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _, err = b.r.Submit(cctx, caller("alice"), "", targets("a", 1))
		require.ErrorIs(t, err, context.Canceled)

		b.r.Close()
		_, _, err = b.r.Submit(ctx, caller("alice"), "", targets("a", 1))
		require.ErrorIs(t, err, engine.ErrClosed)
		// Invalid input is still reported as invalid after Close.
		_, _, err = b.r.Submit(ctx, nil, "", targets("a", 1))
		require.ErrorIs(t, err, engine.ErrInvalid)
	})

	t.Run("Caps", func(t *testing.T) {
		t.Parallel()
		gate := make(chan struct{})
		b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			<-gate
			return engine.Result{}, nil
		}, engine.Config{JobsPerCaller: 1, JobsTotal: 2})
		defer close(gate)
		b.submit(t, "alice", targets("a", 1))
		_, _, err := b.r.Submit(context.Background(), caller("alice"), "", targets("a2", 1))
		require.ErrorIs(t, err, engine.ErrCallerBusy)
		b.submit(t, "bob", targets("b", 1))
		_, _, err = b.r.Submit(context.Background(), caller("carol"), "", targets("c", 1))
		require.ErrorIs(t, err, engine.ErrBusy)
	})

	t.Run("ConcurrentSubmitsNeverPassACap", func(t *testing.T) {
		t.Parallel()
		gate := make(chan struct{})
		b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			<-gate
			return engine.Result{}, nil
		}, engine.Config{JobsPerCaller: 2, JobsTotal: 5, Workers: 2})
		defer close(gate)
		var accepted sync.Map // caller → count
		var total atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				name := fmt.Sprintf("caller-%d", i%4)
				_, _, err := b.r.Submit(context.Background(), caller(name), "", targets(fmt.Sprintf("j%d", i), 2))
				if err == nil {
					total.Add(1)
					n, _ := accepted.LoadOrStore(name, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
					return
				}
				if !errors.Is(err, engine.ErrBusy) && !errors.Is(err, engine.ErrCallerBusy) {
					t.Errorf("submit: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, int32(5), total.Load(), "exactly JobsTotal jobs are accepted")
		accepted.Range(func(k, v any) bool {
			require.LessOrEqual(t, v.(*atomic.Int32).Load(), int32(2), "caller %s", k)
			return true
		})
		b.hooks.mu.Lock()
		require.LessOrEqual(t, b.hooks.maxDepth, 5)
		b.hooks.mu.Unlock()
	})
}

func TestRunner_Serial(t *testing.T) {
	t.Parallel()
	var b *bundle
	ids := make(chan string, 1)
	var inflight sync.Map // job name → *atomic.Int32
	var peak atomic.Int32
	var fail atomic.Value
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		name, idx := jobOf(tg.URL)
		n, _ := inflight.LoadOrStore(name, new(atomic.Int32))
		cur := n.(*atomic.Int32).Add(1)
		defer n.(*atomic.Int32).Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		id := <-ids // the job's id, once Submit has returned it
		ids <- id
		// Every earlier target must already be stored when idx starts.
		for i := 0; i < idx; i++ {
			tr, err := b.store.Target(id, i)
			if err != nil || tr.Status != persistence.TargetDone {
				fail.Store(fmt.Sprintf("target %d started before %d was stored (%v, %s)", idx, i, err, tr.Status))
			}
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b = setup(t, fetch, engine.Config{Workers: 2})
	id := b.submit(t, "alice", targets("a", 8))
	ids <- id
	b.waitStatus(t, id, "done")
	require.Nil(t, fail.Load())
	require.Equal(t, int32(1), peak.Load(), "one target of a job in flight at a time")
}

func TestRunner_Rotation(t *testing.T) {
	t.Parallel()

	t.Run("OneWorkerAlternates", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var order []string
		held := make(chan struct{})
		release := make(chan struct{})
		b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
			name, idx := jobOf(tg.URL)
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", name, idx+1))
			first := len(order) == 1
			mu.Unlock()
			if first {
				close(held)
				<-release
			}
			return engine.Result{}, nil
		}, engine.Config{Workers: 1})
		a := b.submit(t, "alice", targets("a", 3))
		recv(t, held)
		bid := b.submit(t, "bob", targets("b", 3))
		j, _, ok := b.r.Status(bid)
		require.True(t, ok)
		require.Equal(t, "queued", j.Status, "a job no worker has reached stays queued")
		close(release)
		b.waitStatus(t, a, "done")
		b.waitStatus(t, bid, "done")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"a1", "b1", "a2", "b2", "a3", "b3"}, order)
	})

	t.Run("TwoWorkersAtMostTwoAtOnce", func(t *testing.T) {
		t.Parallel()
		var now, peak atomic.Int32
		perJob := sync.Map{}
		var jobPeak atomic.Int32
		b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
			name, _ := jobOf(tg.URL)
			n, _ := perJob.LoadOrStore(name, new(atomic.Int32))
			if c := n.(*atomic.Int32).Add(1); c > jobPeak.Load() {
				jobPeak.Store(c)
			}
			defer n.(*atomic.Int32).Add(-1)
			c := now.Add(1)
			defer now.Add(-1)
			for {
				p := peak.Load()
				if c <= p || peak.CompareAndSwap(p, c) {
					break
				}
			}
			time.Sleep(200 * time.Microsecond) // simulated work, not a wait
			return engine.Result{}, nil
		}, engine.Config{Workers: 2, JobsPerCaller: 4})
		var ids []string
		for _, n := range []string{"a", "b", "c", "d"} {
			ids = append(ids, b.submit(t, "alice", targets(n, 6)))
		}
		for _, id := range ids {
			b.waitStatus(t, id, "done")
		}
		require.LessOrEqual(t, peak.Load(), int32(2))
		require.Equal(t, int32(1), jobPeak.Load(), "each job stays serial")
		b.hooks.mu.Lock()
		require.Equal(t, 2, b.hooks.maxInflight)
		b.hooks.mu.Unlock()
	})
}

func TestRunner_TerminalStatus(t *testing.T) {
	t.Parallel()
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		name, idx := jobOf(tg.URL)
		switch {
		case name == "failing", name == "mixed" && idx == 1:
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "check the URL"}
		case name == "plain":
			return engine.Result{}, errors.New("boom")
		}
		return engine.Result{Content: tg.URL, Meta: map[string]any{"idx": float64(idx)}}, nil
	}
	b := setup(t, fetch, engine.Config{JobsPerCaller: 4, Workers: 2})
	done := b.submit(t, "alice", targets("ok", 2))
	partial := b.submit(t, "alice", targets("mixed", 3))
	failed := b.submit(t, "alice", targets("failing", 2))
	plain := b.submit(t, "alice", targets("plain", 1))

	j, ts := b.waitStatus(t, done, "done")
	require.Equal(t, 2, j.TargetsDone)
	require.Equal(t, &engine.Result{Content: "http://h/ok/1", Meta: map[string]any{"idx": float64(1)}}, ts[1].Result)

	j, ts = b.waitStatus(t, partial, "partial")
	require.Equal(t, 3, j.TargetsDone)
	require.Equal(t, "failed", ts[1].Status)
	require.Equal(t, "not found", ts[1].Error)
	require.Equal(t, "check the URL", ts[1].Hint)
	require.Nil(t, ts[1].Result)
	require.Equal(t, "done", ts[2].Status)

	b.waitStatus(t, failed, "failed")
	_, ts = b.waitStatus(t, plain, "failed")
	require.Equal(t, "boom", ts[0].Error)
	require.Empty(t, ts[0].Hint)

	for range 4 {
		recv(t, b.hooks.ended)
	}
	// Hooks.JobSeconds follows Hooks.Job; Close returns once every job
	// actor has stopped, so after all their hooks.
	b.r.Close()
	b.hooks.mu.Lock()
	defer b.hooks.mu.Unlock()
	require.Equal(t, map[string]int{"created": 4, "done": 1, "partial": 1, "failed": 2}, b.hooks.jobs)
	require.Equal(t, 4, b.hooks.jobSeconds, "JobSeconds once per job")
	require.Equal(t, 8, b.hooks.targets)
	require.Equal(t, 4, b.hooks.targetErrs)
}

func TestRunner_Idempotency(t *testing.T) {
	t.Parallel()
	var fetches atomic.Int32
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		fetches.Add(1)
		if name, _ := jobOf(tg.URL); name == "bad" {
			return engine.Result{}, errors.New("nope")
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b := setup(t, fetch, engine.Config{TTL: time.Hour, JobsPerCaller: 8})
	ctx := context.Background()

	id := b.submit(t, "alice", targets("a", 2))
	b.waitStatus(t, id, "done")
	n := fetches.Load()

	again, reused, err := b.r.Submit(ctx, caller("alice"), "", targets("a", 2))
	require.NoError(t, err)
	require.True(t, reused)
	require.Equal(t, id, again)
	waitFor(t, "the reused hook", func() bool { return b.hooks.job("reused") == 1 })
	require.Equal(t, 1, b.hooks.job("reused"))

	other, reused, err := b.r.Submit(ctx, caller("bob"), "", targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused, "another caller gets a new job")
	require.NotEqual(t, id, other)

	diff, reused, err := b.r.Submit(ctx, caller("alice"), "", targets("a", 3))
	require.NoError(t, err)
	require.False(t, reused, "other targets make a new job")
	require.NotEqual(t, id, diff)
	b.waitStatus(t, other, "done")
	b.waitStatus(t, diff, "done")
	require.Equal(t, n+2+3, fetches.Load(), "nothing was fetched twice for the reused job")

	// Options count: the same URL with other options is another job.
	yes := true
	withOpts := targets("a", 2)
	withOpts[0].Options.Context = &yes
	o, reused, err := b.r.Submit(ctx, caller("alice"), "", withOpts)
	require.NoError(t, err)
	require.False(t, reused)
	b.waitStatus(t, o, "done")

	// After lease + TTL the job is not reused.
	b.clock.Advance(time.Hour)
	fresh, reused, err := b.r.Submit(ctx, caller("alice"), "", targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, id, fresh)
	b.waitStatus(t, fresh, "done")

	// A failed job is never reused.
	bad := b.submit(t, "alice", targets("bad", 1))
	b.waitStatus(t, bad, "failed")
	bad2, reused, err := b.r.Submit(ctx, caller("alice"), "", targets("bad", 1))
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, bad, bad2)
}

// A live job's lease moves with every stored target, though its stored row
// is rewritten only when its status changes: a job older than TTL whose
// last target was stored within TTL is still reused.
func TestRunner_IdempotencyLiveJobLease(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var b *bundle
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 0 {
			b.clock.Advance(50 * time.Minute) // stored at created + 50 min
		} else {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b = setup(t, fetch, engine.Config{TTL: time.Hour})
	id := b.submit(t, "alice", targets("a", 2))
	waitFor(t, "the first target stored", func() bool {
		j, _, ok := b.r.Status(id)
		return ok && j.TargetsDone == 1
	})
	b.clock.Advance(20 * time.Minute) // created + TTL has passed; lease + TTL has not
	again, reused, err := b.r.Submit(context.Background(), caller("alice"), "", targets("a", 2))
	require.NoError(t, err)
	require.True(t, reused, "the lease is the first target's store time")
	require.Equal(t, id, again)
	close(gate)
	b.waitStatus(t, id, "done")
}

func TestRunner_IdempotencyNeverReusesCancelled(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return engine.Result{}, nil
	}, engine.Config{JobsPerCaller: 2})
	defer close(gate)
	id := b.submit(t, "alice", targets("a", 2))
	require.True(t, b.r.Cancel(id))
	id2, reused, err := b.r.Submit(context.Background(), caller("alice"), "", targets("a", 2))
	require.NoError(t, err, "a cancel frees the caller's slot at once")
	require.False(t, reused)
	require.NotEqual(t, id, id2)
}

func TestRunner_Cancel(t *testing.T) {
	t.Parallel()
	started := make(chan int, 10)
	release := make(chan struct{})
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		_, idx := jobOf(tg.URL)
		started <- idx
		<-release
		return engine.Result{Content: "late"}, nil
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 4))
	require.Equal(t, 0, recv(t, started))

	require.True(t, b.r.Cancel(id))
	rec, err := b.store.Job(id)
	require.NoError(t, err)
	require.Equal(t, "cancelled", rec.Status, "cancelled is stored before Cancel returns")
	require.False(t, b.r.Cancel(id), "a cancelled job cannot be cancelled again")

	j, ts, ok := b.r.Status(id)
	require.True(t, ok)
	require.Equal(t, "cancelled", j.Status)
	require.Equal(t, "running", ts[0].Status, "the target in flight reads running")

	close(release)
	waitFor(t, "in-flight target stored", func() bool {
		_, ts, _ := b.r.Status(id)
		return ts[0].Status == "done"
	})
	j, ts, _ = b.r.Status(id)
	require.Equal(t, "cancelled", j.Status, "storing the in-flight target keeps cancelled")
	require.Equal(t, 1, j.TargetsDone)
	require.Equal(t, "late", ts[0].Result.Content)
	for _, tr := range ts[1:] {
		require.Equal(t, "pending", tr.Status)
	}
	select {
	case idx := <-started:
		t.Fatalf("target %d started after cancel", idx)
	default:
	}

	require.False(t, b.r.Cancel("unknown"))
	require.False(t, b.r.Cancel(strings.Repeat("0", 32)))
	require.Equal(t, 1, b.hooks.job("cancelled"))

	// A finished job cannot be cancelled.
	release2 := make(chan struct{})
	close(release2)
	done := b.submit(t, "bob", targets("b", 1))
	recv(t, started)
	b.waitStatus(t, done, "done")
	require.False(t, b.r.Cancel(done))
	require.Equal(t, 1, b.hooks.job("cancelled"))
}

// TestRunner_CancelStopsFetch: Cancel cancels the context of the job's
// fetch in flight, with cause ErrCancelled, and only that one: another
// job's fetch goes on; what the stopped fetch returns is stored.
func TestRunner_CancelStopsFetch(t *testing.T) {
	t.Parallel()
	started := make(chan string, 10)
	release := make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		started <- tg.URL
		select {
		case <-ctx.Done():
			return engine.Result{}, &engine.TargetError{Status: 409, Msg: "stopped: " + context.Cause(ctx).Error(), Hint: "h"}
		case <-release:
			return engine.Result{Content: "ok"}, nil
		}
	}, engine.Config{Workers: 2})
	a := b.submit(t, "alice", targets("a", 2))
	o := b.submit(t, "bob", targets("b", 1))
	got := []string{recv(t, started), recv(t, started)}
	slices.Sort(got)
	require.Equal(t, []string{"http://h/a/0", "http://h/b/0"}, got)
	require.True(t, b.r.Cancel(a))
	waitFor(t, "the cancelled job's target stored", func() bool {
		_, ts, _ := b.r.Status(a)
		return ts[0].Status == "failed"
	})
	j, ts, _ := b.r.Status(a)
	require.Equal(t, "cancelled", j.Status)
	require.Equal(t, "stopped: "+engine.ErrCancelled.Error(), ts[0].Error)
	require.Equal(t, "pending", ts[1].Status)
	_, ts, _ = b.r.Status(o)
	require.Equal(t, "running", ts[0].Status, "another job's fetch goes on")
	close(release)
	b.waitStatus(t, o, "done")
}

func TestRunner_CancelQueued(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var fetched sync.Map
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		fetched.Store(tg.URL, true)
		<-gate
		return engine.Result{}, nil
	}, engine.Config{})
	a := b.submit(t, "alice", targets("a", 1))
	q := b.submit(t, "bob", targets("q", 2))
	require.True(t, b.r.Cancel(q))
	close(gate)
	b.waitStatus(t, a, "done")
	j, ts, ok := b.r.Status(q)
	require.True(t, ok)
	require.Equal(t, "cancelled", j.Status)
	require.Equal(t, "pending", ts[0].Status)
	_, was := fetched.Load("http://h/q/0")
	require.False(t, was, "a cancelled queued job fetches nothing")
}

func TestRunner_Retry(t *testing.T) {
	t.Parallel()

	t.Run("BusyTwiceThenDone", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			if calls.Add(1) <= 2 {
				return engine.Result{}, fmt.Errorf("upstream 429: %w", engine.ErrRetryLater)
			}
			return engine.Result{Content: "ok"}, nil
		}, engine.Config{RetryWait: time.Millisecond})
		id := b.submit(t, "alice", targets("a", 1))
		_, ts := b.waitStatus(t, id, "done")
		require.Equal(t, "ok", ts[0].Result.Content)
		require.Equal(t, int32(3), calls.Load())
		// Status reads done once the row is written; the hooks follow it.
		require.Equal(t, "done", recv(t, b.hooks.ended))
		b.hooks.mu.Lock()
		require.Equal(t, 1, b.hooks.targets, "Hooks.Target once per stored target, not per busy answer")
		b.hooks.mu.Unlock()
	})

	t.Run("BusyPastRetryForFails", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		var calls atomic.Int32
		b = setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			calls.Add(1)
			b.clock.Advance(4 * time.Minute)
			return engine.Result{}, fmt.Errorf("upstream 503: %w", engine.ErrRetryLater)
		}, engine.Config{RetryWait: time.Millisecond, RetryFor: 10 * time.Minute})
		id := b.submit(t, "alice", targets("a", 1))
		_, ts := b.waitStatus(t, id, "failed")
		require.Equal(t, "upstream 503: retry later", ts[0].Error)
		// Busy at 4m (first), 8m, 12m: 12m−4m = 8m ≤ 10m, then 16m−4m > 10m.
		require.Equal(t, int32(4), calls.Load())
	})

	t.Run("WorkerServesOthersWhileOneWaits", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var order []string
		var busy atomic.Bool
		busy.Store(true)
		othersDone := make(chan struct{})
		b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
			name, idx := jobOf(tg.URL)
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", name, idx+1))
			mu.Unlock()
			if name == "a" && busy.Load() {
				return engine.Result{}, engine.ErrRetryLater
			}
			if name == "b" && idx == 2 {
				close(othersDone)
			}
			return engine.Result{}, nil
		}, engine.Config{RetryWait: time.Hour, JobsPerCaller: 2})
		a := b.submit(t, "alice", targets("a", 1))
		bid := b.submit(t, "alice", targets("b", 3))
		recv(t, othersDone)
		b.waitStatus(t, bid, "done")
		j, _, _ := b.r.Status(a)
		require.Equal(t, "running", j.Status, "a waits out RetryWait")
		mu.Lock()
		require.Equal(t, []string{"a1", "b1", "b2", "b3"}, order, "b runs while a waits")
		mu.Unlock()
	})
}

func TestRunner_Panic(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if name, idx := jobOf(tg.URL); name == "a" && idx == 1 {
			panic("secret panic value " + tg.URL)
		}
		return engine.Result{Content: tg.URL}, nil
	}, engine.Config{Workers: 1})
	id := b.submit(t, "alice", targets("a", 3))
	_, ts := b.waitStatus(t, id, "partial")
	require.Equal(t, "done", ts[0].Status)
	require.Equal(t, "failed", ts[1].Status)
	require.Equal(t, "internal error", ts[1].Error)
	require.Equal(t, "done", ts[2].Status, "the job goes on after the panic")

	later := b.submit(t, "bob", targets("b", 2))
	b.waitStatus(t, later, "done")

	logs := b.logs.String()
	require.Contains(t, logs, "worker restarted after a panic", "the supervision strategy restarted the worker")
	require.Contains(t, logs, "runtime/debug.Stack", "the panic is logged with a stack trace")
	require.NotContains(t, logs, "secret panic value")
}

func TestRunner_Status(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		started <- struct{}{}
		<-release
		return engine.Result{Content: "x"}, nil
	}, engine.Config{TTL: time.Hour})
	id := b.submit(t, "alice", targets("a", 2))
	recv(t, started)
	before, err := b.store.Job(id)
	require.NoError(t, err)
	b.clock.Advance(time.Minute)

	j, ts, ok := b.r.Status(id)
	require.True(t, ok)
	require.Equal(t, "running", j.Status)
	require.Equal(t, "alice", j.Caller)
	require.Equal(t, 2, j.TargetsTotal)
	require.Equal(t, before.Created/1e9, j.CreatedAt)
	require.Equal(t, "running", ts[0].Status)
	require.Equal(t, "pending", ts[1].Status)
	require.Equal(t, "http://h/a/1", ts[1].URL)
	after, err := b.store.Job(id)
	require.NoError(t, err)
	require.Equal(t, before.Lease, after.Lease, "Status never writes")

	_, _, ok = b.r.Status("nope")
	require.False(t, ok)
	_, _, ok = b.r.Status(strings.Repeat("ab", 16))
	require.False(t, ok)

	close(release)
	recv(t, started)
	b.waitStatus(t, id, "done")
	done, err := b.store.Job(id)
	require.NoError(t, err)
	require.Equal(t, b.clock.Now().UnixNano(), done.Lease, "storing a target bumps the lease")

	// Touch bumps the lease to now.
	b.clock.Advance(30 * time.Minute)
	b.r.Touch(id)
	touched, err := b.store.Job(id)
	require.NoError(t, err)
	require.Equal(t, b.clock.Now().UnixNano(), touched.Lease)
	b.r.Touch("unknown") // ignored

	// Past lease + TTL the job reads false, and a sweep deletes it.
	b.clock.Advance(time.Hour)
	_, _, ok = b.r.Status(id)
	require.False(t, ok, "an expired job is not readable")
	b.submit(t, "bob", targets("b", 1)) // Submit sweeps, after it answers
	waitFor(t, "the sweep", func() bool {
		_, err := b.store.Job(id)
		return errors.Is(err, persistence.ErrNotFound)
	})
	_, err = b.store.Target(id, 0)
	require.ErrorIs(t, err, persistence.ErrNotFound, "its targets too")
}

func TestRunner_Eviction(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	content := strings.Repeat("x", 1000)
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if name, _ := jobOf(tg.URL); name == "live" {
			<-gate
		}
		return engine.Result{Content: content}, nil
	}, engine.Config{MaxBytes: 3800, JobsPerCaller: 8, Workers: 2})
	defer close(gate)
	// A live job that holds a worker; its targets are never evicted.
	live := b.submit(t, "alice", targets("live", 2))
	var ids []string
	for i := range 5 {
		id := b.submit(t, "bob", targets(fmt.Sprintf("old%d", i), 1))
		b.waitStatus(t, id, "done")
		ids = append(ids, id)
		b.clock.Advance(time.Second)
	}
	// old4 reads done once its row is written; its actor evicts after that.
	waitFor(t, "old4's eviction", func() bool { return b.store.Bytes() <= 3800 })
	// ~1135 bytes each (a 1016-byte result, its outcome row, the job's row
	// and specs), and the live job's ~110: at most 3 fit in 3800 bytes; the
	// oldest went first.
	for _, id := range ids[:2] {
		_, _, ok := b.r.Status(id)
		require.False(t, ok, "oldest evicted")
	}
	for _, id := range ids[2:] {
		_, _, ok := b.r.Status(id)
		require.True(t, ok, "newest kept")
	}
	require.LessOrEqual(t, b.store.Bytes(), int64(3800))
	_, _, ok := b.r.Status(live)
	require.True(t, ok, "live jobs are never evicted")
}

// TestRunner_FailedAndCancelledJobsAreEvicted is the regression test for
// issue 23's flood: jobs that store no result (every target failed, or
// cancelled before one ran) counted nothing toward MaxBytes, so one key
// stored 3,000 of them in 38 s and nothing was ever evicted. Every row now
// counts: a flood of cancelled jobs, then one of failing jobs, stays within
// MaxBytes once each has settled (the bound: at most MaxBytes once the
// jobs have settled and their evictions have run; while jobs are live,
// their rows come on top, never evicted), oldest first, and the live job
// that is the oldest of all stays.
func TestRunner_FailedAndCancelledJobsAreEvicted(t *testing.T) {
	t.Parallel()
	const maxBytes = 8 << 10
	gate := make(chan struct{})
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch name, _ := jobOf(tg.URL); {
		case name == "blocker":
			<-gate
			return engine.Result{Content: "ok"}, nil
		case strings.HasPrefix(name, "fail"):
			return engine.Result{}, &engine.TargetError{Msg: "connection refused", Hint: "check that the host is up"}
		}
		return engine.Result{Content: "unexpected"}, nil
	}, engine.Config{MaxBytes: maxBytes, JobsPerCaller: 1000, JobsTotal: 1000, Workers: 1})
	counted := func() int64 {
		n, err := b.store.CountBytes()
		require.NoError(t, err)
		return n
	}
	within := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool { return counted() <= maxBytes })
	}
	// The oldest job, live: it holds the only worker, so the others wait.
	blocker := b.submit(t, "mallory", targets("blocker", 1))
	b.clock.Advance(time.Millisecond)

	const flood = 150
	var cancelled []string
	for i := range flood {
		id := b.submit(t, "mallory", targets(fmt.Sprintf("cancel%d", i), 3))
		require.True(t, b.r.Cancel(id))
		cancelled = append(cancelled, id)
		b.clock.Advance(time.Millisecond)
		within(fmt.Sprintf("cancelled job %d's eviction", i))
	}
	require.Equal(t, counted(), b.store.Bytes())
	_, _, ok := b.r.Status(blocker)
	require.True(t, ok, "the live job is never evicted")
	kept := 0
	for i, id := range cancelled {
		if _, _, ok := b.r.Status(id); ok {
			kept++
		} else {
			require.Zero(t, kept, "job %d is gone after a newer one was kept: the oldest go first", i)
		}
	}
	require.Positive(t, kept)
	require.Less(t, kept, flood/2, "most of the cancelled jobs were evicted")

	close(gate)
	b.waitStatus(t, blocker, "done")
	var failed []string
	for i := range flood {
		failed = append(failed, b.submit(t, "mallory", targets(fmt.Sprintf("fail%d", i), 2)))
		b.clock.Advance(time.Millisecond)
	}
	waitFor(t, "every failing job to end", func() bool {
		return b.hooks.job("failed") == flood
	})
	within("the failed jobs' eviction")
	require.Equal(t, counted(), b.store.Bytes())
	stored := 0
	require.NoError(t, b.store.Jobs(func(persistence.JobRecord) bool { stored++; return true }))
	require.Less(t, stored, flood/2, "most of the failed jobs were evicted")
	_, _, ok = b.r.Status(failed[flood-1])
	require.True(t, ok, "the newest stays")
	_, _, ok = b.r.Status(failed[0])
	require.False(t, ok, "the oldest went")
}

func TestRunner_Restart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := persistence.Open(dir)
	require.NoError(t, err)
	// A first run: one job finished its first target and was cut off.
	started := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	// a1's write lands after the worker has moved on to q1 (the store is
	// asynchronous), so wait for the hook that follows the write.
	stored := make(chan struct{}, 1)
	first, err := engine.New(store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if calls.Add(1) == 2 {
			close(started)
			<-release
		}
		return engine.Result{Content: "stored " + tg.URL}, nil
	}, engine.Config{JobsPerCaller: 3, Hooks: engine.Hooks{Target: func(error, time.Duration, int) {
		select {
		case stored <- struct{}{}:
		default:
		}
	}}}, nil)
	require.NoError(t, err)
	// One worker: a1 is stored, then q1 is held in flight, b stays queued.
	running, _, err := first.Submit(context.Background(), caller("alice"), "", targets("a", 3))
	require.NoError(t, err)
	inflight, _, err := first.Submit(context.Background(), caller("alice"), "", targets("q", 1))
	require.NoError(t, err)
	<-started
	<-stored
	queued, _, err := first.Submit(context.Background(), caller("alice"), "", targets("b", 1))
	require.NoError(t, err)
	// Simulate a crash: the rows as a killed process leaves them (the job
	// actor's writes have landed; nothing else runs). Copy them into a fresh
	// store directory by hand through the store's own API.
	rec, ts, err := store.JobWithTargets(running)
	require.NoError(t, err)
	qrec, qts, err := store.JobWithTargets(queued)
	require.NoError(t, err)
	irec, its, err := store.JobWithTargets(inflight)
	require.NoError(t, err)
	close(release)
	first.Close()
	require.NoError(t, store.Close())
	require.Equal(t, "running", rec.Status)
	require.Equal(t, "queued", qrec.Status)

	dir2 := t.TempDir()
	crashed, err := persistence.Open(dir2)
	require.NoError(t, err)
	require.NoError(t, crashed.CreateJob(&rec, ts))
	require.NoError(t, crashed.CreateJob(&qrec, qts))
	require.NoError(t, crashed.CreateJob(&irec, its))
	require.NoError(t, crashed.SaveTarget(&rec, &ts[0]))
	require.NoError(t, crashed.Close())

	reopened, err := persistence.Open(dir2)
	require.NoError(t, err)
	b := setupOn(t, reopened, okFetch, engine.Config{})
	j, got, ok := b.r.Status(running)
	require.True(t, ok)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "restart", j.Error)
	require.Equal(t, "done", got[0].Status)
	require.Equal(t, "stored http://h/a/0", got[0].Result.Content, "finished targets stay readable")
	require.Equal(t, "pending", got[1].Status)
	for _, id := range []string{queued, inflight} {
		j, ts, ok := b.r.Status(id)
		require.True(t, ok)
		require.Equal(t, "failed", j.Status)
		require.Equal(t, "restart", j.Error)
		require.Equal(t, "pending", ts[0].Status)
	}
	left, err := reopened.Unsettled()
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestRunner_Close(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		close(started)
		<-ctx.Done()
		return engine.Result{}, fmt.Errorf("interrupted: %w", ctx.Err())
	}, engine.Config{JobsPerCaller: 2})
	running := b.submit(t, "alice", targets("a", 3))
	queued := b.submit(t, "alice", targets("q", 1))
	recv(t, started)

	b.r.Close()
	b.r.Close() // idempotent

	j, ts, ok := b.r.Status(running)
	require.True(t, ok, "Status still reads the store after Close")
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "shutdown", j.Error)
	require.Equal(t, "failed", ts[0].Status, "the in-flight outcome is stored")
	require.Equal(t, "interrupted: context canceled", ts[0].Error)
	require.Equal(t, "pending", ts[1].Status)
	j, _, _ = b.r.Status(queued)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "shutdown", j.Error)
	require.False(t, b.r.Cancel(running))
	left, err := b.store.Unsettled()
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestNew(t *testing.T) {
	t.Parallel()
	store, err := persistence.Open("")
	require.NoError(t, err)
	defer store.Close()
	_, err = engine.New(nil, okFetch, engine.Config{}, nil)
	require.Error(t, err)
	_, err = engine.New(store, nil, engine.Config{}, nil)
	require.Error(t, err)
	for _, cfg := range []engine.Config{
		{TTL: -1}, {TargetsPerJob: -1}, {JobsPerCaller: -1}, {JobsTotal: -1},
		{Workers: -1}, {MaxBytes: -1}, {RetryWait: -1}, {RetryFor: -1}, {TargetsPerJob: 1 << 20},
	} {
		_, err = engine.New(store, okFetch, cfg, nil)
		require.Error(t, err, "%+v", cfg)
	}
	r, err := engine.New(store, okFetch, engine.Config{Workers: 7}, nil)
	require.NoError(t, err, "Workers above 2 means 2")
	r.Close()
}

func TestRunner_ResultTooLargeToStore(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 0 {
			return engine.Result{Content: strings.Repeat("x", persistence.MaxResultSize)}, nil // its JSON is over the cap
		}
		return engine.Result{Content: "small"}, nil
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 2))
	_, ts := b.waitStatus(t, id, "partial")
	require.Equal(t, "failed", ts[0].Status)
	require.Equal(t, "result too large to store", ts[0].Error)
	require.Equal(t, "small", ts[1].Result.Content, "the job goes on")
}

func TestRunner_TouchLiveJob(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	b := setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		started <- struct{}{}
		<-release
		return engine.Result{}, nil
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 2))
	recv(t, started)
	b.clock.Advance(time.Minute)
	before, err := b.store.Job(id)
	require.NoError(t, err)
	b.r.Touch(id)
	touched := b.clock.Now().UnixNano()
	rec, err := b.store.Job(id)
	require.NoError(t, err)
	require.Equal(t, before.Lease, rec.Lease, "a live job's actor holds the touch: no store write")
	require.True(t, b.r.Cancel(id)) // the actor writes its row again, with the touch
	close(release)
	waitFor(t, "settled", func() bool {
		rec, err = b.store.Job(id)
		return err == nil && rec.Settled
	})
	require.Equal(t, touched, rec.Lease, "no later write of the job's own loses the touch")
}

// A job that has ended done but whose last write failed (it keeps its actor
// until the write goes through) is reused as a done job is; its stored row
// still says running.
func TestRunner_IdempotencyUnsavedJob(t *testing.T) {
	t.Parallel()
	var b *bundle
	disk := errors.New("no space left on device")
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		b.store.SetWriteFault(func() error { return disk }) // its outcome write fails
		return engine.Result{Content: tg.URL}, nil
	}
	b = setup(t, fetch, engine.Config{RetryWait: time.Hour})
	id := b.submit(t, "alice", targets("a", 1))
	require.Equal(t, "done", recv(t, b.hooks.ended))
	j, _, ok := b.r.Status(id)
	require.True(t, ok)
	require.Equal(t, "done", j.Status)

	again, reused, err := b.r.Submit(context.Background(), caller("alice"), "", targets("a", 1))
	require.NoError(t, err)
	require.True(t, reused, "done, though not yet written")
	require.Equal(t, id, again)
	b.store.SetWriteFault(nil)
}

// TestRunner_MaxBytesAfterRestart checks "every stored byte of a job counts
// toward MaxBytes; failed and cancelled jobs are evicted, oldest settled
// first; live jobs never" across a restart: jobs with large specs (long
// URLs and jq programs) that were live when the runner closed are stored
// failed ("shutdown") on top of MaxBytes; after the next open, once one
// more job has run, the store is back within MaxBytes, and a read-only
// open of it counts the same bytes as its rows.
func TestRunner_MaxBytesAfterRestart(t *testing.T) {
	t.Parallel()
	const maxBytes = 8 << 10
	dir := t.TempDir()
	cfg := engine.Config{MaxBytes: maxBytes, Workers: 1, JobsPerCaller: 50, JobsTotal: 50}
	blocked := make(chan struct{}, 1)
	store, err := persistence.Open(dir)
	require.NoError(t, err)
	r, err := engine.New(store, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return engine.Result{}, context.Cause(ctx)
	}, cfg, nil)
	require.NoError(t, err)
	long := strings.Repeat("p", 1000)
	var ids []string
	for i := range 20 {
		ts := make([]engine.Target, 8)
		for j := range ts {
			ts[j] = engine.Target{URL: fmt.Sprintf("http://h/big%d/%d/%s", i, j, long), Options: engine.Options{JQ: `"` + long + `"`}}
		}
		id, _, err := r.Submit(context.Background(), caller("mallory"), "", ts)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	recv(t, blocked)
	require.Greater(t, store.Bytes(), int64(10*maxBytes), "live jobs' specs are counted, on top of MaxBytes")
	r.Close()
	j, err := store.Job(ids[0])
	require.NoError(t, err)
	require.Equal(t, engine.StatusFailed, j.Status, "a job live at Close is failed")
	require.NoError(t, store.Close())

	b := setupOn(t, reopen(t, dir), okFetch, cfg)
	n, err := b.store.CountBytes()
	require.NoError(t, err)
	require.Equal(t, n, b.store.Bytes(), "the byte total after a restart is the count of the rows")
	id := b.submit(t, "alice", targets("small", 1))
	b.waitStatus(t, id, "done")
	waitFor(t, "the store back within MaxBytes", func() bool {
		n, err := b.store.CountBytes()
		return err == nil && n <= maxBytes
	})
	_, _, ok := b.r.Status(id)
	require.True(t, ok, "the newest job stays")
	_, _, ok = b.r.Status(ids[0])
	require.False(t, ok, "the oldest failed job went")
}

// reopen opens the store in dir again, after checking that a read-only
// open of it counts the bytes its rows hold.
func reopen(t *testing.T, dir string) *persistence.Store {
	t.Helper()
	ro, err := persistence.OpenReadOnly(dir)
	require.NoError(t, err)
	n, err := ro.CountBytes()
	require.NoError(t, err)
	require.Equal(t, n, ro.Bytes(), "a read-only open counts the bytes of the rows")
	require.NoError(t, ro.Close())
	store, err := persistence.Open(dir)
	require.NoError(t, err)
	return store
}
