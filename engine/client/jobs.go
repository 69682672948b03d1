package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sift/batch/engine/apitype"
)

// Options are a target's fetch options, as the API spells them. A server
// honours some and refuses the others (422 naming the option); see the
// README's "The HTTP API". The zero value sets none.
type Options struct {
	Mode     string `json:"mode,omitempty"`
	Question string `json:"question,omitempty"`
	Pages    string `json:"pages,omitempty"`
	Grep     string `json:"grep,omitempty"`
	JQ       string `json:"jq,omitempty"`
	Context  *bool  `json:"context,omitempty"` // nil: the fetch's own default
	Recover  bool   `json:"recover,omitempty"`
}

// Target is one URL to fetch, with its options: the API's
// {"url","options"}.
type Target struct {
	URL     string  `json:"url"`
	Options Options `json:"options,omitzero"`
}

// Submitted is the answer to a submit: the API's {"id","reused",
// "status","location"}, defined in package
// github.com/sift/batch/engine/apitype. Its Location is the job's URL
// path, "/v1/batch/{id}" (filled from "status", the same path, when a
// server older than "location" answers); its Status is that same path
// too, not a status word: the contract's name for it.
type Submitted = apitype.Submitted

// SubmitOptions are [Client.SubmitWith]'s options.
type SubmitOptions struct {
	// IdempotencyKey, if set, is sent as the Idempotency-Key header: the
	// server matches the job by it instead of by the targets, and answers
	// 422 if it is bound to other targets while that job is reusable. 1 to
	// 255 bytes of printable UTF-8 (a space is printable, but not at either
	// end, which HTTP drops; a tab is not), else SubmitWith fails without sending anything, with the *Error of
	// the API's 400 (matching [ErrBadRequest]). A new key asks for a
	// fresh job.
	IdempotencyKey string
}

// Job is a job: the API's {"id","status","error","targets_total",
// "targets_done","targets_failed","created_at","started_at","ended_at",
// "targets"}; TargetStatus a job's target, and Result a done target's
// result. Each is defined once, in package
// github.com/sift/batch/engine/apitype, for the API, this client and the
// MCP tools alike.
type (
	Job          = apitype.Job
	TargetStatus = apitype.TargetStatus
	Result       = apitype.Result
)

// Submit submits targets as a new job, or finds the caller's earlier job
// of the same targets, and answers which ([Submitted.Reused]).
//
// Submit is idempotent by construction: the server keys a job by its
// caller and its targets (their URLs and options, in order), and while
// that job is reusable (queued, running, or ended done or partial, within
// the server's TTL; a failed or cancelled job is not) a submit of the same
// targets answers it, Reused true, instead of starting another. So the
// client sends a submit again after a 429 or 503, like a read: at worst the
// retry finds the job the first one made. A submit the network failed is
// not sent again (see the package doc); sending it again is as safe, and
// left to the caller.
func (c *Client) Submit(ctx context.Context, targets []Target) (Submitted, error) {
	return c.SubmitWith(ctx, targets, SubmitOptions{})
}

// SubmitWith is [Client.Submit] with options: with an IdempotencyKey, the
// server keys the job by it (it stays idempotent: the same key with the
// same targets answers the same job).
func (c *Client) SubmitWith(ctx context.Context, targets []Target, opt SubmitOptions) (Submitted, error) {
	body, err := json.Marshal(struct {
		Targets []Target `json:"targets"`
	}{targets})
	if err != nil {
		return Submitted{}, fmt.Errorf("submit: %w", err)
	}
	rq := request{method: http.MethodPost, path: "/v1/batch", body: body}
	if k := opt.IdempotencyKey; k != "" {
		if len(k) > maxIdempotencyKey || !printable(k) || k[0] == ' ' || k[len(k)-1] == ' ' {
			return Submitted{}, fmt.Errorf("submit: %w", errBadIdempotencyKey())
		}
		rq.header = http.Header{"Idempotency-Key": {k}}
	}
	var s Submitted
	if err := c.getJSON(ctx, rq, &s); err != nil {
		return Submitted{}, fmt.Errorf("submit: %w", err)
	}
	if s.Location == "" {
		s.Location = s.Status // a server from before "location"
	}
	return s, nil
}

// maxIdempotencyKey is the longest Idempotency-Key the API takes, in
// bytes (engine.MaxIdempotencyKey).
const maxIdempotencyKey = 255

// errBadIdempotencyKey is the refusal of a key the API would refuse, as
// the API words it (400): SubmitWith refuses it without a request.
func errBadIdempotencyKey() *Error {
	return &Error{Status: http.StatusBadRequest, Message: "bad Idempotency-Key header",
		Hint: "give 1 to 255 bytes of printable characters (no tab or control character, no space at either end)"}
}

