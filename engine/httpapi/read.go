package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/apitype"
	"github.com/sift/batch/engine/internal/httpx"
)

// jobHead is a job as the API shows it, but its targets (Targets nil):
// the one shape of a job ([apitype.Job]), which the Go client reads and
// the MCP tools answer too. Caller is set in a list across callers
// (?caller=) only: appendJobHead never writes it (a job read by id is the
// caller's own).
type jobHead = apitype.Job

// headOf is job's jobHead, without its caller.
func headOf(j *engine.Job) jobHead {
	return jobHead{ID: j.ID, Status: j.Status, Error: j.Error, TargetsTotal: j.TargetsTotal, TargetsDone: j.TargetsDone,
		TargetsFailed: j.TargetsFailed, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, EndedAt: j.EndedAt,
		DurationMS: durationMS(j.Duration)}
}

// targetHead is a target as the API shows it, but its result (Result
// nil): [apitype.TargetStatus]. Its DurationMS is the fetch's time in
// milliseconds, rounded up (a known time is at least 1); 0 (absent) while
// pending or running, and when unknown.
type targetHead = apitype.TargetStatus

// targetHeadOf is t's targetHead, t a target of a job of status job.
func targetHeadOf(job string, t *engine.TargetStatus) targetHead {
	return targetHead{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: hintFor(job, t), DurationMS: durationMS(t.Duration)}
}

// durationMS is d in whole milliseconds, rounded up; 0 for d ≤ 0.
func durationMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// owned returns the summary of the path's job if it is the caller's, or
// writes 404 (503 while the store cannot read: writeUnavailable). Another caller's job is answered exactly like a missing one,
// and with the same work: one [engine.Runner.Lookup] call, whatever the case
// (a missing id, someone else's live or finished job), nothing else. So
// neither the answer nor its timing tells a caller whether someone else's
// job exists.
func (h *Handler) owned(w http.ResponseWriter, r *http.Request, c *engine.Caller) (engine.Job, bool) {
	if h.forwarded(w, r) {
		return engine.Job{}, false
	}
	j, err := h.r.Lookup(r.PathValue("id"))
	if err == nil && j.Caller == c.Name {
		return j, true
	}
	if errors.Is(err, engine.ErrUnavailable) {
		writeUnavailable(w, err)
		return engine.Job{}, false
	}
	writeJobNotFound(w)
	return engine.Job{}, false
}

// gone answers a read of job id that found nothing after the owner check:
// 503 if the store cannot read now (the job is not gone), 404 if it has
// expired or been swept since.
func (h *Handler) gone(w http.ResponseWriter, id string) {
	if _, err := h.r.Lookup(id); errors.Is(err, engine.ErrUnavailable) {
		writeUnavailable(w, err)
		return
	}
	writeJobNotFound(w)
}

// writeUnavailable answers 503 with Retry-After for a read the store could
// not make (engine.ErrUnavailable): the body names the cause, a full disk
// or a disk error.
func writeUnavailable(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", "5")
	msg := "store unavailable: disk error"
	if errors.Is(err, engine.ErrDiskFull) {
		msg = "store unavailable: disk full"
	}
	writeError(w, http.StatusServiceUnavailable, msg, "the job is not lost: the server's store cannot read now; try again shortly")
}

// forwarded answers r through the cluster if its job is another node's:
// true if it did. The request gives its turn up meanwhile: the other node's
// work is not this one's, and the answer goes to the client as it comes.
// It takes its turn again only if it is this node's to answer.
func (h *Handler) forwarded(w http.ResponseWriter, r *http.Request) bool {
	if h.o.Cluster == nil {
		return false
	}
	t := turnOf(r)
	if t != nil {
		t.give()
	}
	if h.o.Cluster.Forward(&forwardWriter{ResponseWriter: w, h: h, r: r}, r, r.PathValue("id")) {
		return true
	}
	return t != nil && !t.take(r.Context()) // true: the client has gone
}

func writeJobNotFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "job not found", "check the id; jobs are deleted a while after they finish")
}

// job is GET /v1/batch/{id}; ?results=1 includes the results; ?wait=D
// answers once the job has ended or D has passed, whichever comes first.
// The owner check comes first (the same work and answer for a job that is
// not the caller's, whatever its query); then a parameter given twice,
// one the route does not take, or a value that is not one of its
// spellings is 400 naming it.
func (h *Handler) job(w http.ResponseWriter, r *http.Request, c *engine.Caller, _ string) {
	j, ok := h.owned(w, r, c)
	if !ok {
		return
	}
	q, ok := queryOf(w, r, "results", "wait")
	if !ok {
		return
	}
	withResults, ok := parseResults(q)
	if !ok {
		writeError(w, http.StatusBadRequest, "bad results: give 1, true, 0 or false", "give results=1 for the results, or leave it out")
		return
	}
	wait, err := parseWait(q, h.o.MaxWait)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), fmt.Sprintf("give wait as a duration of at most %s, such as wait=30s", h.o.MaxWait))
		return
	}
	if wait > 0 && engine.IsLive(j.Status) {
		var err error
		// Not holding a turn while it waits, nor after: the answer to a
		// long-poll comes once per job's end and tells a client to submit
		// its next job; it does not queue behind the pollers.
		giveTurn(r)
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		stop := context.AfterFunc(h.ending, cancel) // a shutdown ends the wait
		_, err = h.r.Wait(ctx, j.ID)
		stop()
		cancel()
		if errors.Is(err, engine.ErrNotFound) {
			writeJobNotFound(w)
			return
		}
		if errors.Is(err, engine.ErrUnavailable) {
			writeUnavailable(w, err)
			return
		}
		if r.Context().Err() != nil {
			return // the client has gone
		}
	}
	if withResults && !h.roomFor(w, r, 1) {
		return
	}
	job, targets, ok := h.r.Targets(j.ID)
	if !ok { // expired, or swept since the owner check, or the store down
		h.gone(w, j.ID)
		return
	}
	h.r.Touch(job.ID)
	h.writeJob(w, r, job, targets, withResults)
}

