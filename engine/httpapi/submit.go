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
)

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

// submit is POST /v1/batch. A request without a Body (nil: not one
// net/http read off a connection, which always has one, but one a cluster
// forwarded, whose message carries no body) is answered 405: a submit is
// never forwarded, any node takes it.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request, c *engine.Caller, class string) {
	if r.Body == nil {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed", "submit to any node: POST is not forwarded")
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
	if err := decodeSubmit(body, &req); err != nil {
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
	id, reused, err := h.r.Submit(r.Context(), c, class, req.Targets)
	switch {
	case err == nil:
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
		writeError(w, http.StatusServiceUnavailable, "shutting down", "retry against a running server")
		return
	case errors.Is(err, engine.ErrNoAdmission):
		h.retryAfter(w)
		writeError(w, http.StatusServiceUnavailable, "admission unavailable", "the cluster could not count your jobs just now (a node joined or left); retry after Retry-After seconds")
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
	writeJSON(w, http.StatusAccepted, submitResponse{ID: id, Reused: reused, Status: loc})
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

// retryAfter sets a 429's Retry-After, in whole seconds.
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
