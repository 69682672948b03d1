// Package apispec checks the API against its OpenAPI document, for the
// tests of package httpapi (internal and external alike): [Conform] wraps
// a handler so that each request to /v1/ and the handler's answer to it
// are validated with kin-openapi's openapi3filter. So the document cannot
// drift from the code: a status, a header or a field the document does
// not describe fails the test that caused it. Only tests import it.
package apispec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Load loads and validates doc, the API's OpenAPI document, and makes its
// router. It is done once: later calls return the first's result.
func Load(doc []byte) (*Spec, error) {
	loadOnce.Do(func() { loaded, loadErr = load(doc) })
	return loaded, loadErr
}

var (
	loadOnce sync.Once
	loaded   *Spec
	loadErr  error
)

func load(data []byte) (*Spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	doc.Servers = nil // any host: the tests' servers are on loopback ports
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return &Spec{doc: doc, router: router}, nil
}

// Spec is a loaded document and its router.
type Spec struct {
	doc    *openapi3.T
	router routers.Router
}

// Doc is the loaded document.
func (s *Spec) Doc() *openapi3.T { return s.doc }

// bearerOnly is the document's one security scheme, as the handler reads
// it: a Bearer key (which key is the handler's to judge).
func bearerOnly(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, key, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if in.SecuritySchemeName != "bearer" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return errors.New("no bearer key")
	}
	return nil
}

// Checker is a handler under the conformance check. Make one with
// [NewChecker] or [Conform]; it is safe for concurrent use.
type Checker struct {
	next http.Handler
	spec *Spec
	mu   sync.Mutex
	bad  []string // the violations
	seen int      // exchanges checked
}

// NewChecker returns next under the conformance check against spec.
func NewChecker(spec *Spec, next http.Handler) *Checker {
	return &Checker{next: next, spec: spec}
}

// Conform wraps h in the conformance check against doc for t (once: h
// already wrapped is returned as it is). Violations are collected (a fuzz
// target may not fail its F from a handler) and reported at t's cleanup:
// register it before the servers' cleanups, so that it runs after them.
func Conform(t testing.TB, doc []byte, h http.Handler) http.Handler {
	t.Helper()
	if c, ok := h.(*Checker); ok {
		return c
	}
	spec, err := Load(doc)
	if err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	c := NewChecker(spec, h)
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, v := range c.bad {
			t.Errorf("OpenAPI conformance: %s", v)
		}
	})
	return c
}

// Violations returns the violations found so far (at most 20).
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.bad)
}

// Seen is the number of exchanges checked.
func (c *Checker) Seen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

func (c *Checker) violation(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) < 20 {
		c.bad = append(c.bad, fmt.Sprintf(format, args...))
	}
}

// ServeHTTP serves r, keeping a copy of what the handler reads of its
// body and of what it writes, then checks both. Nothing is held back: the
// answer streams as it would unwrapped. An answer cut short (a panic, a
// client gone) is not checked.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		c.next.ServeHTTP(w, r)
		return
	}
	in := &teeBody{}
	if r.Body != nil && r.Body != http.NoBody {
		in.rc = r.Body
		r.Body = in
	}
	out := &teeWriter{ResponseWriter: w}
	c.next.ServeHTTP(out, r)
	if out.err != nil {
		return
	}
	c.check(r, in, out)
}

// checked holds the exchanges found conforming, by a hash of all the
// check reads of them: the same exchange again (a poll of a job that has
// not changed) is not validated twice.
var checked sync.Map