// writeJob streams a job as JSON: its head, then each target, with its
// result's stored bytes as they are, read one at a time, so that the
// answer holds at most one result in memory; then the tail. If a result
// can no longer be read (the job was deleted meanwhile), the answer is 404
// if it has not begun; else it ends there: the connection is dropped
// before the end of the body, so that a client cannot take it for a whole
// one, and the JSON is left incomplete. Without results the answer is
// appended whole, then written at once.
//
// Turns: each chunk (the targets up to a result and that result) is read
// and appended while r holds its turn, then written with the turn given
// up, from the buffer as it is (no copy), and the turn is taken again for
// the next: the turn is held for the work of a chunk, never while the
// client's socket takes it in, and at most one chunk is in memory.
//
// Memory: each chunk is reserved from the caller's budget before it is
// appended, and given back once written. The first is refused with 429 if
// it does not fit; a later one, once the status is out, waits for room
// without the turn and without its result, then reads it again.
func (h *Handler) writeJob(w http.ResponseWriter, r *http.Request, job engine.Job, targets []engine.TargetStatus, withResults bool) {
	a := holdOf(r)
	bp := getBuf()
	buf := *bp
	defer func() { *bp = buf; putBuf(bp) }()
	begun := false
	// begin reserves the first chunk, n bytes, and sends the status;
	// false if the answer was refused.
	begin := func(n int) bool {
		if !h.hold(w, r, n) {
			return false
		}
		setJSONHeaders(w)
		w.WriteHeader(http.StatusOK)
		begun = true
		return true
	}
	// reserve reserves a chunk of n bytes: the first is refused (429) past
	// the budget; a later one, its status out, waits for room without the
	// turn, and its result is read (again) after.
	reserve := func(n int) bool {
		switch {
		case !begun:
			return begin(n)
		case a.reserve(n):
			return true
		}
		var room bool
		return waiting(r, func() { room = a.wait(r.Context(), n) }) && room
	}
	buf = appendJobHead(buf, &job)
	buf = append(buf, `,"targets":[`...)
	for i := range targets {
		if i > 0 {
			buf = append(buf, ',')
		}
		t := &targets[i]
		buf = appendTargetHead(buf, job.Status, t)
		if !withResults || t.Status != engine.TargetDone {
			buf = append(buf, '}')
			continue
		}
		// The chunk's bytes are reserved before the result is read if
		// its size is known, else once it is read.
		var res []byte
		ok, n := true, 0
		if size, known := h.sizes.get(job.ID, t.Idx); known {
			if n = len(buf) + len(`,"result":}`) + size + 1; !reserve(n) {
				return // refused, or the client has gone
			}
			res, ok = h.r.ResultJSON(job.ID, t.Idx)
		} else if res, ok = h.r.ResultJSON(job.ID, t.Idx); ok {
			h.sizes.put(job.ID, t.Idx, len(res))
			n = resultSize(len(buf), res)
			if begun && !a.fits(n) {
				res = nil // it waits holding nothing
			}
			if !reserve(n) {
				return
			}
			if res == nil {
				res, ok = h.r.ResultJSON(job.ID, t.Idx)
			}
		}
		if ok {
			a.add(resultSize(len(buf), res) - n) // 0: a stored result does not change
		}
		if !ok {
			if !begun {
				h.gone(w, job.ID)
				return
			}
			h.log.Info("answer cut short: the job was deleted while it was written", slog.String(logKeyJobID, job.ID))
			panic(http.ErrAbortHandler) // net/http drops the connection, before the body's end
		}
		buf = appendResult(buf, res)
		var err error
		if !waiting(r, func() { _, err = w.Write(buf) }) || err != nil { // a slow reader holds no turn
			return // the client is gone
		}
		buf = buf[:0]
		a.free() // the chunk is out
	}
	buf = append(buf, "]}\n"...)
	if !begun {
		if !begin(len(buf)) {
			return
		}
	} else {
		a.add(len(buf)) // the targets after the last result: the status is out
	}
	giveTurn(r)
	_, _ = w.Write(buf)
}

// resultSize is the bytes of an answer's buffer of head bytes once result
// is appended to it (appendResult), and a newline.
func resultSize(head int, result []byte) int {
	return head + len(`,"result":}`) + len(result) + 1
}

