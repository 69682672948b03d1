package batchtype

import "time"

// Hooks observe the runner, for metrics. A nil field is skipped. Hooks are
// user code: they run one at a time on a goroutine of their own (an actor
// that only runs hooks), never inside the runner's own actors, and should
// not block (a slow hook delays only the hooks after it).
//
// Each hook is called after the change it reports (Submit has returned,
// the target or the job's end is stored), so a read can show a change a
// moment before its hook has run; the calls caused by one job come in the
// order of its changes. Once engine.Runner.Close (or Shutdown) returns,
// every hook has run, unless Close gave up on a hook that blocks.
//
// A hook may call engine.Runner.Close or Shutdown (to stop on the first
// failed job, say): the runner stops, and Close returns without waiting
// for the hooks, which would wait for itself; the hook calling it and the
// hooks queued after it run after Close has returned.
//
// A hook that panics (or calls runtime.Goexit) costs that one call: it is
// logged at Error with the hook's name and the job id, never the panic
// value, counted in engine.Runner.HookPanics, and the runner goes on.
type Hooks struct {
	Job        func(outcome string)                              // created, reused, done, partial, failed, cancelled
	Target     func(err error, d time.Duration, resultBytes int) // once per stored target; err nil on success
	JobSeconds func(d time.Duration)                             // submit to terminal, once per job
	Depth      func(live int)                                    // live jobs, after every change
	Inflight   func(n int)                                       // targets being fetched, after every change
}
