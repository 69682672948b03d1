package actors

import (
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// jobUnderTest spawns a job actor whose supervisor and worker are probes.
func jobUnderTest(t *testing.T, ts *testSystem, n int) (job *actor.PID, rec persistence.JobRecord, sup, worker *probe, workerPID *actor.PID) {
	t.Helper()
	sup, supPID := ts.spawnProbe(t)
	worker, workerPID = ts.spawnProbe(t)
	rec = ts.newJobRecord(t, "0123456789abcdef0123456789abcdef", "alice", n)
	job = ts.sys.Root.Spawn(actor.PropsFromProducer(newJob(ts.cfg, supPID, rec, "payload")))
	t.Cleanup(func() { ts.stop(t, job) })
	return job, rec, sup, worker, workerPID
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
	stored, err := ts.store.Job(rec.ID)
	require.NoError(t, err)
	require.Equal(t, persistence.StatusRunning, stored.Status, "running is stored on the first target")

	reply := ts.ask(t, job, &StatusJob{ID: rec.ID}).(*StatusReply)
	require.True(t, reply.Live)
	require.Equal(t, persistence.TargetRunning, reply.Targets[0].Status)

	ts.advance(time.Second)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{"content":"a"}`)}})
	done := next[*jobDone](t, sup)
	require.Equal(t, jobReady, done.state)
	require.Equal(t, workerPID, done.worker)
	tr, err := ts.store.Target(rec.ID, 0)
	require.NoError(t, err)
	require.Equal(t, persistence.TargetDone, tr.Status)
	stored, _ = ts.store.Job(rec.ID)
	require.Equal(t, ts.clock().UnixNano(), stored.Lease, "storing a target bumps the lease")

	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	require.Equal(t, 1, next[*fetch](t, worker).idx)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 1, outcome: Outcome{Err: errors.New("x"), Msg: "x", Hint: "h"}})
	require.Equal(t, jobSettled, next[*jobDone](t, sup).state)
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
	require.Equal(t, jobWaiting, next[*jobDone](t, sup).state)
	tr, _ := ts.store.Target(rec.ID, 0)
	require.Equal(t, persistence.TargetPending, tr.Status, "a busy target stays pending")

	ts.advance(ts.cfg.RetryFor + time.Second) // past RetryFor since the first busy answer
	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	next[*fetch](t, worker)
	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: busy})
	require.Equal(t, jobSettled, next[*jobDone](t, sup).state)
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
	ended := next[*jobEnded](t, sup)
	require.False(t, ended.settled, "a target is still in flight")
	stored, _ := ts.store.Job(rec.ID)
	require.Equal(t, persistence.StatusCancelled, stored.Status)
	require.Equal(t, false, ts.ask(t, job, &CancelJob{ID: rec.ID}))

	ts.sys.Root.Send(job, &fetched{worker: workerPID, idx: 0, outcome: Outcome{Result: []byte(`{}`)}})
	require.Equal(t, jobSettled, next[*jobDone](t, sup).state)
	stored, _ = ts.store.Job(rec.ID)
	require.Equal(t, persistence.StatusCancelled, stored.Status, "the in-flight target does not overwrite cancelled")
	require.True(t, stored.Settled)

	// A dispatch that crossed the cancel gives the worker straight back.
	ts.sys.Root.Send(job, &dispatch{worker: workerPID})
	require.Equal(t, jobSettled, next[*jobDone](t, sup).state)
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
