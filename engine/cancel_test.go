package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestRunner_Cancel(t *testing.T) {
	t.Parallel()
	started := make(chan int, 10)
	release := make(chan struct{})
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		_, idx := jobOf(tg.URL)
		started <- idx
		<-release
		return engine.Result{Content: "late"}, nil
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 4))
	require.Equal(t, 0, testkit.Recv(t, started))

	require.True(t, b.Runner.Cancel(id))
	rec, err := b.Store.Job(id)
	require.NoError(t, err)
	require.Equal(t, "cancelled", rec.Status, "cancelled is stored before Cancel returns")
	require.False(t, b.Runner.Cancel(id), "a cancelled job cannot be cancelled again")

	j, ts, ok := b.Runner.Status(id)
	require.True(t, ok)
	require.Equal(t, "cancelled", j.Status)
	require.Equal(t, "running", ts[0].Status, "the target in flight reads running")

	close(release)
	testkit.WaitFor(t, "in-flight target stored", func() bool {
		_, ts, _ := b.Runner.Status(id)
		return ts[0].Status == "done"
	})
	j, ts, _ = b.Runner.Status(id)
	require.Equal(t, "cancelled", j.Status, "storing the in-flight target keeps cancelled")
	require.Equal(t, 1, j.TargetsDone)
	require.Equal(t, "late", ts[0].Result.Content)
	for _, tr := range ts[1:] {
		require.Equal(t, "pending", tr.Status)
		require.Equal(t, engine.TargetHint("cancelled", "", "pending", "", ""), tr.Hint, "a target a cancel left says it will not run")
		require.Contains(t, tr.Hint, "not run: the job was cancelled")
	}
	require.Equal(t, "", ts[0].Hint, "a target that ran has no not-run hint")
	require.Equal(t, j.TargetsTotal, j.TargetsDone+engine.NotRun(j.Status, j.TargetsTotal, j.TargetsDone))
	_, tts, _ := b.Runner.Targets(id)
	require.Equal(t, ts[len(ts)-1].Hint, tts[len(tts)-1].Hint, "Targets reads the hint Status reads")
	select {
	case idx := <-started:
		t.Fatalf("target %d started after cancel", idx)
	default:
	}

	require.False(t, b.Runner.Cancel("unknown"))
	require.False(t, b.Runner.Cancel(strings.Repeat("0", 32)))
	require.Equal(t, 1, b.Hooks.Job("cancelled"))

	// A finished job cannot be cancelled.
	release2 := make(chan struct{})
	close(release2)
	done := b.Submit(t, "bob", enginetest.Targets("b", 1))
	testkit.Recv(t, started)
	b.WaitStatus(t, done, "done")
	require.False(t, b.Runner.Cancel(done))
	require.Equal(t, 1, b.Hooks.Job("cancelled"))
}

// TestRunner_CancelStopsFetch: Cancel cancels the context of the job's
// fetch in flight, with cause ErrCancelled, and only that one: another
// job's fetch goes on; what the stopped fetch returns is stored.
func TestRunner_CancelStopsFetch(t *testing.T) {
	t.Parallel()
	started := make(chan string, 10)
	release := make(chan struct{})
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		started <- tg.URL
		select {
		case <-ctx.Done():
			return engine.Result{}, &engine.TargetError{Status: 409, Msg: "stopped: " + context.Cause(ctx).Error(), Hint: "h"}
		case <-release:
			return engine.Result{Content: "ok"}, nil
		}
	}, engine.Config{Workers: 2})
	a := b.Submit(t, "alice", enginetest.Targets("a", 2))
	o := b.Submit(t, "bob", enginetest.Targets("b", 1))
	got := []string{testkit.Recv(t, started), testkit.Recv(t, started)}
	slices.Sort(got)
	require.Equal(t, []string{"http://h/a/0", "http://h/b/0"}, got)
	require.True(t, b.Runner.Cancel(a))
	testkit.WaitFor(t, "the cancelled job's target stored", func() bool {
		_, ts, _ := b.Runner.Status(a)
		return ts[0].Status == "failed"
	})
	j, ts, _ := b.Runner.Status(a)
	require.Equal(t, "cancelled", j.Status)
	require.Equal(t, "stopped: "+engine.ErrCancelled.Error(), ts[0].Error)
	require.Equal(t, "pending", ts[1].Status)
	_, ts, _ = b.Runner.Status(o)
	require.Equal(t, "running", ts[0].Status, "another job's fetch goes on")
	close(release)
	b.WaitStatus(t, o, "done")
}

