package actors

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// maintainerUnderTest spawns a maintainer on ts's store, as Start does,
// and makes it the one ts's config tells.
func maintainerUnderTest(t *testing.T, ts *testSystem) *actor.PID {
	t.Helper()
	pid := ts.sys.Root.Spawn(props(newMaintainer(ts.cfg), nil, actor.WithGuardian(&maintenanceStrategy{cfg: ts.cfg})))
	ts.cfg.maintenance = pid
	t.Cleanup(func() { ts.stop(t, pid) })
	return pid
}

// settledJob stores a job that ended done at lease, with a result of size
// bytes.
func (ts *testSystem) settledJob(t *testing.T, c byte, lease int64, size int) string {
	t.Helper()
	rec := ts.newJobRecord(t, id(c), "alice", 1)
	rec.Status, rec.Settled, rec.Lease, rec.Created = persistence.StatusDone, true, lease, lease
	res := append([]byte(`"`), append(bytes.Repeat([]byte("x"), size), '"')...)
	rec.CountOutcome(persistence.TargetDone, int64(len(res)), lease)
	require.NoError(t, ts.store.SaveTarget(&rec, &persistence.TargetRecord{Idx: 0, Status: persistence.TargetDone, Result: res, Stored: lease}))
	return rec.ID
}

func (ts *testSystem) stored(id string) bool {
	_, err := ts.store.Job(id)
	return err == nil
}

func TestMaintainer_SweepsWhenTold(t *testing.T) {
	ts := newTestSystem(t)
	maintainerUnderTest(t, ts)
	now := ts.clock.Now().UnixNano()
	expired := ts.settledJob(t, 'a', now-int64(ts.cfg.TTL), 10)
	kept := ts.settledJob(t, 'b', now-int64(ts.cfg.TTL)+1, 10)

	ts.cfg.maintain(ts.sys.Root, dueSweep)
	testkit.WaitFor(t, "the sweep", func() bool { return !ts.stored(expired) })
	require.True(t, ts.stored(kept), "lease + TTL > now: kept")

	ts.clock.Advance(time.Nanosecond) // the injected clock decides what has expired
	ts.cfg.maintain(ts.sys.Root, dueSweep)
	testkit.WaitFor(t, "the second sweep", func() bool { return !ts.stored(kept) })
}

// A sweep that finds more than one batch due asks itself for more, until
// every expired job is gone.
func TestMaintainer_SweepsInBatches(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.MaxBytes = 1 << 30
	maintainerUnderTest(t, ts)
	old := ts.clock.Now().UnixNano() - int64(2*ts.cfg.TTL)
	var ids []string
	for i := range sweepBatch + 3 {
		rec := ts.newJobRecord(t, fmt.Sprintf("%032x", i+1), "alice", 0)
		rec.Status, rec.Settled, rec.Lease = persistence.StatusDone, true, old+int64(i)
		require.NoError(t, ts.store.SaveJob(&rec))
		ids = append(ids, rec.ID)
	}
	ts.cfg.maintain(ts.sys.Root, dueSweep)
	testkit.WaitFor(t, "every expired job swept", func() bool { return !ts.stored(ids[len(ids)-1]) })
	for _, id := range ids {
		require.False(t, ts.stored(id))
	}
}

func TestMaintainer_EvictsWhenTold(t *testing.T) {
	ts := newTestSystem(t)
	maintainerUnderTest(t, ts)
	now := ts.clock.Now().UnixNano()
	oldest := ts.settledJob(t, 'a', now-3, 2000)
	middle := ts.settledJob(t, 'b', now-2, 2000)
	newest := ts.settledJob(t, 'c', now-1, 2000)
	ts.cfg.MaxBytes = ts.store.Bytes() - 100

	ts.cfg.evictSoon(ts.sys.Root)
	testkit.WaitFor(t, "the eviction", func() bool { return ts.store.Bytes() <= ts.cfg.MaxBytes })
	require.False(t, ts.stored(oldest), "the oldest settled job goes first")
	require.True(t, ts.stored(middle))
	require.True(t, ts.stored(newest))
}

// Once the runner stops, the maintainer evicts nothing: the jobs failed
// "shutdown" at the drain stay readable (the next runner evicts). The pass
// still sweeps, which tells the test it ran.
func TestMaintainer_EvictsNothingOnceStopping(t *testing.T) {
	ts := newTestSystem(t)
	maintainerUnderTest(t, ts)
	now := ts.clock.Now().UnixNano()
	expired := ts.settledJob(t, 'e', now-int64(ts.cfg.TTL)-1, 10)
	oldest := ts.settledJob(t, 'a', now-3, 2000)
	newest := ts.settledJob(t, 'c', now-1, 2000)
	ts.cfg.MaxBytes = ts.store.Bytes() - 100
	ts.cfg.stopping.Store(true)

	ts.cfg.maintain(ts.sys.Root, dueSweep|dueEvict)
	testkit.WaitFor(t, "the pass's sweep", func() bool { return !ts.stored(expired) })
	require.True(t, ts.stored(oldest), "no eviction once stopping")
	require.True(t, ts.stored(newest))
}

