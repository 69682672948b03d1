package batchtype

import "errors"

// The errors the runner returns. Test for them with [errors.Is].
var (
	// ErrNoTargets is returned by engine.Runner.Submit for an empty target list.
	ErrNoTargets = errors.New("no targets")
	// ErrTooManyTargets is returned by engine.Runner.Submit for more than
	// [Config.TargetsPerJob] targets.
	ErrTooManyTargets = errors.New("too many targets")
	// ErrCallerBusy is returned by engine.Runner.Submit when the caller already has
	// [Config.JobsPerCaller] live jobs.
	ErrCallerBusy = errors.New("busy")
	// ErrBusy is returned by engine.Runner.Submit when [Config.JobsTotal] jobs are
	// live in all.
	ErrBusy = errors.New("jobs busy")
	// ErrRetryLater is wrapped by a engine.FetchFunc when the target was only busy
	// (a 429 or 503): the target is tried again after [Config.RetryWait].
	ErrRetryLater = errors.New("retry later")
	// ErrInvalid is returned by engine.Runner.Submit, wrapped with the reason, for a
	// nil caller, an empty caller name, or a target with an empty URL or with
	// a URL or an option that is not valid UTF-8.
	ErrInvalid = errors.New("invalid submission")
	// ErrClosed is returned by engine.Runner.Submit after engine.Runner.Close.
	ErrClosed = errors.New("runner closed")
	// ErrFailed is wrapped by engine.Runner.Err once the runner's own code failed
	// past what its supervision could contain: the runner closed itself, its
	// live jobs failed with "internal error".
	ErrFailed = errors.New("runner failed")
	// ErrNotFound is returned by engine.Runner.Wait for an id that is not stored,
	// or whose job has expired.
	ErrNotFound = errors.New("job not found")
	// ErrNoAdmission is wrapped by engine.Runner.Submit when its Config's
	// Admission could not decide (a cluster whose caller's grain could not
	// be reached in time): nothing was created; submit again later.
	ErrNoAdmission = errors.New("admission unavailable")
	// ErrCancelled is the cause (context.Cause) of a fetch's context once
	// its job was cancelled (engine.Runner.Cancel) while the fetch ran.
	ErrCancelled = errors.New("job cancelled")
	// ErrIdempotencyMismatch is returned by engine.Runner.SubmitWith when its
	// idempotency key is bound to a reusable job of other targets: the
	// caller sent the same key with another body.
	ErrIdempotencyMismatch = errors.New("idempotency key reused with other targets")
	// ErrDiskFull is returned by engine.Runner.Submit while the store's
	// file system has less free space than [Config.DiskReserve] (nothing
	// is created; submit again once there is room: the runner's running
	// jobs are held meanwhile, and go on by themselves), and wrapped by a
	// store write that failed with ENOSPC; by engine.Runner.Submit too
	// while the jobs a crash left live cannot be failed in a store opened
	// on a full disk; and by engine.Runner.TryCancel on a durable runner
	// whose disk has no room to store the cancel (nothing changed).
	ErrDiskFull = errors.New("disk full")
	// ErrDiskReserve is returned by engine.New when [Config.DiskReserve]
	// is as large as the store's file system less the store's own files
	// (all it could ever have free): it could never be kept, and every
	// submit would answer ErrDiskFull for ever.
	ErrDiskReserve = errors.New("disk reserve not smaller than the room the store's file system can have")
	// ErrUnavailable is wrapped by engine.Runner.Lookup and engine.Runner.Wait
	// when the store cannot read now (Badger down after a failed sync that
	// it could not reopen from): the job may well exist; ask again later.
	// The error wraps ErrDiskFull too when the disk is full.
	ErrUnavailable = errors.New("store unavailable")
)
