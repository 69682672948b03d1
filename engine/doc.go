// Package engine is siftbatch's public API: a batch job runner that lives
// inside one Go process.
//
// A caller hands a [Runner] up to [Config.TargetsPerJob] targets (URLs with
// options) as one job; the runner fetches them one at a time per job, fairly
// across jobs, with [Config.Workers] workers, through an injected
// [FetchFunc]; it stores every result as it lands, and the caller reads them
// later with [Runner.Status]. Jobs are stored in a Badger store (package
// persistence: [Open] opens one for the runner, [New] takes one the caller
// opened) and run by actors (package actors); neither shows through this
// API otherwise.
//
// The runner never interprets a target: how a URL is fetched is the
// FetchFunc's business. A FetchFunc returns a [Result], an error wrapping
// [ErrRetryLater] when the target was only busy (it is tried again after
// [Config.RetryWait], for up to [Config.RetryFor]), or a [*TargetError] with
// a message and a hint for the agent. A panic in it is isolated: the target
// is stored failed with the error "internal error" and the job goes on.
//
// A short program:
//
//	r, err := engine.Open("", fetch, engine.Config{}, slog.Default()) // "" in memory; or a directory
//	if err != nil {
//		return err
//	}
//	defer r.Close() // closes the store too
//	id, _, err := r.Submit(ctx, &engine.Caller{Name: "agent"}, "", []engine.Target{{URL: "https://example.com"}})
//	…
//	job, targets, ok := r.Status(id)
//
// Jobs run in the background and never resume: a job that was live when its
// process stopped reads failed, with the error "restart" (after a crash) or
// "shutdown" (after [Runner.Close]). Finished jobs stay readable for
// [Config.TTL] after their lease, and the oldest are deleted once the bytes
// stored for all jobs (every row: specs, errors, results) pass
// [Config.MaxBytes].
package engine

// reexport.go re-exports package batchtype's names with their docs.
//go:generate env SIFTBATCH_UPDATE_REEXPORTS=1 go test -count=1 -run TestReexport_MatchesBatchtype ./internal/reexport
