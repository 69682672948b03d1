package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// supervisorUnderTest spawns a supervisor whose workers and jobs are probes:
// the worker probe gets nothing (the supervisor only hands its PID to jobs);
// every job probe forwards to jobs.
func supervisorUnderTest(t *testing.T, ts *testSystem) (sup *actor.PID, jobs *probe, workerPID chan *actor.PID) {
	t.Helper()
	jobs = newProbe()
	workerPID = make(chan *actor.PID, 4)
	worker := func() actor.Actor { return actor.ReceiveFunc(func(ctx actor.Context) {}) }
	job := func(_ *actor.PID, rec persistence.JobRecord, _ any) actor.Producer {
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
					ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobSettled})
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

type dispatched struct {
	id     string
	worker *actor.PID
}

func (ts *testSystem) submitMsg(id, caller string, n int) *Submit {
	now := ts.clock().UnixNano()
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
		ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobReady})
		d = next[dispatched](t, jobs)
		order = append(order, d.id[:1])
	}
	require.Equal(t, []string{"a", "b", "a", "b", "a"}, order)

	// A waiting job steps out of the rotation until its retry is due.
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobWaiting})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id)
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobReady})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id, "a waits out RetryWait (an hour here): b goes on alone")
	ts.sys.Root.Send(sup, &retryReady{id: a})
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobReady})
	d = next[dispatched](t, jobs)
	require.Equal(t, a, d.id, "a is back in the rotation")
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobSettled})
}

func TestSupervisor_CapsAndIdempotency(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.JobsPerCaller, ts.cfg.JobsTotal, ts.cfg.TargetsPerJob = 1, 2, 4
	sup, jobs, _ := supervisorUnderTest(t, ts)

	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 5)).(*SubmitReply).Refused, batchtype.ErrTooManyTargets)
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1)).(*SubmitReply).Refused)
	d := next[dispatched](t, jobs)
	defer ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobSettled})

	// Same key, same caller, queued/running: reused, no caps.
	r := ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1)).(*SubmitReply)
	require.True(t, r.Reused)
	require.Equal(t, id('a'), r.ID)

	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('b'), "alice", 1)).(*SubmitReply).Refused, batchtype.ErrCallerBusy)
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(id('c'), "bob", 1)).(*SubmitReply).Refused)
	require.ErrorIs(t, ts.ask(t, sup, ts.submitMsg(id('d'), "carol", 1)).(*SubmitReply).Refused, batchtype.ErrBusy)

	// A cancel frees the caps before the canceller hears back.
	ts.sys.Root.Send(sup, &jobDone{id: id('c'), state: jobSettled})
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(id('d'), "carol", 1)).(*SubmitReply).Refused)
}

func TestSupervisor_CancelRoutingAndViews(t *testing.T) {
	ts := newTestSystem(t)
	sup, jobs, _ := supervisorUnderTest(t, ts)
	ts.ask(t, sup, ts.submitMsg(id('a'), "alice", 1))
	d := next[dispatched](t, jobs)
	defer ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobSettled})

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
	ts.sys.Root.Send(sup, &jobDone{id: d.id, worker: d.worker, state: jobSettled})
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

	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, state: jobStoring})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id, "the worker goes on while a1 is stored")
	ts.sys.Root.Send(sup, &jobDone{id: b, worker: d.worker, state: jobStoring})
	ts.sys.Root.Send(sup, &jobDone{id: b, state: jobReady}) // b1's store answers first
	ts.ask(t, sup, &CancelJob{ID: id('z')})                 // the supervisor has taken all three
	quiet(t, jobs)

	ts.sys.Root.Send(sup, &jobDone{id: a, state: jobReady})
	d = next[dispatched](t, jobs)
	require.Equal(t, a, d.id, "a2 before b2: a's place came first")
	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, state: jobStoring})
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id)
	ts.sys.Root.Send(sup, &jobDone{id: a, state: jobSettled})
	ts.sys.Root.Send(sup, &jobDone{id: b, worker: d.worker, state: jobSettled})
}

// The supervisor's states: every one is reachable from ready, settled is the
// end, a state that is not live never leads back to a live one, and to
// refuses a transition the table does not list.
func TestSupervisor_Transitions(t *testing.T) {
	seen := map[jobState]bool{jobReady: true}
	for todo := []jobState{jobReady}; len(todo) > 0; todo = todo[1:] {
		for _, st := range supervisorTransitions[todo[0]] {
			if !seen[st] {
				seen[st] = true
				todo = append(todo, st)
			}
			if !todo[0].live() {
				require.False(t, st.live(), "%s → %s: an ended job is never live again", todo[0], st)
			}
		}
	}
	for st := range nJobStates {
		require.True(t, seen[st], "%s is reachable", st)
	}
	require.Empty(t, supervisorTransitions[jobSettled])

	s := &supervisor{cfg: &Config{}, perCaller: map[string]int{}}
	j := &liveJob{id: "x", state: jobSettled}
	require.PanicsWithValue(t, "job x: no transition from settled to ready", func() { s.to(nil, j, jobReady) })
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

	ts.sys.Root.Send(sup, &jobDone{id: a, state: jobCancelled, status: persistence.StatusCancelled})
	require.NoError(t, ts.ask(t, sup, ts.submitMsg(b, "alice", 3)).(*SubmitReply).Refused, "alice's cap is free")
	reused := ts.ask(t, sup, ts.submitMsg(a, "alice", 3)).(*SubmitReply)
	require.False(t, reused.Reused, "a cancelled job is never reused")
	require.ErrorIs(t, reused.Refused, batchtype.ErrCallerBusy)

	ts.sys.Root.Send(sup, &jobDone{id: a, worker: d.worker, state: jobStoring}) // its target is being stored
	d = next[dispatched](t, jobs)
	require.Equal(t, b, d.id, "a is not back in the rotation")

	drain := ts.sys.Root.RequestFuture(sup, &Drain{}, waitTimeout)
	drained := make(chan any, 1)
	go func() {
		res, _ := drain.Result()
		drained <- res
	}()
	ts.sys.Root.Send(sup, &jobDone{id: b, worker: d.worker, state: jobReady})
	ts.ask(t, sup, &CancelJob{ID: id('z')}) // the supervisor has taken both
	select {
	case <-drained:
		t.Fatal("the drain did not wait for a's store")
	default:
	}
	ts.sys.Root.Send(sup, &jobDone{id: a, state: jobSettled, status: persistence.StatusCancelled})
	select {
	case res := <-drained:
		require.Equal(t, 1, res.(*Drained).Jobs, "b was live, a was not")
	case <-time.After(waitTimeout):
		t.Fatal("no drain")
	}
}