func TestRunner_CancelQueued(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var fetched sync.Map
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		fetched.Store(tg.URL, true)
		<-gate
		return engine.Result{}, nil
	}, engine.Config{})
	a := b.Submit(t, "alice", enginetest.Targets("a", 1))
	q := b.Submit(t, "bob", enginetest.Targets("q", 2))
	require.True(t, b.Runner.Cancel(q))
	close(gate)
	b.WaitStatus(t, a, "done")
	j, ts, ok := b.Runner.Status(q)
	require.True(t, ok)
	require.Equal(t, "cancelled", j.Status)
	require.Equal(t, "pending", ts[0].Status)
	_, was := fetched.Load("http://h/q/0")
	require.False(t, was, "a cancelled queued job fetches nothing")
}

// A durable runner acknowledges a Cancel (true) only once the cancelled
// status is on stable storage, also when the disk fails to sync it for a
// while: here the syncs fail (20 in a row, retried every millisecond) from
// just before the Cancel; a Cancel refused meanwhile changes nothing, and
// when one returns true, a sync must have succeeded since.
func TestRunner_DurableCancelAcknowledgedOnlyOnceSynced(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	store.SetRetryWait(time.Millisecond)
	started := make(chan int, 4)
	b := enginetest.SetupOn(t, store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		_, idx := jobOf(tg.URL)
		started <- idx
		<-ctx.Done()
		return engine.Result{}, context.Cause(ctx)
	}, engine.Config{Durability: engine.DurabilitySync, RetryWait: time.Millisecond})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	require.Equal(t, 0, testkit.Recv(t, started))
	var disk failingSyncs
	disk.arm(store, 20)
	// A cancel whose sync fails is refused (the job goes on as it was);
	// the caller cancels again until one is acknowledged.
	var okAtAck int64
	testkit.WaitFor(t, "a cancel acknowledged once the syncs succeed again", func() bool {
		acked := b.Runner.Cancel(id)
		okAtAck = disk.ok.Load()
		return acked
	})
	b.WaitSettled(t, id)
	require.Positive(t, disk.failed.Load(), "a sync failed")
	require.Positive(t, okAtAck, "Cancel returned true before the cancelled status was synced")
}

// A durable runner's Cancel returns true only once a completed sync has
// seen the job cancelled (read right after each sync, in the store's sync
// fault hook, under its write lock): a queued job behind another's fetch,
// and the job whose target is being fetched.
func TestRunner_DurableCancelSyncedBeforeItReturns(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	var mu sync.Mutex
	status := map[string]string{} // job → its status as a completed sync saw it
	store.SetSyncFault(func() error {
		return store.Jobs(func(j persistence.JobRecord) bool {
			mu.Lock()
			status[j.ID] = j.Status
			mu.Unlock()
			return true
		})
	})
	started := make(chan string, 4)
	b := enginetest.SetupOn(t, store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		name, _ := jobOf(tg.URL)
		started <- name
		<-ctx.Done()
		return engine.Result{}, context.Cause(ctx)
	}, engine.Config{Durability: engine.DurabilitySync, Workers: 1, JobsTotal: 4})
	fetching := b.Submit(t, "alice", enginetest.Targets("a", 2))
	require.Equal(t, "a", testkit.Recv(t, started))
	queued := b.Submit(t, "bob", enginetest.Targets("b", 2))
	for _, id := range []string{queued, fetching} {
		require.True(t, b.Runner.Cancel(id))
		mu.Lock()
		seen := status[id]
		mu.Unlock()
		require.Equal(t, persistence.StatusCancelled, seen, "Cancel of %s returned before a sync saw it cancelled", id)
		b.WaitSettled(t, id)
	}
}
