package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/apitype"
)

// submitRequest is the body of POST /v1/batch.
type submitRequest struct {
	Targets []engine.Target `json:"targets"`
}

// submitResponse is the answer to POST /v1/batch: its "status" is the
// job's path (the contract's shape), and so is its "location".
type submitResponse = apitype.Submitted

// submit is POST /v1/batch. A request without a Body (nil: not one
// net/http read off a connection, which always has one, but one a cluster
// forwarded, whose message carries no body) is answered 405: a submit is
// never forwarded, any node takes it.
//
// An Idempotency-Key header, if given, is the job's key instead of the
// one derived from the targets ([engine.SubmitOptions.IdempotencyKey]):
// once, 1 to 255 printable characters, no space at either end, else 400.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request, c *engine.Caller, class string) {
	if r.Body == nil {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "submit to any node: POST is not forwarded")
		return
	}
	if _, ok := queryOf(w, r); !ok {
		return
	}
	idemKey, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	var body []byte
	var err error
	turned := waiting(r, func() { body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBody)) })
	var (
		tooBig  *http.MaxBytesError
		netErr  net.Error
		timeout = errors.As(err, &netErr) && netErr.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
	)
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "body too large",
			fmt.Sprintf("send at most %d KiB; split the targets over several jobs", h.o.MaxBody>>10))
		return
	case timeout:
		// The error's text names the connection's addresses: never sent.
		writeError(w, http.StatusRequestTimeout, "body read timed out", "send the whole body at once, right after the headers")
		return
	case err != nil:
		// A malformed body encoding (bad chunked), or a connection cut.
		writeError(w, http.StatusBadRequest, "bad request body", "send the body whole, with a correct Content-Length or chunked encoding")
		return
	}
	if !turned {
		return // the client has gone
	}
	const shape = `send {"targets":[{"url":"https://…","options":{…}}]}`
	if len(bytes.TrimSpace(body)) == 0 {
		writeError(w, http.StatusBadRequest, "empty body", shape)
		return
	}
	var req submitRequest
	var unknown *unknownOptionError
	if err := decodeSubmit(body, &req); errors.As(err, &unknown) {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: unknown option %s", unknown.target, quoteName(unknown.name)),
			fmt.Sprintf("the options are %s; this server honours %s", strings.Join(optionNames, ", "), h.honoured()))
		return
	} else if err != nil {
		writeError(w, http.StatusBadRequest, "bad json: "+describeJSONError(err), shape)
		return
	}
	for i, t := range req.Targets {
		if t.URL == "" {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: empty url", i), "give every target a url")
			return
		}
		if err := checkURL(t.URL); err != nil {
			hint := "give absolute URLs such as https://example.com/page"
			if errors.Is(err, errBadPort) {
				hint = "give a port of 1 to 65535, or none"
			}
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: %v", i, err), hint)
			return
		}
	}
	for i := range req.Targets {
		if name := h.unhonoured(&req.Targets[i].Options); name != "" {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: option %s is not supported by this server", i, name),
				fmt.Sprintf("%s belongs to a fetcher that supports it; this server honours %s", name, h.honoured()))
			return
		}
		if h.o.Check != nil {
			if err := h.o.Check(req.Targets[i]); err != nil {
				writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("target %d: %v", i, err), "fix the option's value")
				return
			}
		}
	}
	id, reused, err := h.r.SubmitWith(r.Context(), c, class, req.Targets, engine.SubmitOptions{IdempotencyKey: idemKey})
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrIdempotencyMismatch):
		writeError(w, http.StatusUnprocessableEntity, "idempotency key reused with other targets",
			"this Idempotency-Key is bound to a job of other targets while that job is reusable; send a new key for a new job")
		return
	case errors.Is(err, engine.ErrNoTargets):
		writeError(w, http.StatusUnprocessableEntity, "no targets", "send at least one target")
		return
	case errors.Is(err, engine.ErrTooManyTargets):
		writeError(w, http.StatusUnprocessableEntity, "too many targets",
			fmt.Sprintf("send at most %d targets per job", h.o.TargetsPerJob))
		return
	case errors.Is(err, engine.ErrInvalid):
		writeError(w, http.StatusUnprocessableEntity, err.Error(), "check the targets")
		return
	case errors.Is(err, engine.ErrCallerBusy):
		h.retryAfter(w)
		writeError(w, http.StatusTooManyRequests, "busy", "you have as many jobs running as you may; wait for one to finish, or cancel one")
		return
	case errors.Is(err, engine.ErrBusy):
		h.retryAfter(w)
		writeError(w, http.StatusTooManyRequests, "jobs busy", "the server runs as many jobs as it may; retry after Retry-After seconds")
		return
	case errors.Is(err, engine.ErrClosed):
		h.retryAfter(w) // a restarted server, or another behind the same address
		writeError(w, http.StatusServiceUnavailable, "shutting down", "retry against a running server")
		return
	case errors.Is(err, engine.ErrNoAdmission):
		h.retryAfter(w)
		hint := "the cluster could not count your jobs just now (a node joined or left); retry after Retry-After seconds"
		if _, cause, ok := strings.Cut(err.Error(), engine.ErrNoAdmission.Error()+": "); ok {
			hint = cause + "; retry after Retry-After seconds" // the admission's own cause (a job's node that did not answer)
		}
		writeError(w, http.StatusServiceUnavailable, "admission unavailable", hint)
		return
	case errors.Is(err, engine.ErrNotSynced):
		h.retryAfter(w)
		writeError(w, http.StatusServiceUnavailable, "disk failed",
			"the server's disk failed to sync the job (an I/O error): nothing was created; retry after Retry-After seconds")
		return
	case errors.Is(err, engine.ErrDiskFull):
		h.retryAfter(w)
		writeError(w, http.StatusInsufficientStorage, "disk full",
			"the server's disk is full (below its reserve, or a write found no room): no new job is taken until there is room; running jobs are held and go on by themselves, reads and cancels work; retry after Retry-After seconds")
		return
	default:
		h.log.Warn("submit failed", slog.String(logKeyCaller, c.Name), slog.String("err", err.Error()))
		writeError(w, http.StatusInternalServerError, "internal error", "try again; if it persists, report it")
		return
	}
	h.log.Info("job submitted", slog.String(logKeyJobID, id), slog.String(logKeyCaller, c.Name),
		slog.Int(logKeyTargets, len(req.Targets)), slog.Bool("reused", reused))
	loc := "/v1/batch/" + id
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusAccepted, submitResponse{ID: id, Reused: reused, Status: loc, Location: loc})
}