// exchangeKey hashes what the check reads of an exchange.
func exchangeKey(r *http.Request, in *teeBody, out *teeWriter, code int) [sha256.Size]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%v\x00%d\x00", r.Method, r.URL.RequestURI(), len(r.Header.Values("Authorization")), in.eof, code)
	for _, k := range []string{"Authorization", "Content-Type", "Idempotency-Key"} {
		fmt.Fprintf(h, "%q\x00", r.Header.Values(k))
	}
	h.Write(in.buf.Bytes())
	h.Write([]byte{0})
	for _, k := range slices.Sorted(maps.Keys(out.Header())) {
		fmt.Fprintf(h, "%s=%q\x00", k, out.Header().Values(k))
	}
	h.Write(out.buf.Bytes())
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func (c *Checker) check(r *http.Request, in *teeBody, out *teeWriter) {
	code := out.code
	if code == 0 {
		code = http.StatusOK
	}
	c.mu.Lock()
	c.seen++
	c.mu.Unlock()
	key := exchangeKey(r, in, out, code)
	if _, ok := checked.Load(key); ok {
		return
	}
	before := len(c.Violations())
	defer func() {
		if len(c.Violations()) == before {
			checked.Store(key, true)
		}
	}()
	what := fmt.Sprintf("%s %.120s → %d", r.Method, r.URL.RequestURI(), code)
	// A path that is not clean is net/http's ServeMux's to redirect, as
	// the document says, before the API sees it.
	if p := r.URL.Path; path.Clean(p) != strings.TrimSuffix(p, "/") {
		if code/100 != 3 && code != http.StatusNotFound && code != http.StatusUnauthorized {
			c.violation("%s: a path that is not clean answered %d", what, code)
		}
		return
	}
	// The request as the document sees it: on a host, its path without a
	// trailing slash (the handler's rule), its body as the handler read it,
	// JSON whatever its Content-Type says (as the document has it); HEAD is
	// GET without the body.
	req := r.Clone(context.Background())
	req.URL.Scheme, req.URL.Host = "http", "localhost"
	if p := req.URL.Path; len(p) > len("/v1/") && strings.HasSuffix(p, "/") {
		req.URL.Path, req.URL.RawPath = strings.TrimSuffix(p, "/"), ""
	}
	req.Body = io.NopCloser(bytes.NewReader(in.buf.Bytes()))
	if in.eof && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Method == http.MethodHead {
		req.Method = http.MethodGet
	}
	route, params, err := c.spec.router.FindRoute(req)
	if err != nil {
		// Outside the document: another path or method. The answer is
		// still an error of the document's shape.
		if code != http.StatusUnauthorized && code != http.StatusNotFound && code != http.StatusMethodNotAllowed && code != http.StatusBadRequest {
			c.violation("%s: a request outside the document (%v) answered %d", what, err, code)
		}
		if r.Method != http.MethodHead {
			c.errorShape(what, out.buf.Bytes())
		}
		return
	}
	opts := &openapi3filter.Options{AuthenticationFunc: bearerOnly, IncludeResponseStatus: true, MultiError: true,
		ExcludeRequestBody: !in.eof, ExcludeResponseBody: r.Method == http.MethodHead}
	reqIn := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(context.Background(), reqIn); err != nil && code < 400 {
		c.violation("%s: the handler took a request the document refuses: %v", what, err)
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqIn, Status: code, Header: out.Header(),
		Body: io.NopCloser(bytes.NewReader(out.buf.Bytes())), Options: opts,
	})
	if err != nil {
		c.violation("%s: the answer is not as the document says: %.600v", what, err)
	}
}

// errorShape checks body is the document's Error.
func (c *Checker) errorShape(what string, body []byte) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		c.violation("%s: the answer is not JSON: %.200s", what, body)
		return
	}
	if err := c.spec.doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.violation("%s: the answer is not an Error: %v", what, err)
	}
}

// teeBody keeps what is read of a request body; eof once it is read to
// its end.
type teeBody struct {
	rc  io.ReadCloser
	buf bytes.Buffer
	eof bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	if b.rc == nil {
		b.eof = true
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *teeBody) Close() error {
	if b.rc == nil {
		return nil
	}
	return b.rc.Close()
}

// teeWriter keeps a copy of the status and the bytes written, and the
// first write error (the client has gone: the answer is cut short).
type teeWriter struct {
	http.ResponseWriter
	code int
	buf  bytes.Buffer
	err  error
}

func (w *teeWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.buf.Write(p)
	n, err := w.ResponseWriter.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// Flush and Unwrap keep what the handler asks of the writer it is given.
func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
