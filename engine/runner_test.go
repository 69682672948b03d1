package engine_test

import (
	"context"
	"errors"
	"fmt"
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

func TestRunner_Serial(t *testing.T) {
	t.Parallel()
	var b *enginetest.Bundle
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
			tr, err := b.Store.Target(id, i)
			if err != nil || tr.Status != persistence.TargetDone {
				fail.Store(fmt.Sprintf("target %d started before %d was stored (%v, %s)", idx, i, err, tr.Status))
			}
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b = enginetest.Setup(t, fetch, engine.Config{Workers: 2})
	id := b.Submit(t, "alice", enginetest.Targets("a", 8))
	ids <- id
	b.WaitStatus(t, id, "done")
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
		b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
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
		a := b.Submit(t, "alice", enginetest.Targets("a", 3))
		testkit.Recv(t, held)
		bid := b.Submit(t, "bob", enginetest.Targets("b", 3))
		j, _, ok := b.Runner.Status(bid)
		require.True(t, ok)
		require.Equal(t, "queued", j.Status, "a job no worker has reached stays queued")
		close(release)
		b.WaitStatus(t, a, "done")
		b.WaitStatus(t, bid, "done")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"a1", "b1", "a2", "b2", "a3", "b3"}, order)
	})

	t.Run("TwoWorkersAtMostTwoAtOnce", func(t *testing.T) {
		t.Parallel()
		var now, peak atomic.Int32
		perJob := sync.Map{}
		var jobPeak atomic.Int32
		b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
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
			ids = append(ids, b.Submit(t, "alice", enginetest.Targets(n, 6)))
		}
		for _, id := range ids {
			b.WaitStatus(t, id, "done")
		}
		require.LessOrEqual(t, peak.Load(), int32(2))
		require.Equal(t, int32(1), jobPeak.Load(), "each job stays serial")
		require.Equal(t, 2, b.Hooks.MaxInflight())
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
	b := enginetest.Setup(t, fetch, engine.Config{JobsPerCaller: 4, Workers: 2})
	done := b.Submit(t, "alice", enginetest.Targets("ok", 2))
	partial := b.Submit(t, "alice", enginetest.Targets("mixed", 3))
	failed := b.Submit(t, "alice", enginetest.Targets("failing", 2))
	plain := b.Submit(t, "alice", enginetest.Targets("plain", 1))

	j, ts := b.WaitStatus(t, done, "done")
	require.Equal(t, 2, j.TargetsDone)
	require.Equal(t, &engine.Result{Content: "http://h/ok/1", Meta: map[string]any{"idx": float64(1)}}, ts[1].Result)

	j, ts = b.WaitStatus(t, partial, "partial")
	require.Equal(t, 3, j.TargetsDone)
	require.Equal(t, "failed", ts[1].Status)
	require.Equal(t, "not found", ts[1].Error)
	require.Equal(t, "check the URL", ts[1].Hint)
	require.Nil(t, ts[1].Result)
	require.Equal(t, "done", ts[2].Status)

	b.WaitStatus(t, failed, "failed")
	_, ts = b.WaitStatus(t, plain, "failed")
	require.Equal(t, "boom", ts[0].Error)
	require.Empty(t, ts[0].Hint)

	for range 4 {
		testkit.Recv(t, b.Hooks.Ended())
	}
	// Hooks.JobSeconds follows Hooks.Job; Close returns once every job
	// actor has stopped, so after all their hooks.
	b.Runner.Close()
	require.Equal(t, map[string]int{"created": 4, "done": 1, "partial": 1, "failed": 2}, b.Hooks.Jobs())
	require.Equal(t, 4, b.Hooks.JobSeconds(), "JobSeconds once per job")
	require.Equal(t, 8, b.Hooks.Targets())
	require.Equal(t, 4, b.Hooks.TargetErrors())
}

func TestRunner_Retry(t *testing.T) {
	t.Parallel()

	t.Run("BusyTwiceThenDone", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			if calls.Add(1) <= 2 {
				return engine.Result{}, fmt.Errorf("upstream 429: %w", engine.ErrRetryLater)
			}
			return engine.Result{Content: "ok"}, nil
		}, engine.Config{RetryWait: time.Millisecond})
		id := b.Submit(t, "alice", enginetest.Targets("a", 1))
		_, ts := b.WaitStatus(t, id, "done")
		require.Equal(t, "ok", ts[0].Result.Content)
		require.Equal(t, int32(3), calls.Load())
		// Status reads done once the row is written; the hooks follow it.
		require.Equal(t, "done", testkit.Recv(t, b.Hooks.Ended()))
		require.Equal(t, 1, b.Hooks.Targets(), "Hooks.Target once per stored target, not per busy answer")
	})

	t.Run("BusyPastRetryForFails", func(t *testing.T) {
		t.Parallel()
		var b *enginetest.Bundle
		var calls atomic.Int32
		b = enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			calls.Add(1)
			b.Clock.Advance(4 * time.Minute)
			return engine.Result{}, fmt.Errorf("upstream 503: %w", engine.ErrRetryLater)
		}, engine.Config{RetryWait: time.Millisecond, RetryFor: 10 * time.Minute})
		id := b.Submit(t, "alice", enginetest.Targets("a", 1))
		_, ts := b.WaitStatus(t, id, "failed")
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
		b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
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
		a := b.Submit(t, "alice", enginetest.Targets("a", 1))
		bid := b.Submit(t, "alice", enginetest.Targets("b", 3))
		testkit.Recv(t, othersDone)
		b.WaitStatus(t, bid, "done")
		j, _, _ := b.Runner.Status(a)
		require.Equal(t, "running", j.Status, "a waits out RetryWait")
		mu.Lock()
		require.Equal(t, []string{"a1", "b1", "b2", "b3"}, order, "b runs while a waits")
		mu.Unlock()
	})
}