// target is GET /v1/batch/{id}/{idx}; ?offset=&length= answer a range
// of a done target's content (parseRange), read from the chunks of the
// stored result that hold it ([engine.Runner.ContentRange]), not the
// whole result.
func (h *Handler) target(w http.ResponseWriter, r *http.Request, c *engine.Caller, _ string) {
	j, ok := h.owned(w, r, c)
	if !ok {
		return
	}
	q, ok := queryOf(w, r, "offset", "length")
	if !ok {
		return
	}
	rg, ranged, err := parseRange(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), fmt.Sprintf("give offset as a whole number from 0 and length from 1 to %d, such as offset=0&length=%d", MaxRangeLength, DefaultRangeLength))
		return
	}
	idx, ok := parseIdx(r.PathValue("idx"))
	if !ok || idx >= j.TargetsTotal {
		writeError(w, http.StatusNotFound, "target not found", fmt.Sprintf("this job's targets are 0 to %d", j.TargetsTotal-1))
		return
	}
	_, targets, ok := h.r.Targets(j.ID)
	if !ok || idx >= len(targets) {
		h.gone(w, j.ID) // expired, or swept since the owner check, or the store down
		return
	}
	t := &targets[idx]
	var res []byte
	var cr engine.ContentRange
	ranged = ranged && t.Status == engine.TargetDone
	switch {
	case t.Status != engine.TargetDone:
	case ranged:
		if !h.roomFor(w, r, int(rg.length)) {
			return
		}
		if cr, ok = h.r.ContentRange(j.ID, idx, rg.offset, rg.length); !ok {
			h.gone(w, j.ID)
			return
		}
	default:
		size, _ := h.sizes.get(j.ID, idx)
		if !h.roomFor(w, r, max(size, 1)) {
			return
		}
		var total int64
		if res, total, ok = h.r.ResultRange(j.ID, idx, 0, resultPiece); !ok {
			h.gone(w, j.ID)
			return
		}
		h.sizes.put(j.ID, idx, int(total))
		if int64(len(res)) < total {
			h.streamResult(w, r, j, t, res, total)
			return
		}
	}
	bp := getBuf()
	buf := appendTargetHead(*bp, j.Status, t)
	defer func() { *bp = buf; putBuf(bp) }()
	n := resultSize(len(buf), res)
	if ranged {
		n = rangeSize(len(buf), &cr)
	}
	if !h.hold(w, r, n) { // given back once written (authenticate)
		return
	}
	h.r.Touch(j.ID)
	setJSONHeaders(w)
	w.WriteHeader(http.StatusOK)
	if ranged {
		// The range is written from where it was read, between its head
		// and its tail: not copied into buf; a writer that can keep it
		// (MCP's in-process transport) is given it to keep.
		buf = append(buf, `,"result":{"content":"`...)
		giveTurn(r)
		if _, err := w.Write(buf); err == nil {
			if _, err = httpx.WriteKept(w, cr.JSON); err == nil {
				buf = appendRangeTail(buf[:0], &cr)
				_, _ = w.Write(append(buf, '\n'))
			}
		}
		return
	}
	buf = append(appendResult(buf, res), '\n')
	giveTurn(r) // the result is written from buf, without the turn
	_, _ = w.Write(buf)
}

// resultPiece is how much of a result a read of it reads under one turn
// (the store's chunk): a large result is read and sent piece by piece
// (streamResult).
const resultPiece = 512 << 10

// streamResult answers a done target whose result is larger than a piece,
// first its first piece: each next piece is read under the turn, taken
// again, and written without it, so that the turn is held for a piece's
// read, never for the whole result's, and one piece is in memory at once.
// The whole answer's bytes are reserved from the caller's budget first,
// as for a whole result. A job deleted while it is written cuts the
// answer short (the connection is dropped before the body's end).
func (h *Handler) streamResult(w http.ResponseWriter, r *http.Request, j engine.Job, t *engine.TargetStatus, first []byte, total int64) {
	bp := getBuf()
	buf := appendTargetHead(*bp, j.Status, t)
	defer func() { *bp = buf; putBuf(bp) }()
	if !h.hold(w, r, len(buf)+len(`,"result":}`)+int(total)+1) { // given back once written (authenticate)
		return
	}
	h.r.Touch(j.ID)
	setJSONHeaders(w)
	w.WriteHeader(http.StatusOK)
	buf = append(buf, `,"result":`...)
	giveTurn(r)
	if _, err := w.Write(buf); err != nil {
		return
	}
	piece, off := first, int64(0)
	for {
		if _, err := httpx.WriteKept(w, piece); err != nil { // piece is this answer's alone
			return
		}
		if off += int64(len(piece)); off >= total {
			break
		}
		if tn := turnOf(r); tn != nil && !tn.take(r.Context()) {
			return // the client has gone
		}
		var ok bool
		piece, _, ok = h.r.ResultRange(j.ID, t.Idx, off, resultPiece)
		giveTurn(r)
		if !ok || len(piece) == 0 {
			h.log.Info("answer cut short: the job was deleted while it was written", slog.String(logKeyJobID, j.ID))
			panic(http.ErrAbortHandler) // net/http drops the connection, before the body's end
		}
	}
	_, _ = w.Write([]byte("}\n"))
}

