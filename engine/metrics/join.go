package metrics

import (
	"time"

	"github.com/sift/batch/engine"
)

// Join returns Hooks that call each of hooks' non-nil fields in turn, in
// the order given: the metrics' hooks and an embedder's own, for instance.
// A field nil in every one of hooks is nil in the result. Like any hook,
// the joined ones run on the runner's goroutines and must not block; if
// one panics, the ones after it are skipped for that call (the runner
// counts the panic in [engine.Runner.HookPanics]).
func Join(hooks ...engine.Hooks) engine.Hooks {
	var (
		job        []func(string)
		target     []func(error, time.Duration, int)
		jobSeconds []func(time.Duration)
		depth      []func(int)
		inflight   []func(int)
	)
	for _, h := range hooks {
		if h.Job != nil {
			job = append(job, h.Job)
		}
		if h.Target != nil {
			target = append(target, h.Target)
		}
		if h.JobSeconds != nil {
			jobSeconds = append(jobSeconds, h.JobSeconds)
		}
		if h.Depth != nil {
			depth = append(depth, h.Depth)
		}
		if h.Inflight != nil {
			inflight = append(inflight, h.Inflight)
		}
	}
	var out engine.Hooks
	if len(job) > 0 {
		out.Job = func(outcome string) {
			for _, f := range job {
				f(outcome)
			}
		}
	}
	if len(target) > 0 {
		out.Target = func(err error, d time.Duration, n int) {
			for _, f := range target {
				f(err, d, n)
			}
		}
	}
	if len(jobSeconds) > 0 {
		out.JobSeconds = func(d time.Duration) {
			for _, f := range jobSeconds {
				f(d)
			}
		}
	}
	if len(depth) > 0 {
		out.Depth = func(n int) {
			for _, f := range depth {
				f(n)
			}
		}
	}
	if len(inflight) > 0 {
		out.Inflight = func(n int) {
			for _, f := range inflight {
				f(n)
			}
		}
	}
	return out
}
