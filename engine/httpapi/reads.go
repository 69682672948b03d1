package httpapi

import (
	"context"
	"net/http"

	"github.com/sift/batch/engine/internal/readsched"
)

// ErrReadsQueued is returned by [Handler.Read] when the caller already has
// [Options.MaxQueuedReads] reads waiting for their turn; the API answers
// such a request 429 "reads queued" with Retry-After.
var ErrReadsQueued = readsched.ErrQueueFull

// refuseQueued answers 429: the caller's reads waiting fill its queue.
func (h *Handler) refuseQueued(w http.ResponseWriter) {
	h.retryAfter(w)
	writeError(w, http.StatusTooManyRequests, "reads queued",
		"too many of your reads wait for their turn already; wait for their answers before asking for more, then retry after Retry-After seconds")
}

// ReadCounts returns the read scheduler's counts: the reads that waited
// for their turn and the reads refused 429 "reads queued", both since
// [New], and the reads waiting for their turn now (API requests, MCP
// calls, the dashboard's reads: every read takes the same turns). Safe for
// concurrent use.
func (h *Handler) ReadCounts() (queued, refused int64, waiting int) { return h.reads.Counts() }

// Read runs fn, a read of caller's that is not an API request (a page of
// the dashboard, a part of its search), in a turn of the API's
// ([Options.MaxInFlight]), shared fairly with every API request by
// caller: so the dashboard's reads and the API's take one road, and
// neither makes another caller's wait. It returns [ErrReadsQueued] at
// once, fn not run, if caller has [Options.MaxQueuedReads] reads waiting;
// ctx's error, fn not run, if ctx ends while it waits. fn should read and
// build, not write to a client that may not read: the turn is held while
// it runs. Safe for concurrent use.
func (h *Handler) Read(ctx context.Context, caller string, fn func()) error {
	return h.reads.Do(ctx, caller, fn)
}

// AnswerRoom reports whether caller's answers being written leave room in
// its budget ([Options.MaxAnswerBytes]) for another answer: false once
// its clients' unread answers hold the whole budget. The MCP server asks
// it before a tool call, and answers 429 if not, as the API does before a
// read. Safe for concurrent use.
func (h *Handler) AnswerRoom(caller string) bool { return h.answers.fits(caller, 1) }

// HoldAnswer counts n bytes of an answer of caller's being written (an MCP
// answer) in caller's budget ([Options.MaxAnswerBytes]), the budget the
// API's answers take from, until give is called (once the bytes are
// written, or the write has failed). It never refuses: the answer is
// built already; [Handler.AnswerRoom] refuses the next. Safe for
// concurrent use; call give once.
func (h *Handler) HoldAnswer(caller string, n int) (give func()) {
	h.answers.take(caller, int64(n), true)
	return func() { h.answers.give(caller, int64(n)) }
}