// DefaultRangeLength is the length of a range of a target's content
// (GET /v1/batch/{id}/{idx}?offset=) when none is given: 256 KiB.
// MaxRangeLength is the largest length asked: 4 MiB.
const (
	DefaultRangeLength = 256 << 10
	MaxRangeLength     = 4 << 20
)

// contentRange is a range asked of a target's content.
type contentRange struct{ offset, length int64 }

// parseRange parses ?offset= and ?length=: a range of the content, in the
// bytes of its JSON text. Either makes the answer a range: offset 0 and
// length [DefaultRangeLength] when not given. A value that is not a whole
// number in its range is an error naming it.
func parseRange(q url.Values) (contentRange, bool, error) {
	rg := contentRange{length: DefaultRangeLength}
	_, hasOff := q["offset"]
	_, hasLen := q["length"]
	if hasOff {
		n, ok := parseCount(q.Get("offset"), 1<<53)
		if !ok {
			return rg, false, errors.New("bad offset: not a whole number from 0")
		}
		rg.offset = n
	}
	if hasLen {
		n, ok := parseCount(q.Get("length"), MaxRangeLength)
		if !ok || n < 1 {
			return rg, false, fmt.Errorf("bad length: not a whole number from 1 to %d", MaxRangeLength)
		}
		rg.length = n
	}
	return rg, hasOff || hasLen, nil
}

// parseCount parses decimal digits (no sign, no leading zero) up to max.
func parseCount(s string, max int64) (int64, bool) {
	if s == "" || len(s) > 16 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, n <= max
}

// rangeSize is the bytes of an answer of head bytes and cr (its content,
// then appendRangeTail), and a newline.
func rangeSize(head int, cr *engine.ContentRange) int {
	return head + len(`,"result":{"content":"","meta":,"range":{"offset":,"end":,"total":}}}`) + len(cr.JSON) + len(cr.Meta) + 3*20 + 1
}

// appendRangeTail appends what follows a range of a content written as
// "result":{"content":"…: its closing quote, the result's meta and
// "range":{"offset","end","total"}, and the closing braces.
func appendRangeTail(b []byte, cr *engine.ContentRange) []byte {
	b = append(b, '"')
	if len(cr.Meta) > 0 {
		b = append(b, `,"meta":`...)
		b = append(b, cr.Meta...)
	}
	b = append(b, `,"range":{"offset":`...)
	b = strconv.AppendInt(b, cr.Offset, 10)
	b = append(b, `,"end":`...)
	b = strconv.AppendInt(b, cr.End, 10)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, cr.Total, 10)
	return append(b, "}}}"...)
}

// appendResult closes an open target head with result as its result, if
// result is not nil: the result is appended in place only to be written
// out at once, in one Write with its target's JSON. The buffer grows once,
// to fit it.
func appendResult(b, result []byte) []byte {
	if result == nil {
		return append(b, '}')
	}
	b = slices.Grow(b, len(`,"result":}`)+len(result))
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// parseResults parses ?results=: 1 or true include the results; 0,
// false or no results parameter do not; anything else (an empty value
// too) is false, not ok.
func parseResults(q url.Values) (with, ok bool) {
	vs, given := q["results"]
	if !given {
		return false, true
	}
	switch vs[0] {
	case "1", "true":
		return true, true
	case "0", "false":
		return false, true
	}
	return false, false
}

// parseWait parses ?wait=: a duration ("30s", "1m") or whole seconds
// ("30"), from 0 to max; no wait parameter is 0, an empty one an error.
func parseWait(q url.Values, max time.Duration) (time.Duration, error) {
	vs, given := q["wait"]
	if !given {
		return 0, nil
	}
	s := vs[0]
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.ParseUint(s, 10, 16)
		if nerr != nil {
			return 0, errors.New("bad wait: not a duration")
		}
		d = time.Duration(n) * time.Second
	}
	switch {
	case d < 0:
		return 0, errors.New("bad wait: negative")
	case d > max:
		return 0, fmt.Errorf("bad wait: more than %s", max)
	}
	return d, nil
}

