package batchtype

import "strings"

// JobStatus is a job's status word: the value of engine.Job.Status. It is
// another name for string (the field stays a string, the contract's type),
// so each constant goes wherever a string does. A job is stored queued,
// runs, and ends in one of four terminal statuses, which are final: a job
// never leaves them. Queued and running jobs are live: they count against
// the caps, and are never swept or evicted.
type JobStatus = string

// The job statuses, in the order of a job's life.
const (
	// StatusQueued is a stored job no worker has reached yet.
	StatusQueued JobStatus = "queued"
	// StatusRunning is a job whose first target has started.
	StatusRunning JobStatus = "running"
	// StatusDone is a job whose targets were all stored done.
	StatusDone JobStatus = "done"
	// StatusPartial is a job whose targets were stored, some done and some
	// failed.
	StatusPartial JobStatus = "partial"
	// StatusFailed is a job whose targets were all stored failed, or a live
	// job the runner ended: its Error says why ("restart" after a crash,
	// "shutdown" after engine.Runner.Close, "internal error" after the
	// runner failed).
	StatusFailed JobStatus = "failed"
	// StatusCancelled is a job ended by engine.Runner.Cancel; its later
	// targets stay pending.
	StatusCancelled JobStatus = "cancelled"
)

// JobStatuses returns every job status, in the order of a job's life: the
// live ones, then the terminal ones. The slice is the caller's.
func JobStatuses() []JobStatus {
	return []JobStatus{StatusQueued, StatusRunning, StatusDone, StatusPartial, StatusFailed, StatusCancelled}
}

// IsLive reports whether a job status is live: queued or running. A live
// job is counted by the caps, has an actor, and is never swept or evicted.
func IsLive(status JobStatus) bool { return status == StatusQueued || status == StatusRunning }

// IsTerminal reports whether a job status is terminal: done, partial,
// failed or cancelled. A word that is not a job status is neither live nor
// terminal.
func IsTerminal(status JobStatus) bool {
	switch status {
	case StatusDone, StatusPartial, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// TerminalStatus returns the status a job's outcomes give it once every
// one of its total targets is stored: all done → done, all failed → failed,
// a mix → partial. stored counts the targets stored done or failed, failed
// those stored failed. It returns "" while a target is still to be stored.
// A cancelled job keeps its status whatever its outcomes: apply this only to
// a job that is live or was ended by its outcomes.
func TerminalStatus(total, stored, failed int) JobStatus {
	switch {
	case stored < total:
		return ""
	case failed == 0:
		return StatusDone
	case failed >= total:
		return StatusFailed
	}
	return StatusPartial
}

// TargetState is a target's status word: the value of
// engine.TargetStatus.Status. Like [JobStatus] it is another name for
// string. A target is pending until a worker takes it, running while it is
// fetched and stored, and then done or failed for good.
type TargetState = string

// The target statuses, in the order of a target's life. The store keeps a
// target in flight pending (it has no outcome yet); only the runner knows
// it is running.
const (
	// TargetPending is a target not yet taken, or one that came back busy
	// and waits to be tried again, or one a cancel or a shutdown left.
	TargetPending TargetState = "pending"
	// TargetRunning is a target being fetched, or being stored.
	TargetRunning TargetState = "running"
	// TargetDone is a target stored with its result.
	TargetDone TargetState = "done"
	// TargetFailed is a target stored with an error (and maybe a hint).
	TargetFailed TargetState = "failed"
)

// TargetStates returns every target status, in the order of a target's
// life. The slice is the caller's.
func TargetStates() []TargetState {
	return []TargetState{TargetPending, TargetRunning, TargetDone, TargetFailed}
}

// HasOutcome reports whether a target status is an outcome: done or
// failed. A target with an outcome counts in its job's progress
// (engine.Job.TargetsDone) and never changes again.
func HasOutcome(state TargetState) bool { return state == TargetDone || state == TargetFailed }

// WillNotRun reports whether a target will never run: it reads pending
// and its job has ended (cancelled, or failed by a restart, a shutdown or
// the runner's failure: a job whose targets all ran has none pending).
// The contract keeps such a target pending; [NotRunHint] says why it will
// not run, and [NotRun] counts them from a job's summary.
func WillNotRun(job JobStatus, state TargetState) bool {
	return state == TargetPending && IsTerminal(job)
}

// NotRun returns how many targets of a job will never run: for an ended
// job, those without a stored outcome (total − stored, which is 0 for a
// job that ended by its outcomes); 0 for a live one. So stored + NotRun
// is the job's total once it has ended. A target a cancel found in flight
// is counted until its outcome is stored, an instant later.
func NotRun(job JobStatus, total, stored int) int {
	if !IsTerminal(job) || stored >= total {
		return 0
	}
	return total - stored
}

// TargetHint returns the hint a target reads where every hint is given
// (the API, and so MCP, the Go client and the CLI): the stored hint if
// there is one, else [NotRunHint], else [FailureHint]. job and jobError
// are its job's status and error, state, err and hint the target's status,
// error text and stored hint.
func TargetHint(job JobStatus, jobError string, state TargetState, err, hint string) string {
	if hint != "" {
		return hint
	}
	if h := NotRunHint(job, jobError, state); h != "" {
		return h
	}
	return FailureHint(job, state, err)
}

// NotRunHint returns the hint of a target that will never run
// ([WillNotRun]): that it will not, and why (the job was cancelled, the
// server restarted or shut down, the runner failed); "" for any other
// target. The engine's reads give it to such a target (which has no
// stored hint: it has no outcome), so that every view reads the same.
func NotRunHint(job JobStatus, jobError string, state TargetState) string {
	if !WillNotRun(job, state) {
		return ""
	}
	const again = " before this target started, and jobs never resume: submit it in a new job to fetch it"
	switch {
	case job == StatusCancelled:
		return "not run: the job was cancelled before this target started: submit it in a new job to fetch it"
	case jobError == "restart":
		// A target in flight at the crash is pending in the store as one
		// never started is: the record cannot tell them apart, so the hint
		// says only what holds for both.
		return "not run: the server restarted (it had stopped without a clean shutdown) before this target was stored, and jobs never resume: submit it in a new job to fetch it"
	case jobError == "shutdown":
		return "not run: the server shut down" + again
	case jobError == "internal error":
		return "not run: the runner stopped on an internal error" + again
	case jobError != "":
		return "not run: the job ended (" + jobError + ")" + again
	}
	return "not run: the job ended" + again
}

// FailureHint returns the hint the API gives a target stored failed
// without a hint of its own (a FetchFunc that returned a plain error, a
// panic, a busy site past RetryFor), by its error text err and its job's
// status job: a cancel that stopped its fetch, busy too long, a bug in the
// server, a stop, or else a general one; "" for a target that has not
// failed. The engine stores and reads such a failure without a hint (its
// contract); the API adds this one for the agent.
func FailureHint(job JobStatus, state TargetState, err string) string {
	switch {
	case state != TargetFailed:
		return ""
	case job == StatusCancelled && (err == "cancelled" || strings.HasSuffix(err, "context canceled")):
		return "the job was cancelled while this target was fetched: submit it in a new job to fetch it"
	case strings.HasPrefix(err, "retry later"):
		return "the site kept answering busy (429 or 503) for longer than the server retries; try again later in a new job"
	case err == "internal error":
		return "the fetch failed on a bug in the server, not on the page; try again in a new job, and report it if it persists"
	case err == "shutdown" || err == "restart" || strings.HasPrefix(err, "fetch stopped"):
		return "the server stopped while this target was fetched; submit the job again"
	}
	return "the fetch failed; check the URL, or try again in a new job"
}
