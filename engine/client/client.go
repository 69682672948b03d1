package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The defaults of a [Client]'s options.
const (
	// DefaultMaxAttempts is how many times in all a request answered 429
	// or 503 is sent ([WithRetry]).
	DefaultMaxAttempts = 4
	// DefaultMaxWait is the longest wait before a retry: an answer whose
	// Retry-After is longer is returned, not waited for ([WithRetry]).
	DefaultMaxWait = 30 * time.Second
	// DefaultPollWait is the ?wait= of each long-poll of [Client.Wait]:
	// the API's cap ([WithPollWait]).
	DefaultPollWait = 60 * time.Second
	// firstBackoff is the wait before the first retry of an answer
	// without Retry-After; it doubles with each retry.
	firstBackoff = 500 * time.Millisecond
)

// Client is a client of one siftbatch server's batch API, for one API key.
// Create one with [New]. It is safe for concurrent use.
type Client struct {
	base        string // scheme://host[/prefix], without a trailing slash
	auth        string // "Bearer KEY"
	hc          *http.Client
	maxAttempts int
	maxWait     time.Duration
	pollWait    time.Duration
	// sleep waits d or until ctx is done (tests count the waits).
	sleep func(ctx context.Context, d time.Duration) error
	// onRetry, if set, is told of each wait before a retry.
	onRetry func(Retry)
}

// Retry is what a function given to [WithOnRetry] is told before the
// client waits to send a request again.
type Retry struct {
	// Err is the answer that asks for the retry: a 429 or a 503, its
	// message, hint and Retry-After.
	Err *Error
	// Wait is how long the client waits before it sends the request again.
	Wait time.Duration
	// Attempt is the number of the attempt that follows the wait (2 for
	// the first retry), of MaxAttempts in all.
	Attempt, MaxAttempts int
}

// Option configures a [Client] made by [New].
type Option func(*Client) error

// WithHTTPClient has the client send its requests with hc (a transport of
// its own, an in-process one, TLS settings). Default: a client of
// [http.DefaultTransport] without a timeout (a long-poll lasts up to
// 60 s; a request ends with its context). hc's Timeout, if set, must leave
// room for [Client.Wait]'s long-polls ([WithPollWait]).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("nil http client")
		}
		c.hc = hc
		return nil
	}
}

// WithRetry sets how many times in all a request answered 429 or 503 is
// sent (1: never again) and the longest wait before a retry: an answer
// whose Retry-After asks for longer is returned at once. Defaults
// [DefaultMaxAttempts] (4) and [DefaultMaxWait] (30 s).
func WithRetry(maxAttempts int, maxWait time.Duration) Option {
	return func(c *Client) error {
		if maxAttempts < 1 || maxWait < 0 {
			return errors.New("retry: maxAttempts must be at least 1 and maxWait not negative")
		}
		c.maxAttempts, c.maxWait = maxAttempts, maxWait
		return nil
	}
}

// WithOnRetry has the client call fn before each wait for a retry (a
// command line says on stderr why it waits, and until when). fn runs on
// the goroutine of the call that retries, and must not block. Default:
// nothing is told.
func WithOnRetry(fn func(Retry)) Option {
	return func(c *Client) error {
		c.onRetry = fn
		return nil
	}
}

// WithPollWait sets the ?wait= of each long-poll [Client.Wait] sends: at
// most the server's cap (httpapi.Options.MaxWait), else the server answers
// 400. Default [DefaultPollWait] (60 s, the API's default cap).
func WithPollWait(d time.Duration) Option {
	return func(c *Client) error {
		if d < time.Millisecond {
			return errors.New("poll wait must be at least 1ms")
		}
		c.pollWait = d
		return nil
	}
}

// New returns a client of the server at baseURL (such as
// "http://127.0.0.1:8080", or with a path prefix the API is mounted under,
// "https://example.com/sift") that presents key. The URL must be absolute
// http or https, without user info, query or fragment, and a port it
// names from 1 to 65535 (no connection could be made else); the key must be
// non-empty and hold no space or control character.
func New(baseURL, key string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("new client: the base URL must be an absolute http or https URL without user info, query or fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, errors.New("new client: the base URL's port must be from 1 to 65535")
		}
	}
	if key == "" || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, errors.New("new client: the key must be non-empty, without spaces or control characters")
	}
	c := &Client{
		base:        strings.TrimSuffix(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		auth:        "Bearer " + key,
		hc:          &http.Client{Transport: http.DefaultTransport},
		maxAttempts: DefaultMaxAttempts,
		maxWait:     DefaultMaxWait,
		pollWait:    DefaultPollWait,
		sleep:       sleep,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, fmt.Errorf("new client: %w", err)
		}
	}
	// The API never redirects: a redirect (a proxy's, or a mux cleaning a
	// path) is answered as it is, an *Error, never followed to another
	// resource whose answer would be decoded as the one asked for.
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	return c, nil
}

