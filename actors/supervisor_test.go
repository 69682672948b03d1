package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// supervisorUnderTest spawns a supervisor whose workers and jobs are probes:
// the worker probe gets nothing (the supervisor only hands its PID to jobs);
// every job probe forwards to jobs.
func supervisorUnderTest(t *testing.T, ts *testSystem) (sup *actor.PID, jobs *probe, workerPID chan *actor.PID) {
	t.Helper()
	jobs = newProbe()
	workerPID = make(chan *actor.PID, 4)
	worker := func() actor.Actor { return actor.ReceiveFunc(func(ctx actor.Context) {}) }
	job := func(rec persistence.JobRecord, _ any, _ trace.Span) actor.Producer {
		return func() actor.Actor {
			return actor.ReceiveFunc(func(ctx actor.Context) {
				switch m := ctx.Message().(type) {
				case *dispatch:
					jobs.got <- dispatched{id: rec.ID, worker: m.worker}
				case *CancelJob:
					ctx.Respond(true)
				case *shutdownJob:
					ctx.Respond(true)
				}
			})
		}
	}
	props := props(supervisorWith(ts.cfg, worker, job), nil, actor.WithSupervisor(&supervisionStrategy{cfg: ts.cfg}))
	sup = ts.sys.Root.Spawn(props)
	t.Cleanup(func() {
		// As the engine does: drain, then stop. Each test gives back the
		// worker it holds; here the jobs hand back any dispatched later.
		drained := ts.sys.Root.RequestFuture(sup, &Drain{}, waitTimeout)
		done := make(chan error, 1)
		go func() { _, err := drained.Result(); done <- err }()
		for {
			select {
			case m := <-jobs.got:
				if d, ok := m.(dispatched); ok {
					ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: settled})
				}
				continue
			case err := <-done:
				require.NoError(t, err, "drain")
			}
			break
		}
		ts.stop(t, sup)
	})
	return sup, jobs, workerPID
}

// The lives a job reports in these tests.
var (
	ready   = life{persistence.StatusRunning, phaseIdle}
	storing = life{persistence.StatusRunning, phaseStoring}
	waiting = life{persistence.StatusRunning, phaseWaiting}
	settled = life{persistence.StatusDone, phaseSettled}
)

type dispatched struct {
	id     string
	worker *actor.PID
}

func (ts *testSystem) submitMsg(id, caller string, n int) *Submit {
	now := ts.clock.Now().UnixNano()
	rec := persistence.JobRecord{ID: id, Caller: caller, Status: persistence.StatusQueued, TargetsTotal: n, Created: now, Lease: now}
	copy(rec.Key[:], id)
	targets := make([]persistence.TargetRecord, n)
	for i := range targets {
		targets[i] = persistence.TargetRecord{Idx: i, URL: "u", Status: persistence.TargetPending}
	}
	return &Submit{Job: rec, Targets: targets}
}

func id(c byte) string {
	b := make([]byte, 32)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

func TestSupervisor_Rotation(t *testing.T) {
	ts := newTestSystem(t)
	sup, jobs, _ := supervisorUnderTest(t, ts)
	a, b := id('a'), id('b')

	r := ts.ask(t, sup, ts.submitMsg(a, "alice", 3)).(*SubmitReply)
	require.NoError(t, r.Refused)
	require.Equal(t, a, r.ID)
	d := next[dispatched](t, jobs)
	require.Equal(t, a, d.id, "the one worker goes to a")
	ts.ask(t, sup, ts.submitMsg(b, "bob", 3))
	quiet(t, jobs) // no worker is free

	order := []string{"a"}
	for range 4 {
		ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: ready})
		d = next[dispatched](t, jobs)
		order = append(order, d.id[:1])
	}
	require.Equal(t, []string{"a", "b", "a", "b", "a"}, order)

	// A waiting job steps out of the rotation until its retry is due.
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: waiting})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id)
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: ready})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id, "a waits out RetryWait (an hour here): b goes on alone")
	ts.sys.Root.Send(sup, &retryReady{id: a})
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: ready})
	d = next[dispatched](t, jobs)
	require.Equal(t, a, d.id, "a is back in the rotation")
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: settled})
}

