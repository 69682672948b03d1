package actors

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// jobUnderTest spawns a job actor whose supervisor and worker are probes.
func jobUnderTest(t *testing.T, ts *testSystem, n int) (job *actor.PID, rec persistence.JobRecord, sup, worker *probe, workerPID *actor.PID) {
	t.Helper()
	sup, supPID := ts.spawnProbe(t)
	worker, workerPID = ts.spawnProbe(t)
	rec = ts.newJobRecord(t, "0123456789abcdef0123456789abcdef", "alice", n)
	ts.cfg.Views.add(&rec)
	ts.cfg.supervisor = supPID
	job = ts.sys.Root.Spawn(props(newJob(ts.cfg, rec, "payload", nil), nil))
	t.Cleanup(func() { ts.stop(t, job) })
	return job, rec, sup, worker, workerPID
}

// storedDone takes the two jobDones of a target that is stored: the worker
// freed while the target is being stored, then how the job stands.
func storedDone(t *testing.T, sup *probe, workerPID *actor.PID) *jobDone {
	t.Helper()
	free := next[*jobDone](t, sup)
	require.Equal(t, life{persistence.StatusRunning, phaseStoring}, free.life, "the worker is freed before the store answers")
	require.Equal(t, workerPID, free.worker)
	done := next[*jobDone](t, sup)
	require.Nil(t, done.worker, "the worker is freed once")
	return done
}

func TestJob_TargetsInOrder(t *testing.T) {
	ts := newTestSystem(t)
	hooked := make(chan string, 4)
	ts.cfg.Hooks.Job = func(o string) { hooked <- o }
	job, rec, sup, worker, workerPID := jobUnderTest(t, ts, 2)

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	f := next[*fetch](t, worker)
	require.Equal(t, 0, f.idx)
	require.Equal(t, "payload", f.payload)

	snap := ts.cfg.Views.Get(rec.ID).Load()
	require.Equal(t, 0, snap.Running, "published before the fetch starts")
	require.Equal(t, persistence.StatusRunning, snap.Job.Status)
	testkit.WaitFor(t, "running stored on the first target", func() bool {
		stored, err := ts.store.Job(rec.ID)
		return err == nil && stored.Status == persistence.StatusRunning
	})

	ts.clock.Advance(time.Second)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{"content":"a"}`)}})
	require.Equal(t, life{persistence.StatusRunning, phaseIdle}, storedDone(t, sup, workerPID).life)
	tr, err := ts.store.Target(rec.ID, 0)
	require.NoError(t, err)
	require.Equal(t, persistence.TargetDone, tr.Status)
	stored, _ := ts.store.Job(rec.ID)
	require.Equal(t, ts.clock.Now().UnixNano(), stored.Lease, "storing a target bumps the lease")

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	require.Equal(t, 1, next[*fetch](t, worker).idx)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 1, outcome: Outcome{Err: errors.New("x"), Msg: "x", Hint: "h"}})
	require.Equal(t, phaseSettled, storedDone(t, sup, workerPID).life.phase)
	stored, _ = ts.store.Job(rec.ID)
	require.Equal(t, persistence.StatusPartial, stored.Status)
	require.True(t, stored.Settled)
	require.Equal(t, "partial", <-hooked)
	quiet(t, worker)
}

func TestJob_Busy(t *testing.T) {
	ts := newTestSystem(t)
	job, rec, sup, worker, workerPID := jobUnderTest(t, ts, 1)
	busy := Outcome{Err: errors.New("429"), Msg: "429", Busy: true}

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: busy})
	waiting := next[*jobDone](t, sup)
	require.Equal(t, life{persistence.StatusRunning, phaseWaiting}, waiting.life)
	require.Equal(t, ts.clock.Now().UnixNano(), waiting.busySince, "the supervisor keeps when it was first busy")
	tr, _ := ts.store.Target(rec.ID, 0)
	require.Equal(t, persistence.TargetPending, tr.Status, "a busy target stays pending")

	ts.clock.Advance(ts.cfg.RetryFor) // within RetryFor since the first busy answer: busy again
	ts.sys.Root.Send(job, &dispatch{worker: workerPID, busySince: waiting.busySince})
	next[*fetch](t, worker)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: busy})
	require.Equal(t, waiting, next[*jobDone](t, sup), "the same first busy answer")

	ts.clock.Advance(time.Second) // past RetryFor since the first busy answer
	ts.sys.Root.Send(job, &dispatch{worker: workerPID, busySince: waiting.busySince})
	next[*fetch](t, worker)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: busy})
	require.Equal(t, phaseSettled, storedDone(t, sup, workerPID).life.phase)
	tr, _ = ts.store.Target(rec.ID, 0)
	require.Equal(t, persistence.TargetFailed, tr.Status)
	require.Equal(t, "429", tr.Error)
}

func TestJob_Cancel(t *testing.T) {
	ts := newTestSystem(t)
	job, rec, sup, worker, workerPID := jobUnderTest(t, ts, 3)

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	require.Equal(t, true, ts.ask(t, job, &CancelJob{ID: rec.ID}))
	ended := next[*jobDone](t, sup)
	require.Equal(t, life{persistence.StatusCancelled, phaseFetching}, ended.life, "no longer live, but a target is still in flight")
	require.Nil(t, ended.worker)
	stored, _ := ts.store.Job(rec.ID)
	require.Equal(t, persistence.StatusCancelled, stored.Status)
	require.Equal(t, false, ts.ask(t, job, &CancelJob{ID: rec.ID}))

	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{}`)}})
	free := next[*jobDone](t, sup)
	require.Equal(t, life{persistence.StatusCancelled, phaseStoring}, free.life, "the worker is freed; the job stays ended while its target is stored")
	require.Equal(t, workerPID, free.worker)
	require.Equal(t, phaseSettled, next[*jobDone](t, sup).life.phase)
	stored, _ = ts.store.Job(rec.ID)
	require.Equal(t, persistence.StatusCancelled, stored.Status, "the in-flight target does not overwrite cancelled")
	require.True(t, stored.Settled)

	// A dispatch that crossed the cancel gives the worker straight back.
	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	require.Equal(t, phaseSettled, next[*jobDone](t, sup).life.phase)
	quiet(t, worker)
}

