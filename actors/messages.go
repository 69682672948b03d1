package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/persistence"
)

// The protocol, one way where it can be:
//
//	engine → supervisor: Submit, CancelJob, Drain
//	supervisor → job:    dispatch (a worker is free for you); CancelJob
//	                     (forwarded: the engine's future gets the answer);
//	                     shutdownJob
//	job → worker:        fetch (one target)
//	worker → job:        fetched (its outcome, or abandoned at shutdown)
//	job → supervisor:    jobDone (the worker is free, and the job's target is
//	                     being stored; or the job is ready, waits for a retry,
//	                     or has ended), jobEnded (cancelled)
//	store → job:         targetWritten (a target's write has committed)
//	timer → supervisor:  retryReady, sweepTick
//	any → observer:      hookEvent (one hook call: see observer.go)
//
// Reads send no message: each job actor publishes a Snapshot in Views.
// A worker's panic reaches the supervisor's strategy as a failure carrying
// the fetch; the strategy answers the job with an "internal error" fetched.

// Submit asks the supervisor to create a job, after the idempotency check
// and the caps. The reply is a [*SubmitReply].
type Submit struct {
	Job     persistence.JobRecord // status queued, Created = Lease = now
	Targets []persistence.TargetRecord
	Payload any // handed to FetchFunc with each target; kept in memory only
}

// Refusal says why a Submit was refused.
type Refusal int

// The refusals, in the order the rules check them.
const (
	Accepted Refusal = iota
	RefusedTooManyTargets
	RefusedCallerBusy
	RefusedBusy
	RefusedClosed
)

// SubmitReply answers a [Submit]: the job's id and whether an existing job
// was reused, or why it was refused, or the store's error.
type SubmitReply struct {
	ID      string
	Reused  bool
	Refused Refusal
	Err     error
}

// CancelJob cancels a live job; the reply is a bool: false when the job is
// not live.
type CancelJob struct{ ID string }

// Drain stops the supervisor taking work, waits for the targets in flight to
// be stored, and fails every live job with "shutdown". The reply is a
// [*Drained].
type Drain struct{}

// Drained answers a [Drain].
type Drained struct{ Jobs int }

// dispatch tells a job that worker is free for its next target.
type dispatch struct{ worker *actor.PID }

// fetch asks a worker to do one target of a job.
type fetch struct {
	job     *actor.PID
	jobID   string
	idx     int
	payload any
}

// fetched is one target's outcome, sent to its job; abandoned: the runner
// gave up on the fetch at shutdown, and the target stays pending.
type fetched struct {
	worker    *actor.PID
	idx       int
	outcome   Outcome
	took      time.Duration
	abandoned bool
}

// jobState is what a job tells the supervisor after a target.
type jobState int

const (
	jobReady   jobState = iota // has a pending target, ready now
	jobWaiting                 // its next target was busy: try after RetryWait
	jobSettled                 // terminal, nothing in flight: stop the actor
	// jobUnsaved: terminal, nothing in flight, but a write failed: no longer
	// live, but the actor stays until it has written its rows (a jobEnded
	// with settled follows).
	jobUnsaved
	// jobStoring: the worker is free and the target is being stored. The
	// job keeps its place in the rotation, but is not dispatched until
	// another jobDone (without a worker) says how it stands.
	jobStoring
)

// jobDone frees a worker (nil: none) and says how its job stands; lease is
// the job's lease once a target has been stored (0: unchanged), status its
// status ("" where it does not matter).
type jobDone struct {
	id     string
	worker *actor.PID
	state  jobState
	lease  int64
	status string
}

// jobEnded says a job was cancelled, or that an unsaved job has written its
// rows; settled is false while a target of it is still in flight (a jobDone
// follows) or its rows are not yet written.
type jobEnded struct {
	id      string
	settled bool
}

// targetWritten is the outcome of a job's asynchronous target write.
type targetWritten struct{ err error }

// writtenOK is the targetWritten of a write that committed; never changed.
var writtenOK = &targetWritten{}

// shutdownJob fails a live job with "shutdown"; the reply is a bool.
type shutdownJob struct{}

// flushTick has a job that has ended write again what a failed write left
// unwritten.
type flushTick struct{}

// retryReady says a waiting job may be tried again.
type retryReady struct{ id string }

// sweepTick starts a sweep of expired jobs.
type sweepTick struct{ periodic bool }

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
func (*jobEnded) urgent()      {}
func (*targetWritten) urgent() {}
func (*retryReady) urgent()    {}
