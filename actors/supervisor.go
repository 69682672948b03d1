package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/persistence"
)

// errInternal is the error Hooks.Target sees for a fetch that panicked.
var errInternal = errors.New(internalError)

// liveJob is the supervisor's record of a job that has an actor: its life
// as its actor last reported it (or as the supervisor moved it), and the
// data that goes with it.
type liveJob struct {
	id     string
	caller string
	pid    *actor.PID
	// life is the job's status and phase (life.go). A job that is no
	// longer live may have a stored row behind its status (a write
	// failed): its status here counts.
	life  life
	retry *time.Timer // waiting: the timer that ends the wait
	// lease is the job's lease as its actor holds it: the stored row of a
	// live job is not rewritten for every target (see job.fetched).
	lease     int64
	busySince int64 // when its next target was first answered busy, as its actor reported it
	view      *View // what its actor publishes; holds the leases readers asked for
}

// supervisor owns the rotation: the live jobs in submit order, which of them
// has a target in flight, and when a busy one may be tried again. Caps and
// idempotency are decided here, one Submit at a time, so concurrent Submits
// cannot race past a cap.
//
// The rotation is a FIFO of ready jobs: a job enters it when it is
// submitted, when one of its targets has been fetched, and when its retry
// wait is over; a free worker takes the job at its head. With jobs that are
// always ready this is round robin in submit order (a1 b1 a2 b2 …), and a new
// job waits at most one round. Every step is O(1), whatever the number of
// live jobs.
//
// A fetched target is stored while the worker goes on with the next job
// (the job actor writes it; the store commits the writes of many jobs
// together). The job takes its place at the tail when its target has been
// fetched, as if it had been stored then; should its place come up before
// the store has answered, the workers wait for it (one commit) rather than
// pass it, so the order is the same as if each worker stored before moving
// on, and a job's next target never starts before the last one is stored.
//
// Each job has one life (life.go), as its actor reports it, changed only by
// to, which checks it against the machines' tables and keeps the counts,
// the caps and the rotation in step with it.
type supervisor struct {
	cfg       *Config
	idle      []*actor.PID // workers with nothing to do
	jobs      map[string]*liveJob
	count     [nPhases]int   // jobs per phase (settled: actors not yet stopped)
	nlive     int            // live jobs
	perCaller map[string]int // live jobs per caller
	inflight  int            // workers out: targets being fetched
	ready     fifo[*liveJob] // the rotation: ready jobs, and jobs being stored (see supervisor)
	closing   bool
	drainer   *actor.PID  // who asked for the drain, answered once nothing is in flight
	stopped   atomic.Bool // read by timer callbacks
	diskWait  *time.Timer // the store's disk is below its reserve: when to look again (diskCheck)

	// The producers of the children; tests stand probes in for them.
	worker actor.Producer
	job    func(rec persistence.JobRecord, payload any, span trace.Span) actor.Producer
}

// to moves job j to life l and keeps the rest in step: the counts, the
// live jobs per caller (and Hooks.Depth), the rotation, the retry timer.
// It panics on a change the tables do not allow in one or more steps (a bug
// of ours: the guardian fails the runner closed). It reports whether the life changed.
func (s *supervisor) to(ctx actor.Context, j *liveJob, l life) bool {
	from := j.life
	if l == from {
		return false
	}
	checkLife(j.id, from, l, true)
	j.life = l
	s.count[from.phase]--
	s.count[l.phase]++
	if from.phase == phaseWaiting && j.retry != nil {
		j.retry.Stop()
		j.retry = nil
	}
	if !from.inRotation() && l.inRotation() {
		s.ready.push(j)
	}
	if from.live() && !l.live() {
		s.nlive--
		if s.perCaller[j.caller]--; s.perCaller[j.caller] <= 0 {
			delete(s.perCaller, j.caller)
		}
		s.cfg.hookDepth(ctx, s.live())
		s.cfg.ended(ctx, j.id, j.caller, l.status)
	}
	return true
}

// live returns how many jobs are live.
func (s *supervisor) live() int { return s.nlive }

func newSupervisor(cfg *Config) actor.Producer {
	job := func(rec persistence.JobRecord, payload any, span trace.Span) actor.Producer {
		return newJob(cfg, rec, payload, span)
	}
	return supervisorWith(cfg, newWorker(cfg), job)
}

func supervisorWith(cfg *Config, worker actor.Producer, job func(persistence.JobRecord, any, trace.Span) actor.Producer) actor.Producer {
	return func() actor.Actor {
		return &supervisor{cfg: cfg, jobs: make(map[string]*liveJob), perCaller: make(map[string]int), worker: worker, job: job}
	}
}

