package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/persistence"
)

const (
	// maxRequestBody caps a POST /v1/batch body; it is enforced while
	// reading.
	maxRequestBody = 256 << 10
	// retryAfter is the Retry-After of a 429, in seconds.
	retryAfter = 5
)

// The API's routes, each also the metrics' route label.
const (
	routeSubmit  = "POST /v1/batch"
	routeJob     = "GET /v1/batch/{id}"
	routeTarget  = "GET /v1/batch/{id}/{idx}"
	routeCancel  = "DELETE /v1/batch/{id}"
	routeOther   = "/v1/"
	routeMetrics = "GET /metrics"
	routeHealth  = "GET /healthz"
)

// api is the HTTP API of the runner, as sift exposes it.
type api struct {
	runner        jobRunner
	owners        jobOwners
	keys          *keyring
	metrics       *metrics.Metrics
	scrape        http.Handler // GET /metrics
	log           *slog.Logger
	targetsPerJob int
}

// jobRunner is what the API asks of the runner; [*engine.Runner]
// implements it. Tests wrap it to count the work an answer does.
type jobRunner interface {
	Submit(ctx context.Context, c *engine.Caller, callerClass string, targets []engine.Target) (string, bool, error)
	Cancel(id string) bool
	Status(id string) (engine.Job, []engine.TargetStatus, bool)
	Touch(id string)
}

// jobOwners reads a job's stored summary row, without its targets: one
// point read whether or not the job exists. [*persistence.Store]
// implements it; an id that is not 32 lowercase hex digits is not found.
type jobOwners interface {
	Job(id string) (persistence.JobRecord, error)
}

// submitRequest is the body of POST /v1/batch.
type submitRequest struct {
	Targets []engine.Target `json:"targets"`
}

// submitResponse is the answer to POST /v1/batch.
type submitResponse struct {
	ID     string `json:"id"`
	Reused bool   `json:"reused"`
	Status string `json:"status"`
}

// jobJSON is a job as the API shows it.
type jobJSON struct {
	ID           string       `json:"id"`
	Status       string       `json:"status"`
	Error        string       `json:"error,omitempty"`
	TargetsTotal int          `json:"targets_total"`
	TargetsDone  int          `json:"targets_done"`
	CreatedAt    int64        `json:"created_at"`
	Targets      []targetJSON `json:"targets"`
}

// targetJSON is a target as the API shows it.
type targetJSON struct {
	Idx    int            `json:"idx"`
	URL    string         `json:"url"`
	Status string         `json:"status"`
	Error  string         `json:"error,omitempty"`
	Hint   string         `json:"hint,omitempty"`
	Result *engine.Result `json:"result,omitempty"`
}

// errorJSON is every error answer.
type errorJSON struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// handler returns the API's routes.
func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	handle := func(route string, h http.Handler) { mux.Handle(route, a.observe(route, h)) }
	handle(routeSubmit, a.auth(a.submit))
	handle(routeJob, a.auth(a.job))
	handle(routeTarget, a.auth(a.target))
	handle(routeCancel, a.auth(a.cancel))
	handle(routeOther, a.auth(a.other))
	handle(routeMetrics, a.scrape)
	handle(routeHealth, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	return mux
}

// observe counts and times each request under its fixed route, and logs
// it. A handler that panics gets a 500 and a log line with the route only:
// left to net/http, the panic value and the stack would reach the log.
func (a *api) observe(route string, h http.Handler) http.Handler {
	return a.metrics.Middleware(route, a.guard(route, h))
}

// guard logs each request and recovers a handler's panic (see observe).
func (a *api) guard(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		abort := false
		func() {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				if v == http.ErrAbortHandler {
					panic(v) // net/http's own way to drop a connection; it logs nothing
				}
				a.log.Error("handler panicked: a possible bug in siftbatch", slog.String(logKeyRoute, route))
				if !rec.wroteHeader {
					writeError(rec, http.StatusInternalServerError, "internal error", "try again; if it persists, report it")
				} else {
					// Part of an answer is out: drop the connection so
					// that it cannot pass for a whole one.
					rec.code, abort = http.StatusInternalServerError, true
				}
			}()
			h.ServeHTTP(rec, r)
		}()
		a.log.Debug("request", slog.String(logKeyRoute, route), slog.String(logKeyMethod, r.Method),
			slog.Int(logKeyCode, rec.code), slog.Duration(logKeyDuration, time.Since(start)))
		if abort {
			panic(http.ErrAbortHandler)
		}
	})
}