// printable reports whether s is UTF-8 whose every rune is printable
// (unicode.IsPrint: a space is, a tab or a control character is not), as
// the server wants an idempotency key.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Job returns job id and its targets, without their results.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	if err := c.getJSON(ctx, jobRequest(http.MethodGet, id, -1), &j); err != nil {
		return Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

// Target returns target idx of job id, with its result if it is done.
func (c *Client) Target(ctx context.Context, id string, idx int) (TargetStatus, error) {
	if idx < 0 {
		return TargetStatus{}, fmt.Errorf("job %s target %d: negative index", id, idx)
	}
	var t TargetStatus
	if err := c.getJSON(ctx, jobRequest(http.MethodGet, id, idx), &t); err != nil {
		return TargetStatus{}, fmt.Errorf("job %s target %d: %w", id, idx, err)
	}
	return t, nil
}

// Results streams job id's targets with their results (GET
// /v1/batch/{id}?results=1), one at a time: each target is decoded from
// the answer as the loop asks for it, and the client holds no other (it
// reads at most 64 KiB past the target it decodes), so a job of many large
// results takes the memory of one. An error ends the
// sequence: the request's (an *Error, before any target), or an answer cut
// short, which wraps [io.ErrUnexpectedEOF] (the server drops the
// connection if the job is deleted meanwhile), or ctx's end, after which
// no target is handed over. Leaving the loop early closes the answer.
func (c *Client) Results(ctx context.Context, id string) iter.Seq2[TargetStatus, error] {
	return func(yield func(TargetStatus, error) bool) {
		rq := jobRequest(http.MethodGet, id, -1)
		rq.query = url.Values{"results": {"1"}}
		resp, err := c.do(ctx, rq)
		if err != nil {
			yield(TargetStatus{}, fmt.Errorf("job %s results: %w", id, err))
			return
		}
		defer resp.Body.Close()
		fail := func(err error) {
			switch {
			case ctx.Err() != nil:
				yield(TargetStatus{}, fmt.Errorf("job %s results: %w", id, ctx.Err()))
				return
			case errors.Is(err, io.EOF):
				err = io.ErrUnexpectedEOF
			}
			yield(TargetStatus{}, fmt.Errorf("job %s results: answer cut short: %w", id, err))
		}
		// The decoder reads only what the target it decodes lacks, at most
		// readChunk bytes at a time: so it holds that target and at most
		// readChunk bytes of the next, however much the server has sent.
		dec := json.NewDecoder(chunkReader{resp.Body})
		if err := expectDelim(dec, '{'); err != nil {
			fail(err)
			return
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				fail(err)
				return
			}
			if key, _ := tok.(string); key != "targets" {
				var skip json.RawMessage // a field of the job's head: small
				if err := dec.Decode(&skip); err != nil {
					fail(err)
					return
				}
				continue
			}
			if err := expectDelim(dec, '['); err != nil {
				fail(err)
				return
			}
			for dec.More() {
				var t TargetStatus
				if err := dec.Decode(&t); err != nil {
					fail(err)
					return
				}
				if err := ctx.Err(); err != nil {
					// The transport closes the answer a moment after ctx
					// ends; no target is handed over after.
					fail(err)
					return
				}
				if !yield(t, nil) {
					return
				}
			}
			if err := expectDelim(dec, ']'); err != nil {
				fail(err)
				return
			}
		}
		if err := expectDelim(dec, '}'); err != nil {
			fail(err)
		}
	}
}

// readChunk is the most a Results answer is read ahead of the target
// decoded.
const readChunk = 64 << 10

// chunkReader reads at most readChunk bytes at a time.
type chunkReader struct{ r io.Reader }

func (c chunkReader) Read(p []byte) (int, error) {
	if len(p) > readChunk {
		p = p[:readChunk]
	}
	return c.r.Read(p)
}

// expectDelim reads the next token, which must be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("want %q, got %v", d, tok)
	}
	return nil
}

// ListOptions select the jobs [Client.List] and [Client.ListPage] return.
type ListOptions struct {
	// Status keeps the jobs of one status, or "live" (queued and
	// running) or "terminal" (the others). Default: every job.
	Status string
	// Limit is the jobs per page, 1 to 100. Default (0): the server's,
	// 20.
	Limit int
	// Cursor starts at the page a page's NextCursor names. Default: the
	// first page.
	Cursor string
	// Caller, for an admin key only, lists that caller's jobs, or every
	// caller's for "*" (each [Job] with its Caller). Any other key's list
	// by caller is an error matching [ErrForbidden]. Default: the key's
	// own jobs.
	Caller string
}