// idempotencyKey returns r's Idempotency-Key header ("" if none), or
// writes 400 and returns false if it is given twice or is not 1 to
// [engine.MaxIdempotencyKey] printable characters.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	vs := r.Header.Values(headerIdempotencyKey)
	switch {
	case len(vs) == 0:
		return "", true
	case len(vs) > 1:
		writeError(w, http.StatusBadRequest, "bad Idempotency-Key header: given more than once", "send one Idempotency-Key header")
		return "", false
	}
	if err := engine.CheckIdempotencyKey(vs[0]); err != nil {
		writeError(w, http.StatusBadRequest, "bad Idempotency-Key header",
			fmt.Sprintf("give 1 to %d bytes of printable characters (no tab or control character, no space at either end)", engine.MaxIdempotencyKey))
		return "", false
	}
	return vs[0], true
}

// headerIdempotencyKey is the header of a caller's own idempotency key.
const headerIdempotencyKey = "Idempotency-Key"

// optionNames are the names of [engine.Options] as spelled in JSON.
var optionNames = []string{"mode", "question", "pages", "grep", "jq", "context", "recover"}

// unknownOptionError is a submit body whose target sets an option that
// has no name in [engine.Options]: answered 422, naming it.
type unknownOptionError struct {
	target int
	name   string
}

func (e *unknownOptionError) Error() string {
	return fmt.Sprintf("target %d: unknown option %s", e.target, quoteName(e.name))
}

// quoteName quotes a name taken from a request for an error answer, cut
// to 64 bytes.
func quoteName(s string) string {
	if len(s) > 64 {
		s = strings.ToValidUTF8(s[:64], "") + "…"
	}
	return strconv.Quote(s)
}

// unhonoured returns the name of the first option o sets that the
// FetchFunc does not honour, or "".
func (h *Handler) unhonoured(o *engine.Options) string {
	for _, opt := range []struct {
		name string
		set  bool
	}{
		{"mode", o.Mode != ""}, {"question", o.Question != ""}, {"pages", o.Pages != ""},
		{"grep", o.Grep != ""}, {"jq", o.JQ != ""}, {"context", o.Context != nil}, {"recover", o.Recover},
	} {
		if opt.set && !slices.Contains(h.o.Honoured, opt.name) {
			return opt.name
		}
	}
	return ""
}

// honoured lists the options the server honours, for a hint.
func (h *Handler) honoured() string {
	if len(h.o.Honoured) == 0 {
		return "none"
	}
	return strings.Join(h.o.Honoured, ", ")
}

// retryAfter sets a 429's or a 503's Retry-After ([Options.RetryAfter]),
// in whole seconds.
func (h *Handler) retryAfter(w http.ResponseWriter) {
	s := int64((h.o.RetryAfter + 999_999_999) / 1e9)
	w.Header().Set("Retry-After", strconv.FormatInt(s, 10))
}

var (
	// errBadURL is a target URL that is not absolute http(s).
	errBadURL = errors.New("not an absolute http or https URL")
	// errBadPort is a target URL whose port is not 1 to 65535.
	errBadPort = errors.New("port not 1 to 65535")
)

// checkURL accepts an absolute http(s) URL with a host, no user info, and
// a port, if any, of 1 to 65535.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return errBadURL
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return errBadPort
		}
	}
	return nil
}