// sleep waits d, or until ctx is done: then ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request is one API request, sent again as it is on a retry.
type request struct {
	method string
	path   string // under the base URL: "/v1/batch/ID"
	query  url.Values
	body   []byte // nil: none
	header http.Header
	err    error // not sent: this error instead (see jobRequest)
}

// do sends rq, again after a 429 or 503 (see the package doc), and returns
// a success's answer, its body to be read and closed by the caller; any
// other answer is an *Error, its body read and closed. A request the
// network failed is never sent again.
func (c *Client) do(ctx context.Context, rq request) (*http.Response, error) {
	if rq.err != nil {
		return nil, rq.err
	}
	target := c.base + rq.path
	if len(rq.query) > 0 {
		target += "?" + rq.query.Encode()
	}
	for attempt := 1; ; attempt++ {
		var body io.Reader
		if rq.body != nil {
			body = bytes.NewReader(rq.body)
		}
		req, err := http.NewRequestWithContext(ctx, rq.method, target, body)
		if err != nil {
			return nil, err
		}
		for k, v := range rq.header {
			req.Header[k] = v
		}
		req.Header.Set("Authorization", c.auth)
		req.Header.Set("Accept", "application/json")
		if rq.body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, nil
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		closeBody(resp)
		e := newError(resp, b, time.Now())
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable || attempt >= c.maxAttempts {
			return nil, e
		}
		wait, ok := c.backoff(e.RetryAfter, attempt)
		if dl, has := ctx.Deadline(); !ok || has && time.Until(dl) < wait {
			// Asked to wait past the bound, or past ctx's deadline: the
			// answer now, rather than a sleep that ends in ctx's error.
			return nil, e
		}
		if c.onRetry != nil {
			c.onRetry(Retry{Err: e, Wait: wait, Attempt: attempt + 1, MaxAttempts: c.maxAttempts})
		}
		if err := c.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// backoff is the wait before retry number attempt (1, 2, …) after an
// answer with Retry-After ra (0: none): ra, or without one 500 ms doubling
// with each retry, plus up to a quarter more of jitter, so that clients
// turned away together do not come back together. It is never more than
// the client's maxWait; false if ra asks for more.
func (c *Client) backoff(ra time.Duration, attempt int) (time.Duration, bool) {
	base := ra
	if base <= 0 {
		base = firstBackoff << min(attempt-1, 16)
	}
	if base > c.maxWait {
		if ra > 0 {
			return 0, false
		}
		base = c.maxWait
	}
	wait := base
	if j := int64(base / 4); j > 0 {
		wait += time.Duration(rand.Int64N(j + 1))
	}
	return min(wait, max(c.maxWait, base)), true
}

// closeBody reads what is left of a small answer, so that its connection
// is used again, and closes it.
func closeBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
}

// getJSON sends rq and decodes a success's JSON into v.
func (c *Client) getJSON(ctx context.Context, rq request, v any) error {
	resp, err := c.do(ctx, rq)
	if err != nil {
		return err
	}
	defer closeBody(resp)
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read answer: %w", err)
	}
	return nil
}

// jobRequest is a request of job id, and of its target idx if idx ≥ 0.
// An id that cannot be a job's ("", ".", "..", or one with a '/', which a
// path would read as segments) is not sent: it answers the *Error of the
// API's 404.
func jobRequest(method, id string, idx int) request {
	if id == "" || id == "." || id == ".." || strings.Contains(id, "/") {
		return request{err: &Error{Status: http.StatusNotFound, Message: "job not found", Hint: "check the id; jobs are deleted a while after they finish"}}
	}
	p := "/v1/batch/" + url.PathEscape(id)
	if idx >= 0 {
		p += fmt.Sprintf("/%d", idx)
	}
	return request{method: method, path: p}
}