// A durable runner syncs a job's creation before Submit returns and each
// target's outcome before the job's next target starts: each fetch sees
// one more sync than the one before. The default runner never syncs.
func TestRunner_DurableSyncsBeforeTheNextTarget(t *testing.T) {
	t.Parallel()
	for _, d := range []engine.Durability{engine.DurabilityProcess, engine.DurabilitySync} {
		t.Run(d.String(), func(t *testing.T) {
			store := enginetest.OpenStore(t, t.TempDir())
			var seen []int64 // Syncs() as each fetch starts; one worker: in order
			var mu sync.Mutex
			fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
				mu.Lock()
				seen = append(seen, store.Syncs())
				mu.Unlock()
				return enginetest.OKFetch(ctx, c, tg)
			}
			b := enginetest.SetupOn(t, store, fetch, engine.Config{Durability: d})
			require.Equal(t, d == engine.DurabilitySync, store.Durable())
			id := b.Submit(t, "alice", enginetest.Targets("alice", 4))
			b.WaitSettled(t, id)
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, seen, 4)
			if d == engine.DurabilityProcess {
				require.Equal(t, []int64{0, 0, 0, 0}, seen)
				require.Zero(t, store.Syncs())
				return
			}
			for i := 1; i < len(seen); i++ {
				require.Greater(t, seen[i], seen[i-1], "target %d fetched before target %d's outcome was synced", i, i-1)
			}
			require.GreaterOrEqual(t, seen[0], int64(1), "the job's creation synced before its first fetch")
			require.GreaterOrEqual(t, store.Syncs(), seen[3]+1, "the last outcome synced")
		})
	}
}

// Durability sync needs a store on disk; a Durability that is neither mode
// is refused too.
func TestRunner_DurableInMemoryIsAConfigError(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	_, err := engine.New(store, enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync}, nil)
	require.ErrorContains(t, err, "Durability")
	require.False(t, store.Durable())
	_, err = engine.New(store, enginetest.OKFetch, engine.Config{Durability: 7}, nil)
	require.ErrorContains(t, err, "Durability")
	_, err = engine.Open("", enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync}, nil)
	require.ErrorContains(t, err, "Durability")
}

// A durable runner whose sync of a target's outcome fails goes on: the
// store's writer writes the outcome again and syncs it, the job ends done
// with every target, and the byte total counts each outcome once.
func TestRunner_DurableTargetSyncFailureRewritten(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	store.SetRetryWait(time.Millisecond)
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync, RetryWait: time.Millisecond})
	var calls atomic.Int64
	store.SetSyncFault(func() error {
		if calls.Add(1) == 3 { // a sync after the job's creation: one of its targets' groups
			return errors.New("input/output error")
		}
		return nil
	})
	id := b.Submit(t, "alice", enginetest.Targets("alice", 4))
	job, ts := b.WaitStatus(t, id, "done")
	require.Equal(t, 4, job.TargetsDone)
	for _, tg := range ts {
		require.Equal(t, "done", tg.Status)
	}
	require.GreaterOrEqual(t, calls.Load(), int64(3), "the failing sync was reached")
	require.Eventually(t, func() bool {
		n, err := store.CountBytes()
		return err == nil && n == store.Bytes()
	}, 10*time.Second, time.Millisecond, "the byte total is the count of the rows")
}

// failingSyncs is a disk whose syncs fail for a while: once armed, the
// store's next n syncs fail; ok counts the syncs that succeeded after the
// first failure.
type failingSyncs struct {
	left   atomic.Int64
	failed atomic.Int64
	ok     atomic.Int64
}

// arm makes the next n syncs of store fail.
func (f *failingSyncs) arm(store *persistence.Store, n int64) {
	f.left.Store(n)
	store.SetSyncFault(func() error {
		if f.left.Add(-1) >= 0 {
			f.failed.Add(1)
			return errors.New("input/output error")
		}
		if f.failed.Load() > 0 {
			f.ok.Add(1)
		}
		return nil
	})
}

// A durable runner starts a job's next target only once the outcome of
// the one before is on stable storage, also when the disk fails to sync it
// for a while: target 0's outcome is written while syncs fail (20 in a row,
// the store's writer retrying every millisecond), and target 1's fetch
// must not start before a sync has succeeded since.
func TestRunner_DurableNextTargetWaitsForAFailedSync(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	store.SetRetryWait(time.Millisecond)
	var disk failingSyncs
	gate := make(chan struct{})
	var okAtFetch1 atomic.Int64
	okAtFetch1.Store(-1)
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch _, idx := jobOf(tg.URL); idx {
		case 0:
			<-gate
		case 1:
			okAtFetch1.CompareAndSwap(-1, disk.ok.Load())
		}
		return enginetest.OKFetch(ctx, c, tg)
	}
	b := enginetest.SetupOn(t, store, fetch, engine.Config{Durability: engine.DurabilitySync, RetryWait: time.Millisecond})
	id := b.Submit(t, "alice", enginetest.Targets("a", 3))
	disk.arm(store, 20)
	close(gate)
	b.WaitStatus(t, id, "done")
	require.Positive(t, disk.failed.Load(), "a sync failed")
	require.Positive(t, okAtFetch1.Load(), "target 1 fetched before target 0's outcome was synced (syncs failed: %d)", disk.failed.Load())
}
