package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sift/batch/engine/batchtype"
)

// The sentinels of an answer's status class. An [*Error] matches one of
// them with [errors.Is]; the engine's own sentinels as well, where the API
// answers one (see the package doc).
var (
	// ErrBadRequest is a request the API refused as malformed: 400, and a
	// body too slow (408) or too large (413).
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized is 401: the API key is missing or unknown.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden is 403: the key may not do that (a list by caller
	// from a key that is not an admin's).
	ErrForbidden = errors.New("forbidden")
	// ErrConflict is 409: the job has already ended (a cancel).
	ErrConflict = errors.New("conflict")
	// ErrTooManyRequests is 429: a cap (the caller's or the server's live
	// jobs) or the caller's answer budget; retry after Error.RetryAfter.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrUnavailable is 503: the server is stopping, its authenticator
	// or admission failed, or a cluster node is away.
	ErrUnavailable = errors.New("unavailable")
)

// Error is an answer of the API that is not a success, or the answer the
// API would make to a request the client refuses without sending it (an
// Idempotency-Key the API refuses: 400). It matches, with [errors.Is], the
// sentinel of its status class and the engine's sentinel that the API's
// text names (see the package doc).
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Message is the API's "error" ("job not found"); the status text
	// if the answer was not the API's JSON (a proxy's page).
	Message string
	// Hint is the API's "hint": what to do about it; may be empty.
	Hint string
	// RetryAfter is the answer's Retry-After, 0 without one.
	RetryAfter time.Duration
}

// Error returns the API's text, status and hint:
// "job not found (404): check the id; …".
func (e *Error) Error() string {
	s := fmt.Sprintf("%s (%d)", e.Message, e.Status)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

// classes are the sentinels of the status classes.
var classes = map[int]error{
	http.StatusBadRequest:            ErrBadRequest,
	http.StatusRequestTimeout:        ErrBadRequest,
	http.StatusRequestEntityTooLarge: ErrBadRequest,
	http.StatusUnauthorized:          ErrUnauthorized,
	http.StatusForbidden:             ErrForbidden,
	http.StatusNotFound:              batchtype.ErrNotFound,
	http.StatusConflict:              ErrConflict,
	http.StatusUnprocessableEntity:   batchtype.ErrInvalid,
	http.StatusTooManyRequests:       ErrTooManyRequests,
	http.StatusServiceUnavailable:    ErrUnavailable,
	// 507: the server's disk is full (a submit below its reserve; a
	// durable server's cancel with no room to store it).
	http.StatusInsufficientStorage: batchtype.ErrDiskFull,
}

// named are the engine's sentinels that the API answers by their text,
// with the status it answers them with.
var named = []struct {
	status int
	text   string
	err    error
}{
	{http.StatusUnprocessableEntity, batchtype.ErrNoTargets.Error(), batchtype.ErrNoTargets},
	{http.StatusUnprocessableEntity, batchtype.ErrTooManyTargets.Error(), batchtype.ErrTooManyTargets},
	{http.StatusTooManyRequests, batchtype.ErrCallerBusy.Error(), batchtype.ErrCallerBusy},
	{http.StatusTooManyRequests, batchtype.ErrBusy.Error(), batchtype.ErrBusy},
	{http.StatusServiceUnavailable, "shutting down", batchtype.ErrClosed},
	{http.StatusServiceUnavailable, batchtype.ErrNoAdmission.Error(), batchtype.ErrNoAdmission},
	{http.StatusUnprocessableEntity, batchtype.ErrIdempotencyMismatch.Error(), batchtype.ErrIdempotencyMismatch},
	{http.StatusServiceUnavailable, "store unavailable: disk error", batchtype.ErrUnavailable},
	{http.StatusServiceUnavailable, "store unavailable: disk full", batchtype.ErrUnavailable},
	{http.StatusServiceUnavailable, "store unavailable: disk full", batchtype.ErrDiskFull},
}

// Is reports whether target is the sentinel of e's status class, or the
// engine's sentinel that e's text names.
func (e *Error) Is(target error) bool {
	if c, ok := classes[e.Status]; ok && c == target {
		return true
	}
	for _, n := range named {
		if n.err == target && n.status == e.Status && n.text == e.Message {
			return true
		}
	}
	return false
}

// maxErrorBody caps the bytes of an error answer read.
const maxErrorBody = 64 << 10

// newError makes the Error of an answer that is not a success, from its
// status, its Retry-After and its body (at most maxErrorBody bytes of it).
func newError(resp *http.Response, body []byte, now time.Time) *Error {
	e := &Error{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now)}
	var msg struct {
		Error string `json:"error"`
		Hint  string `json:"hint"`
	}
	if json.Unmarshal(body, &msg) == nil && msg.Error != "" {
		e.Message, e.Hint = msg.Error, msg.Hint
	} else {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if e.Message == "" {
		e.Message = "status " + strconv.Itoa(resp.StatusCode)
	}
	return e
}

// maxRetryAfter is the Retry-After of a number of seconds too large for a
// time.Duration: longer than any client's bound, so never waited for.
const maxRetryAfter = time.Duration(math.MaxInt64)

// parseRetryAfter reads a Retry-After: whole seconds, or an HTTP date; 0
// if absent, malformed or past. Seconds too many for a time.Duration (or
// for 64 bits) are [maxRetryAfter]: longer than any bound, not "none".
func parseRetryAfter(s string, now time.Time) time.Duration {
	if s == "" {
		return 0
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