func TestJob_Shutdown(t *testing.T) {
	ts := newTestSystem(t)
	job, rec, _, _, _ := jobUnderTest(t, ts, 2)
	require.Equal(t, true, ts.ask(t, job, &shutdownJob{}))
	stored, _ := ts.store.Job(rec.ID)
	require.Equal(t, persistence.StatusFailed, stored.Status)
	require.Equal(t, "shutdown", stored.Error)
	require.True(t, stored.Settled)
}

// While a target is being stored (phase storing), readers see it running in
// the job's snapshot, and every message waits in the stash until the store
// has answered: a Cancel then is answered after it, and its own write
// follows the target's.
func TestJob_WaitsForItsStore(t *testing.T) {
	ts := newTestSystem(t)
	job, rec, sup, worker, workerPID := jobUnderTest(t, ts, 2)
	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	testkit.WaitFor(t, "the running row written", func() bool {
		stored, err := ts.store.Job(rec.ID)
		return err == nil && stored.Status == persistence.StatusRunning
	})

	entered, release := make(chan struct{}, 1), make(chan struct{})
	ts.store.SetWriteFault(func() error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return nil
	})
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{"content":"a"}`)}})
	free := next[*jobDone](t, sup)
	require.Equal(t, life{persistence.StatusRunning, phaseStoring}, free.life)
	testkit.Recv(t, entered) // the store is writing it, and waits for release

	cancelled := ts.sys.Root.RequestFuture(job, &CancelJob{ID: rec.ID}, waitTimeout)
	snap := ts.cfg.Views.Get(rec.ID).Load()
	require.Equal(t, 0, snap.Running, "not stored yet: still in flight")
	require.Equal(t, 0, snap.Job.TargetsDone)
	require.Equal(t, persistence.StatusRunning, snap.Job.Status, "the Cancel waits for the store")
	quiet(t, sup)

	ts.store.SetWriteFault(nil)
	close(release)
	done := next[*jobDone](t, sup)
	require.Nil(t, done.worker)
	require.Equal(t, life{persistence.StatusRunning, phaseIdle}, done.life)
	res, err := cancelled.Result()
	require.NoError(t, err)
	require.Equal(t, true, res)
	require.Equal(t, phaseSettled, next[*jobDone](t, sup).life.phase, "the stashed Cancel, handled once the store answered")
	stored, err := ts.store.Job(rec.ID)
	require.NoError(t, err)
	require.Equal(t, persistence.StatusCancelled, stored.Status)
	require.Equal(t, 1, stored.TargetsDone)
	tr, err := ts.store.Target(rec.ID, 0)
	require.NoError(t, err)
	require.Equal(t, persistence.TargetDone, tr.Status)
	quiet(t, worker)
}

// A reader's Touch of a live job is held in its view and written with the
// job's next write, which puts the job at that lease in the store's sweep
// index.
func TestJob_TouchHeldUntilNextWrite(t *testing.T) {
	ts := newTestSystem(t)
	job, rec, sup, worker, workerPID := jobUnderTest(t, ts, 1)
	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	later := ts.clock.Now().UnixNano() + int64(time.Hour)
	ts.cfg.Views.Get(rec.ID).Touch(later)
	stored, err := ts.store.Job(rec.ID)
	require.NoError(t, err)
	require.Less(t, stored.Lease, later, "no store write for a Touch")

	ts.clock.Advance(time.Second)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{}`)}})
	require.Equal(t, phaseSettled, storedDone(t, sup, workerPID).life.phase)
	stored, err = ts.store.Job(rec.ID)
	require.NoError(t, err)
	require.Equal(t, later, stored.Lease, "the settling write carries the touch")
	n, _, err := ts.store.Sweep(later-1, 64)
	require.NoError(t, err)
	require.Zero(t, n, "not due before its touched lease")
	n, _, err = ts.store.Sweep(later, 64)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A result too large to store is stored failed: a job whose other targets
