package engine

import (
	"context"
	"time"
)

// Caller is who submitted a job. Name keys idempotency and the per-caller cap
// ([Config.JobsPerCaller]). The value is handed to the [FetchFunc] and is never
// persisted: a job's actor holds it in memory only.
type Caller struct {
	Name      string
	Workspace string
	KeySHA256 string
}

// Options are the per-target fetch options, passed through to the [FetchFunc]
// untouched. The runner stores them and never interprets them.
type Options struct {
	Mode     string `json:"mode,omitempty"`
	Question string `json:"question,omitempty"`
	Pages    string `json:"pages,omitempty"`
	Grep     string `json:"grep,omitempty"`
	JQ       string `json:"jq,omitempty"`
	Context  *bool  `json:"context,omitempty"` // nil: the fetch's own default
	Recover  bool   `json:"recover,omitempty"`
}

// Target is one unit of work in a job: a URL and its options.
type Target struct {
	URL     string  `json:"url"`
	Options Options `json:"options"`
}

// Result is a finished target: the fetched content, and every other field in
// Meta. It is stored JSON-encoded.
type Result struct {
	Content string         `json:"content"`
	Meta    map[string]any `json:"meta,omitempty"`
}

// TargetError is a failure with a hint for the agent. A [FetchFunc] returns it
// (possibly wrapped) to have Msg and Hint stored with the failed target. Status
// is the HTTP status the same failure gets from a single fetch; the runner only
// passes it to [Hooks.Target].
type TargetError struct {
	Status int
	Msg    string
	Hint   string
}

// Error returns Msg; "" for a nil *TargetError.
func (e *TargetError) Error() string {
	if e == nil {
		return ""
	}
	return e.Msg
}

// FetchFunc does one target for the caller that submitted the job. It runs on a
// worker, one call at a time per worker, under a context that [Runner.Close]
// cancels. Return an error wrapping [ErrRetryLater] when the target was only
// busy; return a [*TargetError] to store a message and a hint. A panic is
// isolated: the target is stored failed with the text "internal error".
type FetchFunc func(ctx context.Context, c *Caller, t Target) (Result, error)

// Job is a job's summary as [Runner.Job] and [Runner.Status] report it.
type Job struct {
	ID           string
	Caller       string // Caller.Name
	Status       string // a [JobStatus]: queued | running | done | partial | failed | cancelled
	Error        string
	TargetsTotal int
	// TargetsDone counts the targets whose outcome is stored, done or
	// failed: the job's progress. TargetsDone − TargetsFailed succeeded.
	TargetsDone   int
	TargetsFailed int   // targets stored failed
	CreatedAt     int64 // unix seconds
	// StartedAt is when the job's first target went to a worker, in unix
	// seconds by [Config.Now]; 0 while queued, and for a job stored before
	// the timings were (unknown).
	StartedAt int64
	// EndedAt is when the job became terminal (done, partial, failed or
	// cancelled), in unix seconds by [Config.Now]; 0 while live, and for a
	// job stored before the timings were (unknown).
	EndedAt int64
	// Duration is how long the job ran, from StartedAt to EndedAt at the
	// store's precision (nanoseconds, not whole seconds); 0 while live,
	// and when either is unknown.
	Duration time.Duration
}

// TargetStatus is one target of a job as [Runner.Status] reports it.
type TargetStatus struct {
	Idx    int
	URL    string
	Status string // a [TargetState]: pending | running | done | failed
	Result *Result
	Error  string
	// Hint says what to do about the target: the hint stored with a
	// failure; for a pending target of a job that has ended (a cancel, a
	// restart, a shutdown), that it will not run and why ([NotRunHint]).
	Hint string
	// Options are the options the target was submitted with.
	Options Options
	// Duration is how long the target's fetch took, by [Config.Now] (its
	// last try, for a target answered busy before); 0 while pending or
	// running, and for an outcome stored before the timings were
	// (unknown).
	Duration time.Duration
	// StoredAt is when the target's outcome was stored, in unix seconds by
	// [Config.Now]; 0 while pending or running.
	StoredAt int64
}
