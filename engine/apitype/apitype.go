// Package apitype holds the batch API's JSON shapes, defined once: a job
// ([Job]), its targets ([TargetStatus]) and a result ([Result]), as GET
// /v1/batch/{id} answers them (package github.com/sift/batch/engine/httpapi
// writes them), as the API's Go client reads them (package
// github.com/sift/batch/engine/client re-exports them under the same
// names), and as the MCP tools batch_status, batch_wait and batch_list
// answer them (package github.com/sift/batch/engine/mcpserver). So a job
// has one shape everywhere, and a field added here is added to all three.
// It exists only to break the import cycle between them, as river's
// rivertype does; import it through one of those packages.
//
// The API's own words hold: TargetsDone counts the targets whose outcome
// is stored, done or failed; a target whose Status is "done" succeeded.
package apitype

import (
	"time"

	"github.com/sift/batch/engine/batchtype"
)

// Job is a job: the API's {"id","status","error","targets_total",
// "targets_done","targets_failed","created_at","started_at","ended_at",
// "targets"} (and "caller" in a list by caller).
type Job struct {
	ID string `json:"id" jsonschema:"the job's id"`
	// Status is queued, running, done, partial, failed or cancelled.
	Status string `json:"status" jsonschema:"queued or running (live), or done, partial, failed or cancelled (ended)"`
	// Error says why a failed job failed ("shutdown", "restart").
	Error        string `json:"error,omitempty" jsonschema:"why a failed job failed: restart (the server crashed) or shutdown, and then its targets that never ran read pending, with a hint"`
	TargetsTotal int    `json:"targets_total" jsonschema:"how many targets the job has"`
	// TargetsDone counts the targets whose outcome is stored, done or
	// failed: the job's progress.
	TargetsDone   int `json:"targets_done" jsonschema:"targets whose outcome is stored, done or failed: the job's progress"`
	TargetsFailed int `json:"targets_failed" jsonschema:"targets stored failed"`
	// CreatedAt is the job's creation, in unix seconds.
	CreatedAt int64 `json:"created_at" jsonschema:"when the job was created, unix seconds"`
	// StartedAt is when its first target went to a worker, EndedAt when
	// it ended, in unix seconds; 0 while not known (queued, live, or a
	// job stored by a server before them).
	StartedAt int64 `json:"started_at,omitempty" jsonschema:"when the job's first target went to a worker, unix seconds; absent while queued"`
	EndedAt   int64 `json:"ended_at,omitempty" jsonschema:"when the job ended, unix seconds; absent while live"`
	// DurationMS is how long it ran, from its start to its end, in
	// milliseconds rounded up; 0 while not known.
	DurationMS int64 `json:"duration_ms,omitempty" jsonschema:"how long the job ran, in milliseconds; absent while live or unknown"`
	// Caller is the job's caller, in a list by caller (an admin's) only.
	Caller string `json:"caller,omitempty" jsonschema:"the job's caller, in an admin's list by caller only"`
	// Targets are the job's targets, without results (GET
	// /v1/batch/{id}); nil in a list.
	Targets []TargetStatus `json:"targets,omitempty" jsonschema:"the job's targets, in order, without their results; absent in a list"`
}

// Ended reports whether the job has ended: done, partial, failed or
// cancelled. An ended job never changes.
func (j Job) Ended() bool { return batchtype.IsTerminal(j.Status) }

// Created returns CreatedAt as a time.
func (j Job) Created() time.Time { return time.Unix(j.CreatedAt, 0) }

// NotRun returns how many of the job's targets will never run: those an
// ended job (cancelled, or failed by a restart or a shutdown) left
// without an outcome ([batchtype.NotRun]). TargetsDone + NotRun is
// TargetsTotal once the job has ended.
func (j Job) NotRun() int { return batchtype.NotRun(j.Status, j.TargetsTotal, j.TargetsDone) }

// TargetStatus is a job's target: the API's {"idx","url","status",
// "error","hint","duration_ms","result"}.
type TargetStatus struct {
	Idx int    `json:"idx" jsonschema:"the target's index in the job, from 0"`
	URL string `json:"url" jsonschema:"the URL fetched"`
	// Status is pending, running, done (it succeeded) or failed.
	Status string `json:"status" jsonschema:"pending, running, done (it succeeded) or failed"`
	// Error and Hint say why a failed target failed, and what to do; a
	// pending target of an ended job has a Hint that says it will not run,
	// and why.
	Error string `json:"error,omitempty" jsonschema:"why the target failed"`
	Hint  string `json:"hint,omitempty" jsonschema:"what to do about it; for a pending target of an ended job, that it will not run and why"`
	// DurationMS is a stored target's fetch time in milliseconds,
	// rounded up; 0 while pending or running, or not known.
	DurationMS int64 `json:"duration_ms,omitempty" jsonschema:"the fetch's time in milliseconds, once stored"`
	// Result is a done target's result, where the answer has results
	// (GET /v1/batch/{id}/{idx}, ?results=1); nil otherwise.
	Result *Result `json:"result,omitempty" jsonschema:"a done target's result, where the answer has results"`
}

// Result is what a done target fetched: the API's {"content","meta"}, and
// "range" in an answer of a range of the content.
type Result struct {
	Content string         `json:"content" jsonschema:"the fetched content"`
	Meta    map[string]any `json:"meta,omitempty" jsonschema:"the result's meta: content type, truncation and the like"`
	// Range says where Content lies in the whole content, in an answer of
	// a range of it (GET /v1/batch/{id}/{idx}?offset=&length=); nil
	// otherwise.
	Range *Range `json:"range,omitempty" jsonschema:"where content lies in the whole content, in an answer of a range of it"`
}

// Range is where a range of a content lies in the whole content, counted
// in the bytes of the content's JSON text (between its quotes, each
// escape its bytes: a quote 2, a control character 6), as the API writes
// it: {"offset","end","total"}. The range holds whole escapes and whole
// UTF-8 sequences: Offset is the offset asked, moved back to the start
// of one it would split; End is the next range's offset, Total at the
// end.
type Range struct {
	Offset int64 `json:"offset" jsonschema:"where the range begins in the content's JSON text"`
	End    int64 `json:"end" jsonschema:"where it ends: the offset of the next range; total at the end"`
	Total  int64 `json:"total" jsonschema:"the length of the content's JSON text"`
}

// Submitted is the answer to a submit (POST /v1/batch, 202): the API's
// {"id","reused","status","location"}.
type Submitted struct {
	// ID is the job's id.
	ID string `json:"id"`
	// Reused is true if the answer is an earlier job of the same targets
	// (or the same idempotency key), still reusable, not a new one.
	Reused bool `json:"reused"`
	// Status is the job's URL path, "/v1/batch/{id}", not a status word:
	// the contract's name for it, kept for the clients that read it. Read
	// Location instead; GET the path for the job's status.
	Status string `json:"status"`
	// Location is the job's URL path, "/v1/batch/{id}", as the Location
	// header gives it.
	Location string `json:"location"`
}