func TestSupervisor_CapsAndIdempotency(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.JobsPerCaller, ts.cfg.JobsTotal, ts.cfg.TargetsPerJob = 1, 2, 4
	sup, jobs, _ := supervisorUnderTest(t, ts)

	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 5)).(*SubmitReply).Refused, batchtype.ErrTooManyTargets)
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1)).(*SubmitReply).Refused)
	d := next[dispatched](t, jobs)
	defer ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: settled})

	// Same key, same caller, queued/running: reused, no caps.
	r := ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1)).(*SubmitReply)
	require.True(t, r.Reused)
	require.Equal(t, id('a'), r.ID)

	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('b'), "alice", 1)).(*SubmitReply).Refused, batchtype.ErrCallerBusy)
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(id('c'), "bob", 1)).(*SubmitReply).Refused)
	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('d'), "carol", 1)).(*SubmitReply).Refused, batchtype.ErrBusy)

	// A cancel frees the caps before the canceller hears back.
	ts.sys.Root.Send(sup, &jobDone{id: id('c'), life: settled})
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(id('d'), "carol", 1)).(*SubmitReply).Refused)
}

func TestSupervisor_CancelRoutingAndViews(t *testing.T) {
	ts := newTestSystem(t)
	sup, jobs, _ := supervisorUnderTest(t, ts)
	ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1))
	d := next[dispatched](t, jobs)
	defer ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: settled})

	v := ts.cfg.Views.Get(id('a'))
	require.NotNil(t, v, "a job has a view for readers from its creation")
	require.Equal(t, persistence.StatusQueued, v.Load().Job.Status)
	require.Nil(t, ts.cfg.Views.Get(id('z')))
	require.Equal(t, true, ts.ask(t, sup, &CancelJob{ID: id('a')}))
	require.Equal(t, false, ts.ask(t, sup, &CancelJob{ID: id('z')}))
}

func TestSupervisor_Drain(t *testing.T) {
	ts := newTestSystem(t)
	sup, jobs, _ := supervisorUnderTest(t, ts)
	ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1))
	d := next[dispatched](t, jobs)

	drained := ts.sys.Root.RequestFuture(sup, &Drain{}, waitTimeout)
	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('b'), "bob", 1)).(*SubmitReply).Refused, batchtype.ErrClosed)
	// The drain waits for the target in flight.
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, life: settled})
	res, err := drained.Result()
	require.NoError(t, err)
	require.Equal(t, 0, res.(*Drained).Jobs)
}

// A job whose target is being stored keeps its place in the rotation; when
// its place comes up before the store has answered, the worker waits for it
// instead of passing it, so the order stays a1 b1 a2 b2 with one worker.
func TestSupervisor_WaitsForAJobBeingStored(t *testing.T) {
	ts := newTestSystem(t)
	sup, jobs, _ := supervisorUnderTest(t, ts)
	a, b := id('a'), id('b')
	ts.ask(t, sup, ts.submitMsg(a, "alice", 3))
	ts.ask(t, sup, ts.submitMsg(b, "bob", 3))
	d := next[dispatched](t, jobs)
	require.Equal(t, a, d.id)

	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, life: storing})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id, "the worker goes on while a1 is stored")
	ts.sys.Root.Send(sup, &jobDone{id: b, worker: d.worker, life: storing})
	ts.sys.Root.Send(sup, &jobDone{id: b, life: ready}) // b1's store answers first
	ts.ask(t, sup, &CancelJob{ID: id('z')})             // the supervisor has taken all three
	quiet(t, jobs)

	ts.sys.Root.Send(sup, &jobDone{id: a, life: ready})
	d = next[dispatched](t, jobs)
	require.Equal(t, a, d.id, "a2 before b2: a's place came first")
	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, life: storing})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id)
	ts.sys.Root.Send(sup, &jobDone{id: a, life: settled})
	ts.sys.Root.Send(sup, &jobDone{id: b, worker: d.worker, life: settled})
}

