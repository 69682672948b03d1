package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sift/batch/engine/client"
)

// maxAnswer caps the bytes of an API error answer decoded.
const maxAnswer = 64 << 10

// backend is where the tools' API requests go: the base URL and the HTTP
// client (in process for serve's /mcp). The tools make them with the API's
// Go client (package github.com/sift/batch/engine/client), but for
// batch_result, which streams GET /v1/batch/{id}/{idx} itself (do) to keep
// one page of the result: the Go client's Target decodes it whole.
type backend struct {
	hc   *http.Client
	base string // the API's base URL, without a trailing slash
}

// APIError is an answer of the API other than 2xx, as a tool reports it.
type APIError struct {
	Status     int           // the HTTP status
	Message    string        // the API's "error"
	Hint       string        // the API's "hint"
	RetryAfter time.Duration // a 429's or 503's Retry-After; 0 if none
}

// Error says what failed and what to do, in the words an agent acts on.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Message)
	if e.Hint != "" {
		b.WriteString(": ")
		b.WriteString(e.Hint)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %d seconds)", int((e.RetryAfter+time.Second-1)/time.Second))
	}
	return b.String()
}

// do sends one request with key as its Bearer key, and returns the answer
// if it is 2xx; any other is an *APIError (its body read and closed).
func (b *backend) do(ctx context.Context, key, method, path string, body []byte, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("new request: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ErrUnavailable
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	e := &APIError{Status: resp.StatusCode}
	var eb struct {
		Error string `json:"error"`
		Hint  string `json:"hint"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(&eb) == nil && eb.Error != "" {
		e.Message, e.Hint = eb.Error, eb.Hint
	} else {
		e.Message = strings.ToLower(http.StatusText(resp.StatusCode))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return nil, e
}

// handlerTransport is an [http.RoundTripper] that answers each request
// with an [http.Handler] in process: serve's /mcp calls its own API so,
// with no socket and no second authentication path. The answer streams
// through a pipe (answerPipe) as the handler writes it: the caller reads
// what it needs (a page of a result) and a body closed early stops the
// handler's write.
type handlerTransport struct{ h http.Handler }

// RoundTrip runs the handler on its own goroutine and returns once it has
// written its status, or ended.
func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	if r.RemoteAddr == "" {
		r.RemoteAddr = "127.0.0.1:0" // in process: no peer address
	}
	r.RequestURI = r.URL.RequestURI()
	pipe := newAnswerPipe()
	w := &pipeWriter{header: http.Header{}, pipe: pipe, ready: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				// http.ErrAbortHandler (an answer cut short) or a panic the
				// API's guard let through: the answer is incomplete.
				w.WriteHeader(http.StatusInternalServerError)
				pipe.closeWrite(io.ErrUnexpectedEOF)
				return
			}
			w.WriteHeader(http.StatusOK)
			pipe.closeWrite(nil)
		}()
		t.h.ServeHTTP(w, r)
	}()
	<-w.ready // the handler always writes a status, or ends
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)), StatusCode: w.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pipe, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is the ResponseWriter of handlerTransport.
type pipeWriter struct {
	header http.Header
	sent   http.Header // the header as it was when the status was written
	pipe   *answerPipe
	once   sync.Once
	code   int
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return // an informational answer: not the status
	}
	w.once.Do(func() {
		w.code, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pipe.write(p, false)
}

// WriteKept is Write for bytes that never change (httpx.KeptWriter): the
// reader is given them to keep.
func (w *pipeWriter) WriteKept(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pipe.write(p, true)
}

// Flush is a no-op: each Write reaches the reader as it is made.
func (w *pipeWriter) Flush() {}

// errorOf is the tool error for err: an *APIError as it is, a cancelled
// call as such, anything else without its text (which may name a host).
func errorOf(err error) error {
	var ae *APIError
	var ce *client.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return &APIError{Status: ce.Status, Message: ce.Message, Hint: ce.Hint, RetryAfter: ce.RetryAfter}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errors.New("the call was cancelled or timed out; call the tool again")
	case errors.Is(err, ErrUnavailable):
		return err
	default:
		return ErrUnavailable
	}
}