// parseIdx parses a target index in its one spelling: decimal digits, no
// sign, no leading zero ("0", "17"; not "+1", "01", " 1").
func parseIdx(s string) (int, bool) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// cancel is DELETE /v1/batch/{id}.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, c *engine.Caller, _ string) {
	j, ok := h.owned(w, r, c)
	if !ok {
		return
	}
	if _, ok := queryOf(w, r); !ok {
		return
	}
	var err error
	// The turn is given up while the job's actor answers: a durable
	// cancel waits for its sync, and a disk that fails holds it.
	if !waiting(r, func() { ok, err = h.r.TryCancel(j.ID) }) {
		return // the client has gone
	}
	switch {
	case errors.Is(err, engine.ErrDiskFull):
		// A durable runner acknowledges a cancel once it is synced; the
		// disk has no room for it: nothing changed (engine.Runner.TryCancel).
		h.log.Info("cancel refused: disk full", slog.String(logKeyJobID, j.ID), slog.String(logKeyCaller, c.Name))
		h.retryAfter(w)
		writeError(w, http.StatusInsufficientStorage, "disk full: the cancel was not stored",
			"the server's disk has no room for a write: the job goes on as it was (held while the disk is full); retry the cancel after Retry-After seconds")
		return
	case err != nil:
		h.log.Warn("cancel refused", slog.String(logKeyJobID, j.ID), slog.String(logKeyCaller, c.Name), slog.String("err", "store unavailable"))
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "store unavailable: the cancel is not confirmed",
			"the server's disk is failing, or the runner did not answer in time: the cancel may not have been made; read the job, and cancel again later if it is still live")
		return
	}
	if !ok {
		if _, err := h.r.Lookup(j.ID); err != nil {
			h.gone(w, j.ID) // expired, or swept since the owner check, or the store down
			return
		}
		writeError(w, http.StatusConflict, "job already finished", "only a queued or running job can be cancelled")
		return
	}
	h.log.Info("job cancelled", slog.String(logKeyJobID, j.ID), slog.String(logKeyCaller, c.Name))
	writeJSON(w, http.StatusOK, map[string]bool{"cancelled": true})
}

// other answers every other /v1/ request: 405 on a known path, else 404.
// A path with a trailing slash is its resource's (ServeHTTP), so no
// empty segment is taken for one: /v1/batch//x is 404.
func (h *Handler) other(w http.ResponseWriter, r *http.Request, _ *engine.Caller, _ string) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if r.URL.Path == pathOpenAPI {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "use GET")
		return
	}
	if len(parts) >= 2 && parts[0] == "v1" && parts[1] == "batch" && !slices.ContainsFunc(parts, func(s string) bool { return s == "" || s == "." || s == ".." }) {
		allow := ""
		switch len(parts) {
		case 2:
			allow = "GET, POST"
		case 3:
			allow = "GET, DELETE"
		case 4:
			allow = "GET"
		}
		if allow != "" {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method not allowed", "use "+allow)
			return
		}
	}
	writeError(w, http.StatusNotFound, "not found", "the API is POST /v1/batch and GET or DELETE /v1/batch/{id}")
}

// hintFor returns the hint the API gives t, a target of a job of status
// job, as [engine.TargetHint] does: its own (a pending target of an ended
// job has the engine's, [engine.NotRunHint]: why it will not run), or for
// a failure stored without one, [engine.FailureHint]'s.
func hintFor(job string, t *engine.TargetStatus) string {
	return cmp.Or(t.Hint, engine.FailureHint(job, t.Status, t.Error))
}
