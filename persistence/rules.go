package persistence

import (
	"time"

	"github.com/sift/batch/engine/batchtype"
)

// The rules of the domain, as pure functions on the record types: what a
// job's outcomes make of it, when it has expired, when a Submit may reuse it.
// They are written once, here; the actors, the engine and the store's own
// readers call them and do not derive them again. Each has one
// table-driven test in rules_test.go.

// IsLive reports whether a job status is queued or running: it is
// [batchtype.IsLive], where the status words and their rules are defined.
// A live job is counted by the caps, has an actor, and is never swept or
// evicted.
func IsLive(status string) bool { return batchtype.IsLive(status) }

// TerminalStatus is the status the job's outcomes give it once every target
// is stored ([batchtype.TerminalStatus] of its counts): all done → done,
// all failed → failed, a mix → partial. It returns "" while a target is
// still to be stored. A cancelled job keeps its status whatever its
// outcomes: callers apply this only to a job that is live, or was ended by
// its outcomes (done, partial, failed).
func (j *JobRecord) TerminalStatus() string {
	return batchtype.TerminalStatus(j.TargetsTotal, j.TargetsDone, j.TargetsFailed)
}

// CountOutcome counts one stored outcome of status (done or failed) in the
// job's progress: TargetsDone, TargetsFailed, ResultBytes (size: the
// result's length), and the lease, which a stored outcome moves to the
// time it was stored (stored, unix nanoseconds) if that is later. A
// pending or running target counts nothing: it has no outcome yet.
func (j *JobRecord) CountOutcome(status string, size, stored int64) {
	if !batchtype.HasOutcome(status) {
		return
	}
	j.TargetsDone++
	if status == TargetFailed {
		j.TargetsFailed++
	}
	j.ResultBytes += size
	j.Lease = max(j.Lease, stored)
}

// Recount sets the job's progress from its targets, as [JobRecord.CountOutcome]
// counts each: the count of an unsettled job, whose row is not rewritten per
// target (its outcome rows are the store's record of its progress).
func (j *JobRecord) Recount(ts []TargetRecord) {
	j.TargetsDone, j.TargetsFailed, j.ResultBytes = 0, 0, 0
	for i := range ts {
		j.CountOutcome(ts[i].Status, ts[i].ResultSize, ts[i].Stored)
	}
}

// UncountResult turns one counted done outcome of size result bytes into a
// failed one (a result the store would not take), and a job its outcomes
// had ended done or partial takes the status they give it now.
func (j *JobRecord) UncountResult(size int64) {
	j.ResultBytes -= size
	j.TargetsFailed++
	if j.Status == StatusDone || j.Status == StatusPartial {
		j.Status = j.TerminalStatus()
	}
}

// Expired reports whether a lease (unix nanoseconds) has run out at now:
// lease + ttl ≤ now. A settled job whose lease has run out is gone for
// readers, and the sweep deletes it.
func Expired(lease int64, ttl time.Duration, now int64) bool {
	return lease+int64(ttl) <= now
}

// Expired reports whether the job's lease has run out at now (see
// [Expired]); it says nothing of whether the job is live.
func (j *JobRecord) Expired(ttl time.Duration, now int64) bool {
	return Expired(j.Lease, ttl, now)
}

// Reusable reports whether a Submit with the job's idempotency key may be
// answered with this job: it is queued, running, done or partial, and its
// lease has not run out at now. Failed and cancelled jobs are never reused.
func (j *JobRecord) Reusable(ttl time.Duration, now int64) bool {
	switch j.Status {
	case StatusQueued, StatusRunning, StatusDone, StatusPartial:
		return !j.Expired(ttl, now)
	}
	return false
}
