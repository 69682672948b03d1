package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// forwardHold is what a forwarded read's answer reserves of its caller's
// [Options.MaxAnswerBytes] on the node that forwards it, from its status
// until [Cluster.Forward] returns: the most of the other node's answer
// that Forward holds at a time (package cluster's parts are at most 256
// KiB). The node that answers holds the answer itself, and reserves it
// there.
const forwardHold = 256 << 10

// forwardWriter is what a forwarded request's answer goes through on the
// node that forwards it: the part of the other node's answer that Forward
// holds at a time is this node's memory, so a GET's 200 reserves
// forwardHold of its caller's budget when its status comes, before any of
// its body; one that does not fit is answered 429 instead, and the rest of
// the other node's answer is refused (a Write fails: Forward releases it).
// Other answers (an error, a cancel's) are small. Not for concurrent use.
type forwardWriter struct {
	http.ResponseWriter
	h           *Handler
	r           *http.Request
	wroteHeader bool
	refused     bool
}

var errAnswerRefused = errors.New("answer refused: the caller's answer budget is full")

// WriteHeader implements http.ResponseWriter.
func (w *forwardWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if code == http.StatusOK && w.r.Method == http.MethodGet && !holdOf(w.r).reserve(forwardHold) {
		w.refused = true
		clear(w.ResponseWriter.Header()) // the other node's
		w.h.refuseAnswer(w.ResponseWriter)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *forwardWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.refused {
		return 0, errAnswerRefused
	}
	return w.ResponseWriter.Write(p)
}

// answerBudget counts, for each caller, the bytes of its answers held in
// memory while they are written to its clients ([Options.MaxAnswerBytes]).
// An answer that a client does not read stays in memory until its
// connection fails or times out: without a bound per caller, one key's
// clients that never read could hold any number of results (200 of 4 MiB
// took serve from 63 to 1301 MiB). Safe for concurrent use.
type answerBudget struct {
	max  int64
	mu   sync.Mutex
	held map[string]*heldBytes // callers that hold anything: an entry is deleted at zero
}

// heldBytes is one caller's bytes held.
type heldBytes struct {
	n int64
	// freed is closed, and set to nil, when n falls; made by the first
	// wait for it.
	freed chan struct{}
}

func newAnswerBudget(max int64) *answerBudget {
	return &answerBudget{max: max, held: make(map[string]*heldBytes)}
}

// take adds n to caller's bytes held if the caller holds nothing (one
// answer larger than the budget is served, alone), or if they fit in the
// budget; with always, whatever it holds. It reports whether it did.
func (b *answerBudget) take(caller string, n int64, always bool) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.held[caller]
	switch {
	case e == nil:
		b.held[caller] = &heldBytes{n: n}
	case always || e.n+n <= b.max:
		e.n += n
	default:
		return false
	}
	return true
}

// fits reports whether take would take n for caller now.
func (b *answerBudget) fits(caller string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.held[caller]
	return e == nil || e.n+n <= b.max
}

// give takes n back from caller's bytes held, and wakes its waits.
func (b *answerBudget) give(caller string, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.held[caller]
	if e == nil {
		return
	}
	e.n -= n
	if e.freed != nil {
		close(e.freed)
		e.freed = nil
	}
	if e.n <= 0 {
		delete(b.held, caller)
	}
}

// wait takes n for caller as take does, waiting while the caller's other
// answers leave no room; false, having taken nothing, if ctx ends first.
func (b *answerBudget) wait(ctx context.Context, caller string, n int64) bool {
	for {
		b.mu.Lock()
		e := b.held[caller]
		switch {
		case n <= 0:
		case e == nil:
			b.held[caller] = &heldBytes{n: n}
		case e.n+n <= b.max:
			e.n += n
		default:
			if e.freed == nil {
				e.freed = make(chan struct{})
			}
			freed := e.freed
			b.mu.Unlock()
			select {
			case <-freed:
				continue
			case <-ctx.Done():
				return false
			}
		}
		b.mu.Unlock()
		return true
	}
}