// auth admits requests that carry a known key; the others get 401.
func (a *api) auth(h func(http.ResponseWriter, *http.Request, *apiKey)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		var k *apiKey
		if ok && strings.EqualFold(scheme, "Bearer") {
			k, ok = a.keys.lookup(strings.TrimSpace(key))
		} else {
			ok = false
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="siftbatch"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer KEY with a key the server knows")
			return
		}
		h(w, r, k)
	})
}

// submit is POST /v1/batch.
func (a *api) submit(w http.ResponseWriter, r *http.Request, k *apiKey) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	var req submitRequest
	if err == nil {
		err = decodeSubmit(body, &req)
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "body too large",
			fmt.Sprintf("send at most %d KiB; split the targets over several jobs", maxRequestBody>>10))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad json: "+strings.TrimPrefix(err.Error(), "json: "),
			`send {"targets":[{"url":"https://…","options":{…}}]}`)
		return
	}
	for i, t := range req.Targets {
		if t.URL == "" {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: empty url", i), "give every target a url")
			return
		}
		if _, err := parseTargetURL(t.URL); err != nil {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: %v", i, err), "give absolute URLs such as https://example.com/page")
			return
		}
	}
	id, reused, err := a.runner.Submit(r.Context(), k.caller(), k.class, req.Targets)
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrNoTargets):
		writeError(w, http.StatusUnprocessableEntity, "no targets", "send at least one target")
		return
	case errors.Is(err, engine.ErrTooManyTargets):
		writeError(w, http.StatusUnprocessableEntity, "too many targets",
			fmt.Sprintf("send at most %d targets per job", a.targetsPerJob))
		return
	case errors.Is(err, engine.ErrInvalid):
		writeError(w, http.StatusUnprocessableEntity, err.Error(), "check the targets")
		return
	case errors.Is(err, engine.ErrCallerBusy):
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, http.StatusTooManyRequests, "busy", "you have as many jobs running as you may; wait for one to finish, or cancel one")
		return
	case errors.Is(err, engine.ErrBusy):
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, http.StatusTooManyRequests, "jobs busy", "the server runs as many jobs as it may; retry after Retry-After seconds")
		return
	case errors.Is(err, engine.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "shutting down", "retry against a running server")
		return
	default:
		a.log.Warn("submit failed", slog.String(logKeyCaller, k.name), errAttr(err))
		writeError(w, http.StatusInternalServerError, "internal error", "")
		return
	}
	a.log.Info("job submitted", slog.String(logKeyJobID, id), slog.String(logKeyCaller, k.name),
		slog.Int(logKeyTargets, len(req.Targets)), slog.Bool("reused", reused))
	loc := "/v1/batch/" + id
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusAccepted, submitResponse{ID: id, Reused: reused, Status: loc})
}

// decodeSubmit decodes a POST /v1/batch body strictly: UTF-8, one JSON
// value, and every field name spelled exactly as the contract spells it,
// once per object. encoding/json alone would take "URL" for "url" (it
// matches names without regard to case), keep the last of two "url"s (a
// proxy may have read the first), and turn bytes that are not UTF-8 into
// U+FFFD.
func decodeSubmit(body []byte, req *submitRequest) error {
	if !utf8.Valid(body) {
		return errors.New("body is not UTF-8")
	}
	if err := checkFieldNames(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return err
	}
	// One JSON value and nothing after it.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil && !isSyntaxError(err) {
			return err
		}
		return errors.New("data after the JSON object")
	}
	return nil
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// submitFields are the field names a submit body may use, at any depth
// (the body has no free-form objects): those of [submitRequest],
// [engine.Target] and [engine.Options].
var submitFields = map[string]bool{
	"targets": true, "url": true, "options": true,
	"mode": true, "question": true, "pages": true, "grep": true, "jq": true, "context": true, "recover": true,
}

// checkFieldNames refuses an object key that is not one of submitFields
// exactly, or that an object has twice. It leaves syntax errors to the
// decoder, which reports them better.
func checkFieldNames(body []byte) error {
	type container struct {
		object bool
		atKey  bool // an object, before a key (or its end)
		seen   map[string]bool
	}
	var stack []*container
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or a syntax error for Decode to report
		}
		if n := len(stack); n > 0 && stack[n-1].atKey {
			if key, ok := tok.(string); ok {
				c := stack[n-1]
				switch {
				case !submitFields[key]:
					return fmt.Errorf("unknown field %q", key)
				case c.seen[key]:
					return fmt.Errorf("duplicate field %q", key)
				}
				c.seen[key], c.atKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &container{object: true, atKey: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &container{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value has ended: an object around it wants its next key.
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].atKey = true
		}
	}
}