// Page is a page of the caller's jobs: the API's {"jobs","next_cursor",
// "unavailable_nodes"}.
type Page struct {
	// Jobs are the page's jobs, newest first, without their targets.
	Jobs []Job `json:"jobs"`
	// NextCursor names the next page; "" on the last.
	NextCursor string `json:"next_cursor,omitempty"`
	// UnavailableNodes, on a cluster, names the nodes whose jobs the
	// page may lack.
	UnavailableNodes []string `json:"unavailable_nodes,omitempty"`
}

// ListPage returns one page of the caller's jobs (or, for an admin key,
// of [ListOptions.Caller]'s), newest first.
func (c *Client) ListPage(ctx context.Context, opt ListOptions) (Page, error) {
	q := url.Values{}
	if opt.Status != "" {
		q.Set("status", opt.Status)
	}
	if opt.Limit != 0 {
		q.Set("limit", strconv.Itoa(opt.Limit))
	}
	if opt.Cursor != "" {
		q.Set("cursor", opt.Cursor)
	}
	if opt.Caller != "" {
		q.Set("caller", opt.Caller)
	}
	var p Page
	if err := c.getJSON(ctx, request{method: http.MethodGet, path: "/v1/batch", query: q}, &p); err != nil {
		return Page{}, fmt.Errorf("list jobs: %w", err)
	}
	return p, nil
}

// List iterates over the caller's jobs, newest first, page after page
// (each page one request, sent when the loop reaches it). An error ends
// the sequence.
func (c *Client) List(ctx context.Context, opt ListOptions) iter.Seq2[Job, error] {
	return func(yield func(Job, error) bool) {
		for {
			p, err := c.ListPage(ctx, opt)
			if err != nil {
				yield(Job{}, err)
				return
			}
			for _, j := range p.Jobs {
				if !yield(j, nil) {
					return
				}
			}
			if p.NextCursor == "" {
				return
			}
			opt.Cursor = p.NextCursor
		}
	}
}

// Wait waits until job id has ended, within has passed (0: no bound) or ctx
// is done, by long-polls (GET /v1/batch/{id}?wait=…, each at most the
// poll wait, [WithPollWait]), and returns the job as it then stands, with
// its targets: ended ([Job.Ended]), or not if within passed. ctx being done
// is its error.
func (c *Client) Wait(ctx context.Context, id string, within time.Duration) (Job, error) {
	return c.wait(ctx, id, within, c.pollWait, nil)
}

// WaitProgress is [Client.Wait] that calls progress with the job each time
// a poll finds it changed (its status or counts), the first time
// included, on the caller's goroutine; its polls wait at most every (at
// least 1 ms; at most the poll wait), so that progress comes at least that
// often while targets land.
func (c *Client) WaitProgress(ctx context.Context, id string, within, every time.Duration, progress func(Job)) (Job, error) {
	every = min(every, c.pollWait)
	every = time.Duration(int64(every+time.Millisecond-1) / 1e6 * 1e6) // whole milliseconds, rounded up
	if every < time.Millisecond {
		every = time.Millisecond
	}
	return c.wait(ctx, id, within, every, progress)
}

func (c *Client) wait(ctx context.Context, id string, within, poll time.Duration, progress func(Job)) (Job, error) {
	var end time.Time
	if within > 0 {
		end = time.Now().Add(within)
	}
	var last Job
	for first := true; ; first = false {
		w := poll
		if !end.IsZero() {
			left := time.Until(end).Truncate(time.Millisecond)
			if left <= 0 && !first {
				return last, nil
			}
			w = min(w, left)
		}
		q := url.Values{}
		if w > 0 {
			q.Set("wait", w.String())
		}
		var j Job
		rq := jobRequest(http.MethodGet, id, -1)
		rq.query = q
		if err := c.getJSON(ctx, rq, &j); err != nil {
			return last, fmt.Errorf("wait for job %s: %w", id, err)
		}
		if progress != nil && (first || j.Status != last.Status || j.TargetsDone != last.TargetsDone || j.TargetsFailed != last.TargetsFailed) {
			progress(j)
		}
		last = j
		if j.Ended() {
			return j, nil
		}
	}
}

// Cancel cancels job id, if it is live: its running targets stop, its
// pending ones never start. A job that has already ended is an error
// matching [ErrConflict]. A cancel is sent again after a 429 or 503, which
// siftbatch answers before it touches the job; should a proxy in between
// answer 503 after the server cancelled it, the retry finds the job ended,
// ErrConflict: ended either way, by this cancel or on its own.
func (c *Client) Cancel(ctx context.Context, id string) error {
	var out struct {
		Cancelled bool `json:"cancelled"`
	}
	if err := c.getJSON(ctx, jobRequest(http.MethodDelete, id, -1), &out); err != nil {
		return fmt.Errorf("cancel job %s: %w", id, err)
	}
	if !out.Cancelled {
		return fmt.Errorf("cancel job %s: the server did not say it was cancelled", id)
	}
	return nil
}