// The maintainer sweeps on its own timer, with no Submit to tell it; what
// has expired is decided by Config.Now.
func TestMaintainer_SweepsOnItsTimer(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.maintainEvery = time.Millisecond
	maintainerUnderTest(t, ts)
	job := ts.settledJob(t, 'a', ts.clock.Now().UnixNano(), 10)
	require.True(t, ts.stored(job))
	ts.clock.Advance(ts.cfg.TTL)
	testkit.WaitFor(t, "a periodic sweep", func() bool { return !ts.stored(job) })
}

// A pass that panics (here a store fault that panics in the sweep's write)
// is contained: logged without the panic value, the maintainer resumed,
// and the next pass does the work.
func TestMaintainer_PanicContained(t *testing.T) {
	ts := newTestSystem(t)
	var logs testkit.SyncBuffer
	ts.cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	maintainerUnderTest(t, ts)
	expired := ts.settledJob(t, 'a', ts.clock.Now().UnixNano()-int64(ts.cfg.TTL), 10)
	ts.store.SetWriteFault(func() error { panic("the panic value s3cr3t") })
	ts.cfg.maintain(ts.sys.Root, dueSweep)
	testkit.WaitFor(t, "the failure contained", func() bool { return ts.cfg.maintFailures.Load() == 1 })
	require.True(t, ts.stored(expired), "the failed pass deleted nothing")
	require.Contains(t, logs.String(), "maintenance pass failed")
	require.NotContains(t, logs.String(), "s3cr3t")

	ts.store.SetWriteFault(nil)
	ts.cfg.maintain(ts.sys.Root, dueSweep)
	testkit.WaitFor(t, "the next pass", func() bool { return !ts.stored(expired) })
	require.Equal(t, uint64(1), ts.cfg.maintFailures.Load())
}

// Asking for a pass while one is already asked for sends no second
// message: the pass takes everything asked for when it begins.
func TestMaintainer_TellsCoalesce(t *testing.T) {
	ts := newTestSystem(t)
	p, pid := ts.spawnProbe(t)
	ts.cfg.maintenance = pid
	ts.cfg.maintain(ts.sys.Root, dueSweep)
	ts.cfg.maintain(ts.sys.Root, dueEvict)
	ts.cfg.maintain(ts.sys.Root, dueSweep)
	next[*maintain](t, p)
	require.Equal(t, dueSweep|dueEvict, ts.cfg.maintDue.Load())
	quiet(t, p)
}

// In a running runner, a maintenance pass that panics leaves the runner
// up: it is not failed, and a job submitted after it runs to its end.
func TestMaintainer_PanicLeavesRunnerUp(t *testing.T) {
	ts := newTestSystem(t)
	var logs testkit.SyncBuffer
	ts.cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	ts.cfg.Fetch = func(context.Context, any, int) Outcome { return Outcome{Result: []byte(`{}`)} }
	sys, err := Start(ts.cfg)
	require.NoError(t, err)
	defer func() {
		_, _, err := sys.Stop(nil, nil)
		require.NoError(t, err)
	}()
	expired := ts.settledJob(t, 'a', ts.clock.Now().UnixNano()-int64(ts.cfg.TTL), 10)
	var panicking atomic.Bool
	panicking.Store(true)
	ts.store.SetWriteFault(func() error {
		if panicking.Load() {
			panic("the panic value s3cr3t")
		}
		return nil
	})
	ts.cfg.maintain(sys.sys.Root, dueSweep)
	testkit.WaitFor(t, "the failed pass contained", func() bool { return ts.cfg.maintFailures.Load() == 1 })
	panicking.Store(false)
	require.False(t, sys.Failed())

	m := ts.submitMsg(id('b'), "bob", 1)
	reply, err := sys.Submit(m)
	require.NoError(t, err)
	require.Equal(t, m.Job.ID, reply.ID)
	testkit.WaitFor(t, "the job done and settled", func() bool {
		stored, err := ts.store.Job(m.Job.ID)
		return err == nil && stored.Status == persistence.StatusDone && stored.Settled
	})
	testkit.WaitFor(t, "the sweep its Submit asked for", func() bool { return !ts.stored(expired) })
	require.False(t, sys.Failed())
	require.NotContains(t, logs.String(), "s3cr3t")
}