// all failed is failed, not partial; the stored time is kept.
func TestJob_TooLarge(t *testing.T) {
	rec := persistence.JobRecord{Status: persistence.StatusPartial, TargetsTotal: 2, TargetsDone: 2, TargetsFailed: 1, ResultBytes: 5}
	tr := persistence.TargetRecord{Idx: 1, Status: persistence.TargetDone, Result: []byte("12345"), Stored: 7}
	tooLarge(&rec, &tr)
	require.Equal(t, persistence.StatusFailed, rec.Status)
	require.Equal(t, 2, rec.TargetsFailed)
	require.Zero(t, rec.ResultBytes)
	require.Equal(t, persistence.TargetRecord{Idx: 1, Status: persistence.TargetFailed, Error: "result too large to store", Stored: 7}, tr)

	live := persistence.JobRecord{Status: persistence.StatusRunning, TargetsTotal: 3, TargetsDone: 1, ResultBytes: 5}
	tooLarge(&live, &persistence.TargetRecord{Status: persistence.TargetDone, Result: []byte("12345")})
	require.Equal(t, persistence.StatusRunning, live.Status, "a live job stays live")
	require.Equal(t, 1, live.TargetsFailed)
}

// The job actor moves its life one transition at a time, and refuses any
// other.
func TestJob_Transitions(t *testing.T) {
	j := &job{phase: phaseSettled, rec: persistence.JobRecord{Status: persistence.StatusDone}}
	require.PanicsWithValue(t, "job : no phase transition from settled to fetching", func() { j.to(phaseFetching) })
	j = &job{phase: phaseIdle, rec: persistence.JobRecord{Status: persistence.StatusQueued}}
	j.to(phaseFetching)
	require.Equal(t, phaseFetching, j.phase)
	require.PanicsWithValue(t, "job : no status transition from queued to done", func() { j.setStatus(persistence.StatusDone) },
		"one step at a time: running first")
	j.setStatus(persistence.StatusRunning)
	require.NotPanics(t, func() { j.to(phaseFetching) }, "staying put is no transition")
	require.Equal(t, life{persistence.StatusRunning, phaseFetching}, j.life())
}

