package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultMaxCallsPerCaller is how many tool calls of one caller run at
// once (Options.MaxCallsPerCaller).
const DefaultMaxCallsPerCaller = 8

// AnswerBudget is each caller's budget of answer bytes held while they are
// written, shared with the API: package httpapi's *Handler is one
// ([httpapi.Options.MaxAnswerBytes]). Its methods are called from many
// requests at once.
type AnswerBudget interface {
	// AnswerRoom reports whether caller's answers being written leave
	// room for another.
	AnswerRoom(caller string) bool
	// HoldAnswer counts n bytes of caller's answer being written until
	// give is called.
	HoldAnswer(caller string, n int) (give func())
}

// callerKey is the context key of the caller's name, set by requireKey.
type callerKey struct{}

// limits is what bounds one caller's MCP requests: one JSON-RPC message a
// POST (a batch is refused, 400, whatever MCP-Protocol-Version says: the
// 2025-06-18 revision removed batches, and one POST of thousands of calls
// had serve build and hold every answer), at most maxCalls tool calls of
// one caller at once (429 past it), none while the caller's unread
// answers fill its answer budget (429), and each answer's bytes counted in
// that budget while they are written.
type limits struct {
	maxCalls int
	maxBody  int64
	answers  AnswerBudget // nil: answers are not counted

	mu    sync.Mutex
	calls map[string]int // tool calls running, by caller; an entry is deleted at zero
}

// wrap bounds next's requests (see limits). The caller is requireKey's.
func (l *limits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, _ := r.Context().Value(callerKey{}).(string)
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.maxBody))
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			writeHTTPError(w, http.StatusRequestEntityTooLarge, "request body too large", "send one JSON-RPC message of at most "+strconv.FormatInt(l.maxBody, 10)+" bytes")
			return
		case err != nil:
			writeHTTPError(w, http.StatusBadRequest, "bad request body", "send one JSON-RPC message as the body")
			return
		case isBatch(body):
			writeHTTPError(w, http.StatusBadRequest, "JSON-RPC batches are refused",
				"send one JSON-RPC message per POST (the 2025-06-18 revision of MCP removed batches)")
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" {
			next.ServeHTTP(w, r) // the SDK answers it, or its error
			return
		}
		if !l.enter(caller) {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			writeHTTPError(w, http.StatusTooManyRequests, "too many tool calls",
				"at most "+strconv.Itoa(l.maxCalls)+" of your tool calls run at once; wait for their answers, then retry after Retry-After seconds")
			return
		}
		defer l.leave(caller)
		if l.answers != nil {
			if !l.answers.AnswerRoom(caller) {
				w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
				writeHTTPError(w, http.StatusTooManyRequests, "answers unread",
					"too many answers of yours are still being sent; read them before asking for more (or close their connections), then retry after Retry-After seconds")
				return
			}
			w = &countedWriter{ResponseWriter: w, answers: l.answers, caller: caller}
		}
		next.ServeHTTP(w, r)
	})
}

// retryAfter is the Retry-After of the 429s of limits.
const retryAfter = 5 * time.Second

// isBatch reports whether body is a JSON array: a JSON-RPC batch.
func isBatch(body []byte) bool {
	body = bytes.TrimLeft(body, " \t\r\n")
	return len(body) > 0 && body[0] == '['
}

// enter counts one more tool call of caller's; false, counting nothing,
// if caller has maxCalls running.
func (l *limits) enter(caller string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls[caller] >= l.maxCalls {
		return false
	}
	l.calls[caller]++
	return true
}

// leave counts one tool call of caller's less.
func (l *limits) leave(caller string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls[caller]--; l.calls[caller] <= 0 {
		delete(l.calls, caller)
	}
}

// running is the tool calls of caller's running now.
func (l *limits) running(caller string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[caller]
}

// countedWriter counts each Write's bytes in the caller's answer budget
// while the Write runs: an answer the client does not read blocks in
// Write, holding its bytes, and the caller's next calls are refused once
// those fill the budget. Flush goes through (the SDK streams events).
type countedWriter struct {
	http.ResponseWriter
	answers AnswerBudget
	caller  string
}

func (w *countedWriter) Write(p []byte) (int, error) {
	give := w.answers.HoldAnswer(w.caller, len(p))
	defer give()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (w *countedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *countedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