// The supervisor checks each life a job reports against the tables, in one
// or more steps (it hears of a job's changes only in its reports), and
// refuses any other.
func TestSupervisor_Transitions(t *testing.T) {
	s := &supervisor{cfg: &Config{}, perCaller: map[string]int{}}
	j := &liveJob{id: "x", life: life{persistence.StatusQueued, phaseIdle}}
	s.count[phaseIdle], s.nlive, s.perCaller[""] = 1, 1, 1
	require.True(t, s.to(nil, j, life{persistence.StatusRunning, phaseStoring}), "queued/idle → running/storing: dispatched, fetched")
	require.True(t, s.to(nil, j, life{persistence.StatusDone, phaseSettled}))
	require.Zero(t, s.live())
	require.Equal(t, 1, s.count[phaseSettled])
	require.False(t, s.to(nil, j, life{persistence.StatusDone, phaseSettled}), "no change")
	require.PanicsWithValue(t, "job x: no phase transition from settled to idle", func() { s.to(nil, j, life{persistence.StatusDone, phaseIdle}) })
	require.PanicsWithValue(t, "job x: no status transition from done to running", func() { s.to(nil, j, life{persistence.StatusRunning, phaseSettled}) })
}

// A job cancelled with a target in flight is no longer live at once (its caps
// are free), stays out of the rotation when its worker comes back while its
// target is stored, and the drain waits for it to settle.
func TestSupervisor_CancelledWhileInFlight(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.JobsPerCaller = 1
	sup, jobs, _ := supervisorUnderTest(t, ts)
	a, b := id('a'), id('b')
	ts.ask(t, sup, ts.submitMsg(a, "alice", 3))
	d := next[dispatched](t, jobs)
	require.Equal(t, a, d.id)

	ts.sys.Root.Send(sup, &jobDone{id: a, life: life{persistence.StatusCancelled, phaseFetching}})
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(b, "alice", 3)).(*SubmitReply).Refused, "alice's cap is free")
	reused := ts.ask(t, sup, ts.submitMsg(a, "alice", 3)).(*SubmitReply)
	require.False(t, reused.Reused, "a cancelled job is never reused")
	require.ErrorIs(t, reused.Refused, batchtype.ErrCallerBusy)

	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, life: life{persistence.StatusCancelled, phaseStoring}}) // its target is being stored
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id, "a is not back in the rotation")

	drain := ts.sys.Root.RequestFuture(sup, &Drain{}, waitTimeout)
	drained := make(chan any, 1)
	go func() {
		res, _ := drain.Result()
		drained <- res
	}()
	ts.sys.Root.Send(sup, &jobDone{id: b, worker: d.worker, life: ready})
	ts.ask(t, sup, &CancelJob{ID: id('z')}) // the supervisor has taken both
	select {
	case <-drained:
		t.Fatal("the drain did not wait for a's store")
	default:
	}
	ts.sys.Root.Send(sup, &jobDone{id: a, life: life{persistence.StatusCancelled, phaseSettled}})
	require.Equal(t, 1, testkit.Recv(t, drained).(*Drained).Jobs, "b was live, a was not")
}

// A created job has the maintainer sweep and evict right after its Submit
// (off its path); a reused one asks for nothing.
func TestSupervisor_SubmitTellsMaintainer(t *testing.T) {
	ts := newTestSystem(t)
	maint, maintPID := ts.spawnProbe(t)
	ts.cfg.maintenance = maintPID
	sup, jobs, _ := supervisorUnderTest(t, ts)
	a := id('a')
	require.Equal(t, a, ts.ask(t, sup, ts.submitMsg(a, "alice", 1)).(*SubmitReply).ID)
	next[*maintain](t, maint)
	require.Equal(t, dueSweep|dueEvict, ts.cfg.maintDue.Swap(0))
	d := next[dispatched](t, jobs)
	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, life: settled})

	again := ts.ask(t, sup, ts.submitMsg(a, "alice", 1)).(*SubmitReply)
	require.True(t, again.Reused)
	require.Equal(t, a, again.ID)
	refused := ts.submitMsg(id('c'), "carol", ts.cfg.TargetsPerJob+1)
	require.ErrorIs(t, ts.ask(t, sup, refused).(*SubmitReply).Refused, batchtype.ErrTooManyTargets)
	quiet(t, maint)
}
