package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/persistence"
)

// The protocol, one way where it can be (docs/ARCHITECTURE.md draws it,
// with the states):
//
//	engine → supervisor: Submit, CancelJob, Drain
//	supervisor → job:    dispatch (a worker is yours for one target);
//	                     CancelJob (forwarded: the engine's future gets the
//	                     answer); shutdownJob (the drain)
//	job → worker:        fetch (one target)
//	worker → job:        fetched (its outcome, or abandoned at shutdown)
//	job → store:         SaveOutcomeRetried / SaveTargetRetried (group commit)
//	job → store:         SaveJobRetried (its row: running, cancelled,
//	                     settled, shutdown; waits for the first answer)
//	store → job:         targetWritten (the write has committed, is being
//	                     retried by the store's writer, or was refused);
//	                     lateWritten (a retried write is written, or given up)
//	job → supervisor:    jobDone (how the job stands now, its life: after
//	                     a stored target, a busy answer, a cancel, a late
//	                     answer that settles it; it gives the worker back,
//	                     if it holds one)
//	timer → supervisor:  retryReady; diskCheck (while the store's disk is
//	                     below its reserve no target starts: see dispatch)
//	supervisor, job → maintainer: maintain (sweep after a Submit; evict
//	                     after a write that adds bytes or settles a job)
//	timer → maintainer:  maintainTick (the periodic sweep)
//	any → observer:      hookEvent (one hook call: see observer.go)
//
// A worker is the job's from dispatch until its target is stored: a job's
// next target never starts before the last is stored, and the rotation's
// order needs no other rule. Reads send no message: each job actor
// publishes a Snapshot in Views. A worker's panic reaches the supervisor's
// strategy as a failure carrying the fetch; the strategy answers the job
// with an "internal error" fetched.

// Submit asks the supervisor to create a job, after the idempotency check
// and the caps. The reply is a [*SubmitReply].
type Submit struct {
	Job     persistence.JobRecord // status queued, Created = Lease = now
	Targets []persistence.TargetRecord
	Payload any // handed to FetchFunc with each target; kept in memory only
	// Ctx is the submit's context: with a tracer, the job's span is a
	// child of its span (the caller's trace). nil: none.
	Ctx context.Context
}

// SubmitReply answers a [Submit]: the job's id and whether an existing job
// was reused; or why it was refused (Refused: batchtype.ErrTooManyTargets,
// ErrCallerBusy, ErrBusy or ErrClosed, in the order the rules check them);
// or the store's error.
type SubmitReply struct {
	ID      string
	Reused  bool
	Refused error
	Err     error
}

// writeHeld tells a job (through the supervisor) that the store holds its
// write in flight until the disk lets it be written and synced (a durable
// store: Store.SetHeldHook): err is why.
type writeHeld struct {
	id  string
	err error
}

// CancelJob cancels a live job; the reply is a bool (false when the job is
// not live), or an error: on a durable store, the cancel could not be
// stored now (the disk full, or failing) and nothing changed.
type CancelJob struct{ ID string }

// Drain stops the supervisor taking work, waits for the targets in flight to
// be stored, and fails every live job with "shutdown". The reply is a
// [*Drained].
type Drain struct{}

// Drained answers a [Drain].
type Drained struct{ Jobs int }

// dispatch tells a job that worker is free for its next target;
// busySince is when that target was first answered busy (0: never), as
// the job last reported it.
type dispatch struct {
	worker    *actor.PID
	busySince int64
}

// fetch asks a worker to do one target of a job.
type fetch struct {
	job     *actor.PID
	jobID   string
	idx     int
	payload any
	ctx     context.Context // the fetch's: FetchContext's, also cancelled with the job; nil: FetchContext
}

// fetched is one target's outcome, sent to its job; abandoned: the runner
// gave up on the fetch at shutdown, and the target stays pending.
type fetched struct {
	worker  *actor.PID
	idx     int
	outcome Outcome
	took    time.Duration
	// clocked is took by Config.Now: what is stored as the target's
	// fetch time.
	clocked   time.Duration
	abandoned bool
}

// jobDone says how a job stands (its life: life.go), and frees a worker
// (nil: none); lease is the job's lease as its actor holds it, busySince
// when its next target was first answered busy (0: never).
type jobDone struct {
	id        string
	worker    *actor.PID
	life      life
	lease     int64
	busySince int64
}

// targetWritten is the store's first answer to a job's target write:
// committed (nil), being retried by the store's writer (ErrRetrying), or
// refused.
type targetWritten struct{ err error }

// lateWritten is the store's late answer to the oldest of a job's writes
// its writer was retrying: written (nil), or given up.
type lateWritten struct{ err error }

// writtenOK is the targetWritten of a write that committed; never changed.
var writtenOK = &targetWritten{}

// shutdownJob fails a live job with "shutdown"; the reply is a bool.
type shutdownJob struct{}

// retryReady says a waiting job may be tried again.
type retryReady struct{ id string }

// diskCheck says the store's disk may have room again (a timer the
// supervisor set while it held the jobs for it).
type diskCheck struct{}

// The runner's own messages, which move targets along, go ahead of the API's
// requests in a mailbox (see mailbox). So does Drain: Close queues it before
// it cancels the fetches, and no target their return frees may start
// before it. And so does CancelJob: a dispatch the supervisor sends a job
// after it forwarded a Cancel must not overtake it.
func (*Drain) urgent()         {}
func (*CancelJob) urgent()     {}
func (*dispatch) urgent()      {}
func (*fetch) urgent()         {}
func (*fetched) urgent()       {}
func (*jobDone) urgent()       {}
func (*targetWritten) urgent() {}
func (*lateWritten) urgent()   {}
func (*retryReady) urgent()    {}
func (*diskCheck) urgent()     {}