// owned reports whether the path's job id names a job of the caller, or
// writes 404. Another caller's job is answered exactly like a missing one,
// and with the same work: one read of the job's summary row (never of its
// targets), nothing else. So neither the answer nor its timing tells a
// caller whether someone else's job exists.
func (a *api) owned(w http.ResponseWriter, r *http.Request, k *apiKey) (string, bool) {
	id := r.PathValue("id")
	j, err := a.owners.Job(id)
	if err == nil && j.Caller == k.name {
		return id, true
	}
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		// Only a well-formed id reaches the store, so it is safe to log.
		a.log.Warn("read job", slog.String(logKeyJobID, id), errAttr(err))
	}
	writeJobNotFound(w)
	return "", false
}

func writeJobNotFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "job not found", "check the id; jobs are deleted a while after they finish")
}

// job is GET /v1/batch/{id}; ?results=1 includes the results.
func (a *api) job(w http.ResponseWriter, r *http.Request, k *apiKey) {
	id, ok := a.owned(w, r, k)
	if !ok {
		return
	}
	job, targets, ok := a.runner.Status(id)
	if !ok { // expired, or swept since the owner check
		writeJobNotFound(w)
		return
	}
	a.runner.Touch(job.ID)
	withResults, _ := strconv.ParseBool(r.URL.Query().Get("results"))
	out := jobJSON{
		ID:           job.ID,
		Status:       job.Status,
		Error:        job.Error,
		TargetsTotal: job.TargetsTotal,
		TargetsDone:  job.TargetsDone,
		CreatedAt:    job.CreatedAt,
		Targets:      make([]targetJSON, 0, len(targets)),
	}
	for _, t := range targets {
		out.Targets = append(out.Targets, toTargetJSON(t, withResults))
	}
	writeJSON(w, http.StatusOK, out)
}

// target is GET /v1/batch/{id}/{idx}.
func (a *api) target(w http.ResponseWriter, r *http.Request, k *apiKey) {
	id, ok := a.owned(w, r, k)
	if !ok {
		return
	}
	job, targets, ok := a.runner.Status(id)
	if !ok {
		writeJobNotFound(w)
		return
	}
	idx, ok := parseIdx(r.PathValue("idx"))
	if !ok || idx >= len(targets) {
		writeError(w, http.StatusNotFound, "target not found", fmt.Sprintf("this job's targets are 0 to %d", len(targets)-1))
		return
	}
	a.runner.Touch(job.ID)
	writeJSON(w, http.StatusOK, toTargetJSON(targets[idx], true))
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
func (a *api) cancel(w http.ResponseWriter, r *http.Request, k *apiKey) {
	id, ok := a.owned(w, r, k)
	if !ok {
		return
	}
	if !a.runner.Cancel(id) {
		if _, _, ok := a.runner.Status(id); !ok {
			writeJobNotFound(w) // expired, or swept since the owner check
			return
		}
		writeError(w, http.StatusConflict, "job already finished", "only a queued or running job can be cancelled")
		return
	}
	a.log.Info("job cancelled", slog.String(logKeyJobID, id), slog.String(logKeyCaller, k.name))
	writeJSON(w, http.StatusOK, map[string]bool{"cancelled": true})
}

// other answers every other /v1/ request: 405 on a known path, else 404.
func (a *api) other(w http.ResponseWriter, r *http.Request, _ *apiKey) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) >= 2 && parts[0] == "v1" && parts[1] == "batch" {
		allow := ""
		switch len(parts) {
		case 2:
			allow = "POST"
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

func toTargetJSON(t engine.TargetStatus, withResult bool) targetJSON {
	out := targetJSON{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: t.Hint}
	if withResult {
		out.Result = t.Result
	}
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // results are page text: keep "<" readable; the type is JSON, never sniffed
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg, hint string) {
	writeJSON(w, code, errorJSON{Error: msg, Hint: hint})
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// errBadURL is a target URL that is not absolute http(s).
var errBadURL = errors.New("not an absolute http or https URL")

// parseTargetURL parses an absolute http(s) URL with a host and no user
// info.
func parseTargetURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return nil, errBadURL
	}
	return u, nil
}