// Receive implements actor.Actor.
func (s *supervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.start(ctx)
	case *Submit:
		reply := s.submit(ctx, m)
		ctx.Respond(reply)
		if reply.Refused == nil && reply.Err == nil && !reply.Reused {
			s.dispatch(ctx)
			// Expired jobs are swept, and the new job's rows may call for
			// an eviction: right after the Submit, off its path.
			s.cfg.maintain(ctx, dueSweep|dueEvict)
		}
	case *CancelJob:
		if j := s.jobs[m.ID]; j != nil && j.life.live() {
			ctx.Forward(j.pid)
		} else {
			ctx.Respond(false)
		}
	case *writeHeld:
		if j := s.jobs[m.id]; j != nil {
			ctx.Send(j.pid, m)
		}
	case *jobDone:
		s.jobDone(ctx, m)
	case *diskCheck:
		s.diskWait = nil
		s.dispatch(ctx)
	case *retryReady:
		if j := s.jobs[m.id]; j != nil && j.life.live() && j.life.phase == phaseWaiting {
			s.to(ctx, j, life{j.life.status, phaseIdle})
			s.dispatch(ctx)
		}
	case *Drain:
		s.closing = true
		s.drainer = ctx.Sender()
		s.stopTimers()
		s.maybeFinishDrain(ctx)
	case *actor.Terminated:
		s.terminated(m.Who)
		s.maybeFinishDrain(ctx)
	case *actor.Stopping:
		s.stopTimers()
	}
}

func (s *supervisor) start(ctx actor.Context) {
	s.cfg.supervisor = ctx.Self() // before any job actor is spawned
	for i := 1; i <= s.cfg.Workers; i++ {
		pid, err := ctx.SpawnNamed(s.cfg.workerProps(s.worker, i-1), "worker-"+strconv.Itoa(i))
		if err != nil {
			s.cfg.Log.Error("start worker", slog.Int(keyWorker, i), slog.String(keyErr, err.Error()))
			continue
		}
		s.idle = append(s.idle, pid)
	}
}

func (s *supervisor) stopTimers() {
	s.stopped.Store(true)
	if s.diskWait != nil {
		s.diskWait.Stop()
		s.diskWait = nil
	}
	for _, j := range s.jobs {
		if j.retry != nil {
			j.retry.Stop()
			j.retry = nil
		}
	}
}

func (s *supervisor) submit(ctx actor.Context, m *Submit) *SubmitReply {
	if s.closing {
		return &SubmitReply{Refused: batchtype.ErrClosed}
	}
	prev, found, err := s.cfg.Store.JobByKey(m.Job.Key)
	if err != nil {
		return &SubmitReply{Err: err}
	}
	// A job with an actor has a newer lease than its stored row (see
	// liveJob.lease); one that has ended but kept its actor (its last
	// write failed) has a stored row behind its status: its actor's
	// status counts ("" for a cancelled one: never reused).
	live := s.jobs[prev.ID]
	if found && live != nil && live.life.phase != phaseSettled {
		prev.Lease = max(prev.Lease, live.lease, live.view.Touched())
		if !live.life.live() {
			prev.Status = live.life.status
		}
	}
	if found && prev.Caller == m.Job.Caller && prev.Reusable(s.cfg.TTL, s.cfg.Now().UnixNano()) {
		s.cfg.hookJob(ctx, prev.ID, "reused")
		return &SubmitReply{ID: prev.ID, Reused: true}
	}
	switch {
	case len(m.Targets) > s.cfg.TargetsPerJob:
		return &SubmitReply{Refused: batchtype.ErrTooManyTargets}
	case s.cfg.Store.DiskFull(): // after the reuse: a resubmit of a job that exists writes nothing
		return &SubmitReply{Err: fmt.Errorf("%w: no room on the store's disk (below the reserve, or a write found it full)", batchtype.ErrDiskFull)}
	case s.perCaller[m.Job.Caller] >= s.cfg.JobsPerCaller:
		return &SubmitReply{Refused: batchtype.ErrCallerBusy}
	case s.live() >= s.cfg.JobsTotal:
		return &SubmitReply{Refused: batchtype.ErrBusy}
	}
	span := s.cfg.startJobSpan(m)
	if err := s.cfg.Store.CreateJob(&m.Job, m.Targets); err != nil {
		endSpanRefused(span)
		// Not stored, or (ErrNotSynced) stored, not synced, and taken back
		// by the store: the caller is told nothing was created, and the
		// job never runs nor shows (if the store could not take it back,
		// it shows it to nobody and never answers a Submit with it).
		return &SubmitReply{Err: err}
	}
	view := s.cfg.Views.add(&m.Job)
	props := s.cfg.jobProps(s.job(m.Job, m.Payload, span))
	pid, err := ctx.SpawnNamed(props, "job-"+m.Job.ID)
	if err != nil {
		endSpanRefused(span)
		// Only a duplicate id (128 random bits) gets here.
		m.Job.Status, m.Job.Error, m.Job.Settled = persistence.StatusFailed, internalError, true
		m.Job.Ended = s.cfg.Now().UnixNano()
		_ = s.cfg.Store.SaveJob(&m.Job)
		view.publish(&Snapshot{Job: m.Job, Running: -1})
		s.cfg.Views.remove(m.Job.ID)
		return &SubmitReply{Err: err}
	}
	j := &liveJob{id: m.Job.ID, caller: m.Job.Caller, pid: pid, life: life{m.Job.Status, phaseIdle}, lease: m.Job.Lease, view: view}
	s.jobs[j.id] = j
	s.count[phaseIdle]++
	s.nlive++
	s.perCaller[j.caller]++
	s.ready.push(j)
	s.cfg.Log.Debug("job created", slog.String(keyJobID, j.id), slog.Int(keyCount, len(m.Targets)), slog.Int(keyLive, s.live()))
	s.cfg.hookJob(ctx, j.id, "created")
	s.cfg.hookDepth(ctx, s.live())
	return &SubmitReply{ID: j.id}
}

