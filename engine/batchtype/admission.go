package batchtype

import "context"

// Admission admits a runner's new jobs against a cap wider than the runner:
// in a cluster, the caller's JobsPerCaller across every node, and its
// idempotent resubmits on any node (package engine/cluster's callers'
// grains). nil (the default): the runner admits on its own.
//
// A runner with an Admission asks it before it creates each job, after the
// checks of the submission itself (an invalid one, too many targets), and
// then applies its own rules as always (its idempotency, its caps, JobsTotal
// among them). Its methods may be called concurrently. Ended runs in the
// runner's observer, like the hooks: a panic there costs that one call.
type Admission interface {
	// Admit is asked before job id of caller, with the submission's
	// idempotency key (hex SHA-256 of the caller's name and its targets,
	// or of the caller's own key) and, for a key of the caller's own, body:
	// the hash of its targets (hex; "" for a derived key), to which the key
	// is bound while its job is reusable. It returns "" to go on and
	// create id; the id of an existing job to return instead (reused, on
	// this node or another); or an error: ErrCallerBusy,
	// ErrIdempotencyMismatch (the key is bound to a reusable job of
	// another body), or why it could not decide (the runner returns it,
	// wrapped). Asked again with the same id, it answers the same.
	Admit(ctx context.Context, caller, key, body, id string) (reuse string, err error)
	// Release tells that job id, admitted, was not created (the runner was
	// full, or refused it, or reused a job of its own).
	Release(caller, id string)
	// Reused tells that the runner, by its own idempotency rule, returned
	// its job id (submitted with key) instead of creating the one admitted
	// (which it Releases): so that the Admission reuses it too. body is the
	// hash of the job's targets when the key is the caller's own and the
	// runner found them the submission's; else "".
	Reused(caller, key, body, id string)
	// Ended tells that job id, created after its admission, is no longer
	// live, and its status (done, partial, failed, cancelled).
	Ended(caller, id, status string)
}
