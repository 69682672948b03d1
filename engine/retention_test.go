package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestRunner_Eviction(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	content := strings.Repeat("x", 1000)
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if name, _ := jobOf(tg.URL); name == "live" {
			<-gate
		}
		return engine.Result{Content: content}, nil
	}, engine.Config{MaxBytes: 3800, JobsPerCaller: 8, Workers: 2})
	defer close(gate)
	// A live job that holds a worker; its targets are never evicted.
	live := b.Submit(t, "alice", enginetest.Targets("live", 2))
	var ids []string
	for i := range 5 {
		id := b.Submit(t, "bob", enginetest.Targets(fmt.Sprintf("old%d", i), 1))
		b.WaitStatus(t, id, "done")
		ids = append(ids, id)
		b.Clock.Advance(time.Second)
	}
	// old4 reads done once its row is written; its actor evicts after that.
	testkit.WaitFor(t, "old4's eviction", func() bool { return b.Store.Bytes() <= 3800 })
	// ~1135 bytes each (a 1016-byte result, its outcome row, the job's row
	// and specs), and the live job's ~110: at most 3 fit in 3800 bytes; the
	// oldest went first.
	for _, id := range ids[:2] {
		_, _, ok := b.Runner.Status(id)
		require.False(t, ok, "oldest evicted")
	}
	for _, id := range ids[2:] {
		_, _, ok := b.Runner.Status(id)
		require.True(t, ok, "newest kept")
	}
	require.LessOrEqual(t, b.Store.Bytes(), int64(3800))
	_, _, ok := b.Runner.Status(live)
	require.True(t, ok, "live jobs are never evicted")
}

// TestRunner_FailedAndCancelledJobsAreEvicted: jobs that store no result
// (every target failed, or cancelled before one ran) count toward MaxBytes
// too, every row of them: a flood of cancelled jobs, then one of failing
// jobs, stays within
// MaxBytes once each has settled (the bound: at most MaxBytes once the
// jobs have settled and their evictions have run; while jobs are live,
// their rows come on top, never evicted), oldest first, and the live job
// that is the oldest of all stays.
func TestRunner_FailedAndCancelledJobsAreEvicted(t *testing.T) {
	t.Parallel()
	const maxBytes = 8 << 10
	gate := make(chan struct{})
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
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
		n, err := b.Store.CountBytes()
		require.NoError(t, err)
		return n
	}
	within := func(what string) {
		t.Helper()
		testkit.WaitFor(t, what, func() bool { return counted() <= maxBytes })
	}
	// The oldest job, live: it holds the only worker, so the others wait.
	blocker := b.Submit(t, "mallory", enginetest.Targets("blocker", 1))
	b.Clock.Advance(time.Millisecond)

	const flood = 150
	var cancelled []string
	for i := range flood {
		id := b.Submit(t, "mallory", enginetest.Targets(fmt.Sprintf("cancel%d", i), 3))
		require.True(t, b.Runner.Cancel(id))
		cancelled = append(cancelled, id)
		b.Clock.Advance(time.Millisecond)
		within(fmt.Sprintf("cancelled job %d's eviction", i))
	}
	require.Equal(t, counted(), b.Store.Bytes())
	_, _, ok := b.Runner.Status(blocker)
	require.True(t, ok, "the live job is never evicted")
	kept := 0
	for i, id := range cancelled {
		if _, _, ok := b.Runner.Status(id); ok {
			kept++
		} else {
			require.Zero(t, kept, "job %d is gone after a newer one was kept: the oldest go first", i)
		}
	}
	require.Positive(t, kept)
	require.Less(t, kept, flood/2, "most of the cancelled jobs were evicted")

	close(gate)
	b.WaitStatus(t, blocker, "done")
	var failed []string
	for i := range flood {
		failed = append(failed, b.Submit(t, "mallory", enginetest.Targets(fmt.Sprintf("fail%d", i), 2)))
		b.Clock.Advance(time.Millisecond)
	}
	testkit.WaitFor(t, "every failing job to end", func() bool {
		return b.Hooks.Job("failed") == flood
	})
	within("the failed jobs' eviction")
	require.Equal(t, counted(), b.Store.Bytes())
	stored := 0
	require.NoError(t, b.Store.Jobs(func(persistence.JobRecord) bool { stored++; return true }))
	require.Less(t, stored, flood/2, "most of the failed jobs were evicted")
	_, _, ok = b.Runner.Status(failed[flood-1])
	require.True(t, ok, "the newest stays")
	_, _, ok = b.Runner.Status(failed[0])
	require.False(t, ok, "the oldest went")
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
		id, _, err := r.Submit(context.Background(), enginetest.Caller("mallory"), "", ts)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	testkit.Recv(t, blocked)
	require.Greater(t, store.Bytes(), int64(10*maxBytes), "live jobs' specs are counted, on top of MaxBytes")
	r.Close()
	// Every job live at Close is stored failed ("shutdown"), on top of
	// MaxBytes, but for those an eviction deleted meanwhile: Close cuts
	// short the one fetch in flight, its job settles and evicts, and the
	// jobs Close has settled by then are settled jobs past MaxBytes, which
	// go, oldest first (some or all of them, in about a fifth of runs).
	for i, id := range ids {
		j, err := store.Job(id)
		if errors.Is(err, persistence.ErrNotFound) {
			continue
		}
		require.NoError(t, err, "job %d", i)
		require.Equal(t, engine.StatusFailed, j.Status, "job %d: a job live at Close is failed", i)
		require.Equal(t, "shutdown", j.Error, "job %d", i)
		require.True(t, j.Settled, "job %d", i)
	}
	require.NoError(t, store.Close())

	b := enginetest.SetupOn(t, reopen(t, dir), enginetest.OKFetch, cfg)
	n, err := b.Store.CountBytes()
	require.NoError(t, err)
	require.Equal(t, n, b.Store.Bytes(), "the byte total after a restart is the count of the rows")
	id := b.Submit(t, "alice", enginetest.Targets("small", 1))
	b.WaitStatus(t, id, "done")
	testkit.WaitFor(t, "the store back within MaxBytes", func() bool {
		n, err := b.Store.CountBytes()
		return err == nil && n <= maxBytes
	})
	_, _, ok := b.Runner.Status(id)
	require.True(t, ok, "the newest job stays")
	_, _, ok = b.Runner.Status(ids[0])
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