// dispatch hands free workers to the jobs at the head of the rotation;
// none while the store's disk is below its reserve (the jobs are held,
// their next targets pending, until a diskCheck finds room).
func (s *supervisor) dispatch(ctx actor.Context) {
	if len(s.idle) > 0 && !s.closing && s.cfg.Store.DiskFull() {
		s.waitDisk(ctx)
		return
	}
	for len(s.idle) > 0 && !s.closing {
		j, ok := s.ready.peek()
		if !ok {
			return
		}
		if j.life.live() && j.life.phase == phaseStoring {
			return // its place has come up: wait for its store (see supervisor)
		}
		s.ready.pop()
		if !j.life.live() || j.life.phase != phaseIdle {
			continue // it ended since it took its place
		}
		w := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		s.to(ctx, j, life{j.life.status, phaseFetching})
		s.inflight++
		ctx.Send(j.pid, &dispatch{worker: w, busySince: j.busySince})
		s.cfg.hookInflight(ctx, s.inflight)
	}
}

// diskPoll is how often, at most, the supervisor looks again at a disk
// below its reserve (RetryWait, if shorter).
const diskPoll = time.Second

// waitDisk sets the timer of the next diskCheck, unless one is set.
func (s *supervisor) waitDisk(ctx actor.Context) {
	if s.diskWait != nil {
		return
	}
	s.cfg.Log.Debug("targets held: the store's disk is below its reserve", slog.Int(keyLive, s.live()))
	root, self := ctx.ActorSystem().Root, ctx.Self()
	s.diskWait = time.AfterFunc(min(s.cfg.RetryWait, diskPoll), func() {
		if !s.stopped.Load() {
			root.Send(self, &diskCheck{})
		}
	})
}

// jobDone takes a job's report: its worker back, and its new state.
func (s *supervisor) jobDone(ctx actor.Context, m *jobDone) {
	if m.worker != nil {
		s.inflight--
		s.idle = append(s.idle, m.worker)
		s.cfg.hookInflight(ctx, s.inflight)
	}
	if j := s.jobs[m.id]; j != nil {
		s.report(ctx, j, m)
	}
	if s.closing {
		s.maybeFinishDrain(ctx)
		return
	}
	s.dispatch(ctx)
}

// report moves a job to the life its actor reports.
func (s *supervisor) report(ctx actor.Context, j *liveJob, m *jobDone) {
	j.lease = max(j.lease, m.lease)
	j.busySince = m.busySince
	if !j.life.live() && m.life.live() {
		return // it ended: never live again (its worker is back)
	}
	if !s.to(ctx, j, m.life) {
		return
	}
	switch m.life.phase {
	case phaseWaiting:
		s.waitRetry(ctx, j)
	case phaseSettled:
		// Its actor stops once its mailbox is empty (a poison pill queues
		// behind what was already sent to it); the job is forgotten then.
		ctx.Poison(j.pid)
	}
}