// A stored target that leaves the store past MaxBytes has the maintainer
// evict, after the job has told the supervisor; under MaxBytes it asks for
// nothing.
func TestJob_StoredTargetTellsMaintainer(t *testing.T) {
	ts := newTestSystem(t)
	maint, maintPID := ts.spawnProbe(t)
	ts.cfg.maintenance = maintPID
	ts.cfg.MaxBytes = 1000 // the job's rows and a small outcome fit, a large one does not
	job, _, sup, worker, workerPID := jobUnderTest(t, ts, 2)

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{}`)}})
	storedDone(t, sup, workerPID)
	quiet(t, maint)

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	large := []byte(`"` + strings.Repeat("x", 2000) + `"`)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 1, outcome: Outcome{Result: large}})
	require.Equal(t, phaseSettled, storedDone(t, sup, workerPID).life.phase)
	next[*maintain](t, maint)
	require.Equal(t, dueEvict, ts.cfg.maintDue.Load())
}

// A write that fails is the store writer's to retry: the job goes on at
// once (its worker and its place in the rotation are not held), readers
// see the outcome as the job holds it (Snapshot.Unsaved), a Warn names the
// job; a job that has ended waits unsaved, and settles once the writer has
// written everything, in order.
func TestJob_WriteRetriedByTheStore(t *testing.T) {
	ts := newTestSystem(t)
	var logs testkit.SyncBuffer
	ts.cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	ts.store.SetRetryWait(time.Millisecond)
	job, rec, sup, worker, workerPID := jobUnderTest(t, ts, 2)
	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	testkit.WaitFor(t, "the running row written", func() bool {
		stored, err := ts.store.Job(rec.ID)
		return err == nil && stored.Status == persistence.StatusRunning
	})

	var failing atomic.Bool
	failing.Store(true)
	ts.store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.ENOSPC
		}
		return nil
	})
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{"content":"a"}`)}})
	require.Equal(t, life{persistence.StatusRunning, phaseIdle}, storedDone(t, sup, workerPID).life, "the job goes on")
	snap := ts.cfg.Views.Get(rec.ID).Load()
	require.Equal(t, 1, snap.Job.TargetsDone)
	require.Len(t, snap.Unsaved, 1)
	require.Equal(t, 0, snap.Unsaved[0].Idx)
	require.Contains(t, logs.String(), "job_id="+rec.ID)

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	require.Equal(t, 1, next[*fetch](t, worker).idx)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 1, outcome: Outcome{Result: []byte(`{"content":"b"}`)}})
	require.Equal(t, life{persistence.StatusDone, phaseUnsaved}, storedDone(t, sup, workerPID).life, "ended, its writes at the writer")
	require.Len(t, ts.cfg.Views.Get(rec.ID).Load().Unsaved, 2)

	failing.Store(false)
	require.Equal(t, life{persistence.StatusDone, phaseSettled}, next[*jobDone](t, sup).life, "settled once written")
	stored, err := ts.store.Job(rec.ID)
	require.NoError(t, err)
	require.Equal(t, persistence.StatusDone, stored.Status)
	require.True(t, stored.Settled)
	for i := range 2 {
		tr, err := ts.store.Target(rec.ID, i)
		require.NoError(t, err)
		require.Equal(t, persistence.TargetDone, tr.Status)
	}
	require.Empty(t, ts.cfg.Views.Get(rec.ID).Load().Unsaved)
	quiet(t, sup)
}

// A Cancel whose write fails is answered at once; the job waits unsaved
// until the writer has written its row.
func TestJob_CancelWriteRetried(t *testing.T) {
	ts := newTestSystem(t)
	ts.store.SetRetryWait(time.Millisecond)
	job, rec, sup, _, _ := jobUnderTest(t, ts, 2)
	var failing atomic.Bool
	failing.Store(true)
	ts.store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.EROFS
		}
		return nil
	})
	require.Equal(t, true, ts.ask(t, job, &CancelJob{ID: rec.ID}))
	require.Equal(t, life{persistence.StatusCancelled, phaseUnsaved}, next[*jobDone](t, sup).life)
	require.Equal(t, persistence.StatusCancelled, ts.cfg.Views.Get(rec.ID).Load().Job.Status, "readers see it cancelled")
	failing.Store(false)
	require.Equal(t, life{persistence.StatusCancelled, phaseSettled}, next[*jobDone](t, sup).life)
	stored, err := ts.store.Job(rec.ID)
	require.NoError(t, err)
	require.Equal(t, persistence.StatusCancelled, stored.Status)
	require.True(t, stored.Settled)
}