// decodeSubmit decodes a POST /v1/batch body strictly: UTF-8, one JSON
// value, and every field name spelled exactly as the contract spells it,
// once per object. encoding/json alone would take "URL" for "url" (it
// matches names without regard to case), keep the last of two "url"s (a
// proxy may have read the first), and turn bytes that are not UTF-8 into
// U+FFFD. A body otherwise well formed whose target sets an option with
// no name in [engine.Options] is an *unknownOptionError (422, not 400:
// the body is valid, the option is not one).
func decodeSubmit(body []byte, req *submitRequest) error {
	if !utf8.Valid(body) {
		return errors.New("body is not UTF-8")
	}
	unknown, err := checkFieldNames(body)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if unknown == nil {
		dec.DisallowUnknownFields()
	}
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
	if unknown != nil {
		return unknown
	}
	return nil
}

// describeJSONError says what is wrong with a submit body in the API's
// terms, never Go's ("cannot unmarshal object into Go struct field
// submitRequest.targets of type []engine.Target").
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		switch f := te.Field; {
		case f == "":
			return `the body must be one JSON object: {"targets": […]}`
		case f == "targets":
			return `targets must be a list of {"url": …}`
		case f == "targets.url":
			return "url must be a string"
		case f == "targets.options":
			return `options must be an object such as {"mode": "…"}`
		case strings.HasPrefix(f, "targets.options."):
			want := "a string"
			if te.Type != nil && te.Type.Kind() == reflect.Bool {
				want = "true or false"
			}
			return "option " + strings.TrimPrefix(f, "targets.options.") + " must be " + want
		default:
			return f + " has the wrong type"
		}
	case errors.As(err, &se):
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too soon"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// The field names a submit body may use: those of [submitRequest] at the
// top, of [engine.Target] in a target, of [engine.Options] in a target's
// options; submitFields are all of them, for an object found elsewhere
// (the decoder refuses its type).
var (
	topFields    = map[string]bool{"targets": true}
	targetFields = map[string]bool{"url": true, "options": true}
	optionFields = map[string]bool{"mode": true, "question": true, "pages": true, "grep": true, "jq": true, "context": true, "recover": true}
	submitFields = map[string]bool{
		"targets": true, "url": true, "options": true,
		"mode": true, "question": true, "pages": true, "grep": true, "jq": true, "context": true, "recover": true,
	}
)

// The kinds of JSON containers in a submit body.
const (
	inOther   = iota // an object or array where the body has none (a wrong type)
	inTop            // the body
	inTargets        // the targets array
	inTarget         // a target
	inOptions        // a target's options
	inSkipped        // the value of an unknown option, and all within it: not checked
)

// checkFieldNames refuses an object key that is not one of its object's
// fields exactly (400), or that an object has twice. The first key inside
// a target's options that names no option is returned, not refused, for
// a 422 once the rest of the body is known good. It leaves syntax errors
// to the decoder, which reports them better.
func checkFieldNames(body []byte) (*unknownOptionError, error) {
	type container struct {
		kind   int
		object bool
		atKey  bool   // an object, before a key (or its end)
		key    string // an object's last key
		n      int    // an array's values so far
		seen   map[string]bool
	}
	var (
		stack   []*container
		unknown *unknownOptionError
		target  = -1 // the index of the target being read
	)
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return unknown, nil // io.EOF, or a syntax error for Decode to report
		}
		if n := len(stack); n > 0 && stack[n-1].atKey {
			if key, ok := tok.(string); ok {
				c := stack[n-1]
				fields := submitFields
				switch c.kind {
				case inTop:
					fields = topFields
				case inTarget:
					fields = targetFields
				case inOptions:
					fields = optionFields
				}
				switch {
				case c.kind == inSkipped:
				case c.seen[key]:
					return nil, fmt.Errorf("duplicate field %q", key)
				case c.kind == inOptions && !fields[key]:
					if unknown == nil {
						unknown = &unknownOptionError{target: target, name: key}
					}
				case !fields[key]:
					return nil, fmt.Errorf("unknown field %q", key)
				}
				c.seen[key], c.atKey, c.key = true, false, key
				continue
			}
		}
		// What a container opened here is: known by where it is.
		kind := inOther
		if n := len(stack); n == 0 {
			kind = inTop
		} else {
			switch p := stack[n-1]; {
			case p.kind == inSkipped || p.kind == inOptions && !optionFields[p.key]:
				kind = inSkipped
			case p.kind == inTop && p.key == "targets" && tok == json.Delim('['):
				kind = inTargets
			case p.kind == inTargets && tok == json.Delim('{'):
				kind, target = inTarget, p.n
			case p.kind == inTarget && p.key == "options" && tok == json.Delim('{'):
				kind = inOptions
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &container{kind: kind, object: true, atKey: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &container{kind: kind})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value has ended: an object around it wants its next key; an
		// array counts it.
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].atKey = true
			} else {
				stack[n-1].n++
			}
		}
	}
}