// answerHold is what one request's answer holds of its caller's budget.
// A nil *answerHold (a request that takes no turn) holds nothing and is
// refused nothing. Not for concurrent use: one request's goroutine uses it.
type answerHold struct {
	b      *answerBudget
	caller string
	n      int64
}

// reserve takes n more bytes for the answer; false if the caller's budget
// has no room for them (see answerBudget.take).
func (a *answerHold) reserve(n int) bool {
	if a == nil {
		return true
	}
	if !a.b.take(a.caller, int64(n), false) {
		return false
	}
	a.n += int64(n)
	return true
}

// add takes n more bytes whatever the budget: a small answer whose status
// is already decided (an error, a cancel), counted but never refused.
func (a *answerHold) add(n int) {
	if a != nil && n > 0 {
		a.b.take(a.caller, int64(n), true)
		a.n += int64(n)
	}
}

// wait takes n more bytes, waiting for room (see answerBudget.wait).
func (a *answerHold) wait(ctx context.Context, n int) bool {
	if a == nil {
		return true
	}
	if !a.b.wait(ctx, a.caller, int64(n)) {
		return false
	}
	a.n += int64(n)
	return true
}

// free gives back everything the answer holds: what it reserved is out,
// or will never be.
func (a *answerHold) free() {
	if a != nil {
		a.b.give(a.caller, a.n)
		a.n = 0
	}
}

// fits reports whether reserve would take n more bytes now.
func (a *answerHold) fits(n int) bool { return a == nil || a.b.fits(a.caller, int64(n)) }

// holdOf is r's answerHold; nil if r takes no turn.
func holdOf(r *http.Request) *answerHold {
	if t := turnOf(r); t != nil {
		return &t.ans
	}
	return nil
}

// refuseAnswer answers 429: the caller's answers being written hold its
// whole budget.
func (h *Handler) refuseAnswer(w http.ResponseWriter) {
	h.retryAfter(w)
	writeError(w, http.StatusTooManyRequests, "answers unread",
		"too many answers of yours are still being sent; read them before asking for more (or close their connections), then retry after Retry-After seconds")
}

// hold reserves n bytes for r's answer, before it is built; if the
// caller's budget has no room, it answers 429 and returns false.
func (h *Handler) hold(w http.ResponseWriter, r *http.Request, n int) bool {
	if holdOf(r).reserve(n) {
		return true
	}
	h.refuseAnswer(w)
	return false
}

// roomFor answers 429, and returns false, if r's caller's budget has no
// room for an answer of n bytes: checked before the runner reads a result
// (n its size if known, else 1), so that a caller whose clients do not
// read costs no read either.
func (h *Handler) roomFor(w http.ResponseWriter, r *http.Request, n int) bool {
	if holdOf(r).fits(n) {
		return true
	}
	h.refuseAnswer(w)
	return false
}

// maxResultSizes bounds resultSizes; past it, it starts again empty.
const maxResultSizes = 4096

// resultSizes remembers the size of the results read for answers: a
// stored result never changes, so an answer whose result is known not to
// fit in its caller's budget is refused (or waits) before the result is
// read again. Without it, each refused request read its result for
// nothing, and the garbage grew serve's heap (200 refused reads of a 4 MiB
// result: +210 MiB of peak RSS instead of +70). Safe for concurrent use.
type resultSizes struct {
	mu sync.Mutex
	m  map[resultKey]int
}

type resultKey struct {
	id  string
	idx int
}

// get is the size of target idx's result of job id; false if unknown.
func (s *resultSizes) get(id string, idx int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.m[resultKey{id, idx}]
	return n, ok
}

// put records the size of target idx's result of job id.
func (s *resultSizes) put(id string, idx int, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxResultSizes {
		s.m = make(map[resultKey]int)
	}
	s.m[resultKey{id, idx}] = n
}