func (s *supervisor) waitRetry(ctx actor.Context, j *liveJob) {
	if s.closing {
		return
	}
	root, self, id := ctx.ActorSystem().Root, ctx.Self(), j.id
	j.retry = time.AfterFunc(s.cfg.RetryWait, func() {
		if !s.stopped.Load() {
			root.Send(self, &retryReady{id: id})
		}
	})
}

// terminated forgets a settled job once its actor has stopped.
func (s *supervisor) terminated(who *actor.PID) {
	i := strings.LastIndex(who.Id, "/job-")
	if i < 0 {
		return
	}
	if j := s.jobs[who.Id[i+len("/job-"):]]; j != nil && j.life.phase == phaseSettled && j.pid.Equal(who) {
		s.forget(j)
	}
}

// forget forgets a settled job.
func (s *supervisor) forget(j *liveJob) {
	delete(s.jobs, j.id)
	s.count[phaseSettled]--
}

// maybeFinishDrain finishes a drain once nothing is in flight or being
// stored and every job actor already told to stop has stopped: stopping the
// supervisor then sends no Stop to an actor that is already gone (a dead
// letter).
func (s *supervisor) maybeFinishDrain(ctx actor.Context) {
	if s.drainer != nil && s.inflight == 0 && s.count[phaseFetching] == 0 && s.count[phaseStoring] == 0 && s.count[phaseSettled] == 0 {
		s.finishDrain(ctx)
	}
}

// finishDrain fails every live job with "shutdown" (each job actor persists
// its own) and answers the drain.
func (s *supervisor) finishDrain(ctx actor.Context) {
	n := 0
	for _, j := range s.jobs {
		f := ctx.RequestFuture(j.pid, &shutdownJob{}, drainJobTimeout)
		if _, err := f.Result(); err != nil {
			s.cfg.Log.Warn("shut down job", slog.String(keyJobID, j.id), slog.String(keyErr, err.Error()))
		}
		end := life{j.life.status, phaseSettled}
		if j.life.live() {
			n++
			end.status = persistence.StatusFailed // "shutdown", as its actor stored it
		}
		// Settled, and forgotten: its actor stops with the supervisor (no
		// poison pill: the supervisor's own stop stops it).
		s.to(ctx, j, end)
		s.forget(j)
	}
	ctx.Send(s.drainer, &Drained{Jobs: n})
	s.drainer = nil
}

// drainJobTimeout bounds the wait for one job actor to store its shutdown.
const drainJobTimeout = 30 * time.Second

// supervisionStrategy is the supervisor's strategy for its children. A
// worker whose FetchFunc panicked or ended its goroutine is restarted, and
// the target it was fetching is stored failed with "internal error": the
// job goes on. Any other child that fails (a job actor: a bug of ours,
// since no user code runs there) fails the supervisor, whose guardian
// fails the runner closed (see failClosedStrategy): a job actor resumed
// without its message could leave its job stuck.
type supervisionStrategy struct{ cfg *Config }

// HandleFailure implements actor.SupervisorStrategy. The panic value
// (reason) is never logged or stored.
func (st *supervisionStrategy) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason any, message any) {
	if f, ok := actor.UnwrapEnvelopeMessage(message).(*fetch); ok {
		var took time.Duration
		what := "worker restarted after a panic"
		if ff, ok := reason.(*fetchFailure); ok {
			took = ff.took
			if ff.err == errGoexit {
				what = "worker restarted after its fetch ended its goroutine"
			}
		}
		st.cfg.Log.Warn(what, slog.String(keyJobID, f.jobID), slog.Int(keyIdx, f.idx))
		sup.RestartChildren(child)
		system.Root.Send(f.job, &fetched{worker: child, idx: f.idx, outcome: Outcome{Err: errInternal, Msg: internalError}, took: took})
		return
	}
	st.cfg.Log.Error("actor failed: a bug in siftbatch", slog.String("actor", child.Id))
	sup.EscalateFailure(reason, message)
}

// failClosedStrategy is the guardian's strategy for the supervisor: a
// supervisor restarted would have lost the rotation, the caps and every
// job actor. Instead it is stopped with its children, and the engine fails
// the runner closed (Config.OnFail): live jobs failed "internal error",
// every later call answered as after Close.
type failClosedStrategy struct {
	cfg  *Config
	once sync.Once
}

// HandleFailure implements actor.SupervisorStrategy.
func (st *failClosedStrategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, _ any, _ any) {
	st.cfg.Log.Error("runner failed: a bug in siftbatch; it closes itself and fails its live jobs", slog.String("actor", child.Id))
	sup.StopChildren(child)
	st.once.Do(func() {
		if st.cfg.OnFail != nil {
			go st.cfg.OnFail()
		}
	})
}
