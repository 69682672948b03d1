package engine

import (
	"errors"
	"sync/atomic"
)

// Refusals are the submits a runner has refused at a cap since it was
// made, by cap: what [Runner.Refusals] returns.
type Refusals struct {
	// CallerBusy counts [ErrCallerBusy]: the caller had JobsPerCaller live
	// jobs (on this runner, or across a cluster through its Admission).
	CallerBusy uint64
	// Busy counts [ErrBusy]: JobsTotal jobs were live, the runner's
	// global cap.
	Busy uint64
}

// refusals are a runner's counts of Refusals.
type refusals struct {
	callerBusy, busy atomic.Uint64
}

// count counts a submit refused with err, if err is a cap's.
func (r *refusals) count(err error) {
	switch {
	case errors.Is(err, ErrCallerBusy):
		r.callerBusy.Add(1)
	case errors.Is(err, ErrBusy):
		r.busy.Add(1)
	}
}

// Refusals returns the submits refused at a cap so far, by cap ([ErrBusy]
// and [ErrCallerBusy]). A reused job, an invalid submission or too many
// targets is not a refusal. Safe for concurrent use.
func (r *Runner) Refusals() Refusals {
	return Refusals{CallerBusy: r.refused.callerBusy.Load(), Busy: r.refused.busy.Load()}
}
