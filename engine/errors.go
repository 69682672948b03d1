package engine

import "github.com/sift/batch/engine/batchtype"

// The errors the engine returns, defined once in package batchtype (the
// actors return them too). Test for them with [errors.Is].
var (
	// ErrNoTargets is returned by [Runner.Submit] for an empty target list.
	ErrNoTargets = batchtype.ErrNoTargets
	// ErrTooManyTargets is returned by [Runner.Submit] for more than
	// [Config.TargetsPerJob] targets.
	ErrTooManyTargets = batchtype.ErrTooManyTargets
	// ErrCallerBusy is returned by [Runner.Submit] when the caller already has
	// [Config.JobsPerCaller] live jobs.
	ErrCallerBusy = batchtype.ErrCallerBusy
	// ErrBusy is returned by [Runner.Submit] when [Config.JobsTotal] jobs are
	// live in all.
	ErrBusy = batchtype.ErrBusy
	// ErrRetryLater is wrapped by a [FetchFunc] when the target was only busy
	// (a 429 or 503): the target is tried again after [Config.RetryWait].
	ErrRetryLater = batchtype.ErrRetryLater
	// ErrInvalid is returned by [Runner.Submit], wrapped with the reason, for a
	// nil caller, an empty caller name, or a target with an empty URL or with
	// a URL or an option that is not valid UTF-8.
	ErrInvalid = batchtype.ErrInvalid
	// ErrClosed is returned by [Runner.Submit] after [Runner.Close].
	ErrClosed = batchtype.ErrClosed
	// ErrFailed is wrapped by [Runner.Err] once the runner's own code failed
	// past what its supervision could contain: the runner closed itself, its
	// live jobs failed with "internal error".
	ErrFailed = batchtype.ErrFailed
	// ErrNotFound is returned by [Runner.Wait] for an id that is not stored,
	// or whose job has expired.
	ErrNotFound = batchtype.ErrNotFound
	// ErrNoAdmission is wrapped by [Runner.Submit] when the Config's
	// Admission could not decide (in a cluster, the caller's grain could
	// not be reached in time): nothing was created; submit again later.
	ErrNoAdmission = batchtype.ErrNoAdmission
	// ErrCancelled is the cause ([context.Cause]) of a [FetchFunc]'s
	// context once its job was cancelled ([Runner.Cancel]) while it ran:
	// the fetch should stop and return.
	ErrCancelled = batchtype.ErrCancelled
)
