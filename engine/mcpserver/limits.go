package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
// had serve build and hold every answer), one JSON object with nothing
// after it, each JSON-RPC member once and spelled exactly (400 otherwise,
// so the tools/call it counts is the one the SDK runs: the SDK reads the
// first JSON value alone, its keys case-sensitively), at most maxCalls tool calls of
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
		msg, err := readMessage(body)
		if err != nil {
			writeRPCError(w, err)
			return
		}
		if !msg.call {
			if msg.ambiguous != nil {
				writeRPCError(w, msg.ambiguous)
				return
			}
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
		if msg.ambiguous != nil {
			writeRPCError(w, msg.ambiguous) // counted like the call's answer
			return
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

// errBadMessage and errAmbiguousMessage are readMessage's errors: a body
// refused, 400, before the SDK reads it.
var (
	errBadMessage       = errors.New("the body is not one JSON-RPC message (a JSON object)")
	errAmbiguousMessage = errors.New("the body is an ambiguous JSON-RPC message")
)

// rpcMembers are the members of a JSON-RPC message the SDK reads.
var rpcMembers = [...]string{"jsonrpc", "id", "method", "params", "result", "error"}

// message is what limits reads of a POST's body.
type message struct {
	// call reports whether a tools/call is named by a top-level "method"
	// key however it is spelled ("method", "Method", a second "method"):
	// what the SDK reads (its first JSON value, keys matched exactly), and
	// what any other reading would.
	call bool
	// ambiguous, if not nil, is why readers could disagree on the message:
	// bytes other than JSON whitespace after its object, a member of
	// JSON-RPC twice, or a key that differs from one only by case. The
	// SDK would read the first object alone, exactly; the body is refused
	// (400) instead, after a call in it is counted.
	ambiguous error
}

// readMessage reads body as the SDK will: its first JSON value, which must
// be an object (a batch is refused before, by isBatch). An error means the
// first value is not a well-formed JSON object: the SDK would not run it
// either, and the body is refused.
func readMessage(body []byte) (message, error) {
	var m message
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return m, errBadMessage
	}
	var seen [len(rpcMembers)]bool
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, errBadMessage
		}
		key, _ := tok.(string)
		member := -1
		for i, name := range rpcMembers {
			if strings.EqualFold(key, name) { // encoding/json's folding: "ſ" is "s"
				member = i
				break
			}
		}
		if member >= 0 {
			if key != rpcMembers[member] {
				m.ambiguous = fmt.Errorf("%w: a key differs from %q by case only", errAmbiguousMessage, rpcMembers[member])
			} else if seen[member] {
				m.ambiguous = fmt.Errorf("%w: key %q twice", errAmbiguousMessage, rpcMembers[member])
			}
			seen[member] = true
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return m, errBadMessage
		}
		if member >= 0 && rpcMembers[member] == "method" {
			var method string
			if json.Unmarshal(raw, &method) == nil && method == "tools/call" {
				m.call = true
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the object's '}'
		return m, errBadMessage
	}
	if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		m.ambiguous = fmt.Errorf("%w: %d bytes after its JSON object", errAmbiguousMessage, len(rest))
	}
	return m, nil
}

// writeRPCError answers a body refused by readMessage: 400, with a
// JSON-RPC error (code -32600, invalid request; id null: no id of the
// body is trusted).
func writeRPCError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error": map[string]any{
			"code":    -32600,
			"message": err.Error(),
			"data":    map[string]string{"hint": "send one JSON-RPC message, a JSON object with each member once, spelled in lower case, and nothing after it"},
		},
	})
}
