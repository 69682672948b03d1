package mcpserver

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/engine/apitype"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/httpapi"
)

// Sentinel errors.
var (
	// ErrUnavailable is a tool error when the API could not be reached or
	// its answer read.
	ErrUnavailable = errors.New("the batch API is unavailable; try again in a moment")
	// ErrNoKey is returned by [ServeStdio] for an empty key.
	ErrNoKey = errors.New("no API key")
)

// The defaults a zero [Options] field takes.
const (
	// DefaultMaxWait caps batch_wait's wait (the API's own cap, 60s).
	DefaultMaxWait = 60 * time.Second
	// DefaultPollEvery is how often batch_wait looks at the job's
	// progress while it waits.
	DefaultPollEvery = time.Second
	// Name is the server's name in the MCP handshake.
	Name = "siftbatch"
)

// Log keys: no attribute logged ever holds a URL, a host, a key or a
// panic value.
const (
	logKeyTool  = "tool"
	logKeyJobID = "job_id"
	logKeyCode  = "code"
)

// Options configure the MCP server. The zero value takes the defaults.
type Options struct {
	// Version is the server's version in the MCP handshake; default "dev".
	Version string
	// MaxWait caps batch_wait's wait; default [DefaultMaxWait]. It
	// must not pass the API's own ?wait= cap. Under a second, batch_wait
	// takes seconds 1 only, and waits MaxWait.
	MaxWait time.Duration
	// PollEvery is how often batch_wait asks the API for the job's
	// progress (a ?wait= of this length), to send a progress
	// notification when targets have landed; default [DefaultPollEvery].
	PollEvery time.Duration
	// PageBytes is batch_result's page size, in bytes of the content's
	// JSON text; default and cap [MaxPageBytes], at least 16.
	PageBytes int
	// MaxCallsPerCaller caps, for [NewHandler], the tool calls of one
	// caller (API key) that run at once: past it a call is answered 429
	// with Retry-After before it runs; for [ServeStdio], the tool calls
	// in flight until their answers are written. Default
	// [DefaultMaxCallsPerCaller] (8).
	MaxCallsPerCaller int
	// Answers, for [NewHandler], is the callers' answer budget that the
	// MCP answers are counted in while they are written, and that refuses
	// a caller's tool calls (429) while its unread answers fill it: the
	// API's own ([httpapi.Handler] is one). Default: the api handler given
	// to NewHandler if it is one, else answers are not counted.
	Answers AnswerBudget
	// Log receives a line per tool call at Debug (tool, job id, status);
	// default: nothing is logged.
	Log *slog.Logger
	// TracerProvider, if set, traces each tool call ([SpanToolCall]);
	// the API requests it makes in process are its children, and the
	// requests to a remote server ([ServeStdio]) carry its W3C
	// traceparent. Default nil: no spans.
	TracerProvider trace.TracerProvider
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxWait < 0 || o.PollEvery < 0 || o.PageBytes < 0 || o.MaxCallsPerCaller < 0 {
		return o, errors.New("mcpserver: negative option")
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.PollEvery == 0 {
		o.PollEvery = DefaultPollEvery
	}
	if o.MaxCallsPerCaller == 0 {
		o.MaxCallsPerCaller = DefaultMaxCallsPerCaller
	}
	if o.PageBytes == 0 || o.PageBytes > MaxPageBytes {
		o.PageBytes = MaxPageBytes
	}
	o.PageBytes = max(o.PageBytes, minPageBytes)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// keyFunc tells the API key a tool call is made with.
type keyFunc func(*mcp.CallToolRequest) (string, bool)

// tools is the six tools over one backend.
type tools struct {
	b      *backend
	key    keyFunc
	o      Options
	ending context.Context // done: batch_wait answers at once (nil: never)
	reqs   *requests       // the HTTP requests the calls came in (nil: stdio)
}

// headerRequest is the header by which a tool call finds the HTTP request
// it came in ([requests]); a client's own is overwritten.
const headerRequest = "X-Siftbatch-Mcp-Request"

// requests are the HTTP requests being served, by the number given in
// their headerRequest: each one's context and the writer of its answer.
// The SDK's stateless handler runs a tool call on a context detached from
// its HTTP request (for older protocol versions): a batch_wait ends with
// its request's context, found here, so that it stops polling once its
// client has gone; batch_result hands its page to its answer's writer
// (splice).
type requests struct {
	seq atomic.Uint64
	m   sync.Map // string → *served
}

// served is one HTTP request being served.
type served struct {
	ctx context.Context
	sw  *spliceWriter
}

// tag numbers r in its header and keeps it while next serves it, its
// answer written through a spliceWriter.
func (rs *requests) tag(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := strconv.FormatUint(rs.seq.Add(1), 36)
		r.Header.Set(headerRequest, n)
		sw := &spliceWriter{ResponseWriter: w}
		rs.m.Store(n, &served{ctx: r.Context(), sw: sw})
		defer rs.m.Delete(n)
		next.ServeHTTP(sw, r)
		sw.end()
	})
}

// served is the HTTP request req came in, if known.
func (rs *requests) served(req *mcp.CallToolRequest) (*served, bool) {
	if rs == nil || req.Extra == nil || req.Extra.Header == nil {
		return nil, false
	}
	v, ok := rs.m.Load(req.Extra.Header.Get(headerRequest))
	if !ok {
		return nil, false
	}
	return v.(*served), true
}

// context is the context of the HTTP request req came in, if known.
func (rs *requests) context(req *mcp.CallToolRequest) (context.Context, bool) {
	s, ok := rs.served(req)
	if !ok {
		return nil, false
	}
	return s.ctx, true
}

// client is the API's Go client for one call, with key. It never retries
// a 429 or a 503: the tool error tells the agent when to.
func (t *tools) client(key string) (*client.Client, error) {
	c, err := client.New(t.b.base, key, client.WithHTTPClient(t.b.hc), client.WithRetry(1, 0),
		client.WithPollWait(max(t.o.PollEvery, time.Millisecond)))
	if err != nil {
		return nil, &APIError{Status: http.StatusUnauthorized, Message: "unauthorized", Hint: "send Authorization: Bearer KEY with a key the server knows"}
	}
	return c, nil
}

// Handler is serve's /mcp (see [NewHandler]). It is safe for concurrent
// use.
type Handler struct {
	h        http.Handler
	endWaits context.CancelFunc
	limits   *limits
}

// ServeHTTP answers one MCP request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// EndWaits has every pending batch_wait answer at once with the job as it
// stands, and later ones too, so that none holds up a graceful stop:
// register it with the server's [http.Server.RegisterOnShutdown], beside
// the API's own. It is idempotent and safe for concurrent use.
func (h *Handler) EndWaits() { h.endWaits() }

// NewHandler returns serve's /mcp: the MCP streamable HTTP transport,
// stateless, over api (the /v1/ [http.Handler], called in process). A
// request whose Bearer key auth does not know is answered 401 (503 if auth
// fails) before any MCP message is read; a tool call reaches the API with
// that same key, so its reads take the API's turns, shared fairly by
// caller, and its answer budget.
//
// Bounds, for a caller that would send many calls at once: a POST holds
// one JSON-RPC message: a batch (a JSON array) is refused, 400, whatever
// its MCP-Protocol-Version header says; at most
// [Options.MaxCallsPerCaller] tool calls of one caller run at once, and
// none while its unread answers fill its answer budget
// ([Options.Answers]): past either, 429 with Retry-After, before the call
// runs. Each answer's bytes are counted in the caller's budget while they
// are written, so a caller that stops reading stops being served. Stateless, no session outlives its HTTP request: nothing
// to expire, no cap on sessions to keep, and any node behind a load
// balancer answers any request.
func NewHandler(api http.Handler, auth httpapi.Authenticator, o Options) (*Handler, error) {
	if api == nil || auth == nil {
		return nil, errors.New("mcpserver: nil api or authenticator")
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	ending, end := context.WithCancel(context.Background())
	t := &tools{b: &backend{hc: &http.Client{Transport: handlerTransport{h: api}}, base: "http://siftbatch.invalid"},
		key: keyOfHeader, o: o, ending: ending, reqs: &requests{}}
	srv := t.server()
	// The SDK's guard against DNS rebinding (403 to a request that came
	// to a loopback address under another Host) is off: every request
	// needs a Bearer key, which a rebinding page does not have, and the
	// guard would refuse every request of a proxy on the same machine.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true})
	l := &limits{maxCalls: o.MaxCallsPerCaller, maxBody: mcp.DefaultMaxRequestBodyBytes, answers: o.Answers, calls: make(map[string]int)}
	if l.answers == nil {
		l.answers, _ = api.(AnswerBudget)
	}
	return &Handler{h: requireKey(auth, l.wrap(t.reqs.tag(unescapeHTML(h)))), endWaits: end, limits: l}, nil
}

// keyOfHeader is the Bearer key of the HTTP request a call came in.
func keyOfHeader(req *mcp.CallToolRequest) (string, bool) {
	if req.Extra == nil || req.Extra.Header == nil {
		return "", false
	}
	return bearer(req.Extra.Header)
}

func bearer(h http.Header) (string, bool) {
	if len(h.Values("Authorization")) != 1 {
		return "", false
	}
	scheme, key, ok := strings.Cut(h.Get("Authorization"), " ")
	key = strings.TrimSpace(key)
	return key, ok && strings.EqualFold(scheme, "Bearer") && key != ""
}

// requireKey answers 401 to a request without a key auth knows, as the
// API does.
func requireKey(auth httpapi.Authenticator, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r.Header)
		var err error = httpapi.ErrUnknownKey
		caller := ""
		if ok {
			c, _, aerr := auth.Authenticate(r.Context(), key)
			if err = aerr; err == nil && (c == nil || c.Name == "") {
				err = httpapi.ErrUnknownKey
			}
			if err == nil {
				caller = c.Name
			}
		}
		switch {
		case err == nil:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
		case errors.Is(err, httpapi.ErrThrottled):
			httpapi.WriteThrottled(w, err)
		case !errors.Is(err, httpapi.ErrUnknownKey):
			w.Header().Set("Retry-After", strconv.Itoa(int(httpapi.DefaultRetryAfter/time.Second)))
			writeHTTPError(w, http.StatusServiceUnavailable, "authentication unavailable", "try again later")
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="siftbatch"`)
			writeHTTPError(w, http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer KEY with a key the server knows")
		}
	})
}

func writeHTTPError(w http.ResponseWriter, code int, msg, hint string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"error": msg, "hint": hint})
}

// ServeStdio serves MCP over in and out (a command's stdin and stdout)
// until ctx is done or in ends, calling the API at baseURL
// (http://host:port of a serve) with key. hc, if nil, is a client with no
// overall timeout (a batch_wait long-polls). A baseURL or key the API's
// Go client refuses (user info, a query or a fragment in the URL; a space
// or a control character in the key) is refused at once, with the
// client's error: no tool call could be made with it. Its one caller is
// bounded as one caller of [NewHandler] is: a JSON-RPC batch is refused,
// and at most o.MaxCallsPerCaller tool calls are in flight until their
// answers are written to out (past it a call is answered at once with a
// tool error, 429, retry after 5 seconds).
func ServeStdio(ctx context.Context, baseURL, key string, hc *http.Client, in io.ReadCloser, out io.WriteCloser, o Options) error {
	if key == "" {
		return ErrNoKey
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("mcpserver: the server must be an http(s) URL such as http://127.0.0.1:8080")
	}
	if _, err := client.New(baseURL, key); err != nil {
		return fmt.Errorf("mcpserver: %w", err)
	}
	o, err = o.withDefaults()
	if err != nil {
		return err
	}
	if hc == nil {
		hc = &http.Client{}
	}
	hc = traced(hc, o.TracerProvider)
	t := &tools{b: &backend{hc: hc, base: strings.TrimRight(u.String(), "/")},
		key: func(*mcp.CallToolRequest) (string, bool) { return key, true }, o: o}
	w := &lockedWriter{w: &unescapeCloser{u: unescaper{w: out}, out: out}}
	tr := boundedTransport{Transport: &mcp.IOTransport{Reader: newNoBatches(in, w), Writer: w}, max: o.MaxCallsPerCaller}
	err = t.server().Run(ctx, tr)
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || ctx.Err() != nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve stdio: %w", err)
	}
	return nil
}

// server returns an MCP server with the six tools.
func (t *tools) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Version: t.o.Version}, &mcp.ServerOptions{
		Instructions: "siftbatch fetches many URLs as one batch job. Submit targets with batch_submit, " +
			"follow them with batch_wait (or batch_status), read each target's content with batch_result " +
			"(page by page), list your jobs with batch_list, stop one with batch_cancel.",
	})
	mcp.AddTool(s, &mcp.Tool{Name: "batch_submit", Description: descSubmit}, t.submit)
	mcp.AddTool(s, &mcp.Tool{Name: "batch_status", Description: descStatus}, t.status)
	mcp.AddTool(s, &mcp.Tool{Name: "batch_wait", Description: descWait}, t.wait)
	mcp.AddTool(s, &mcp.Tool{Name: "batch_result", Description: descResult}, t.result)
	mcp.AddTool(s, &mcp.Tool{Name: "batch_list", Description: descList}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "batch_cancel", Description: descCancel}, t.cancel)
	if t.o.TracerProvider != nil {
		s.AddReceivingMiddleware(traceTools(t.o.TracerProvider))
	}
	return s
}

// The tools' descriptions, written for an agent that has to act on them.
const (
	descSubmit = "Submit URLs to fetch as one batch job (up to the server's targets per job, 32 by default). " +
		"Answers the job's id, its status, and reused: true when the same targets were submitted recently " +
		"and that job is answered instead of a new one (give a new idempotency_key to get a fresh job). " +
		"Follow the job with batch_wait, then read each target with batch_result. " +
		"Options per target are honoured or refused, never ignored: this server's fetcher honours grep " +
		"(an RE2 expression: keep matching lines) and jq (a jq program run on a JSON page); " +
		"an option it does not honour is a 422 error naming it. A 429 error says when to retry."
	descStatus = "The job as GET /v1/batch/{id} answers it: its status (queued, running, done, partial, failed, " +
		"cancelled), its counts (targets_done counts stored targets, done or failed; targets_failed the failed ones), " +
		"created_at, started_at and ended_at, and each target's url, status, error, hint and duration_ms. " +
		"A target still pending in a job that has ended (cancelled, or failed by a restart or a shutdown) will " +
		"not run: its hint says why. Results are not included: read them with batch_result."
	descWait = "Wait until the job has ended, or at most seconds (1 to 60, default 60), and answer the job " +
		"as batch_status does. Sends a progress notification (progress = targets_done, total = targets_total) " +
		"each time targets land, when the call carries a progress token. If the job is still queued or " +
		"running when it answers, call it again."
	descResult = "One target's result: its content, one page at a time (pages of at most 256 KiB of the " +
		"content as JSON text, cut between characters), and its meta. page counts from 0; the answer says pages (how many) and " +
		"next_page (absent on the last page): call again with next_page to read on. A failed target " +
		"has no content but an error and a hint."
	descList = "Your jobs, newest first, as summaries. status filters: live, queued, running, done, " +
		"partial, failed, cancelled or terminal. limit is 1 to 100 (default 20); pass next_cursor as cursor " +
		"for the next page."
	descCancel = "Cancel a queued or running job: its targets not yet fetched are not fetched. " +
		"A job that has ended cannot be cancelled (a 409 error)."
)

// TargetIn is one target to fetch.
type TargetIn struct {
	URL     string    `json:"url" jsonschema:"the absolute http or https URL to fetch"`
	Options OptionsIn `json:"options,omitzero" jsonschema:"fetch options; a server refuses those its fetcher does not honour (422, naming the option): serve's honours grep and jq"`
}

// OptionsIn are a target's options, as the API spells them: an unknown one
// is refused by the schema, naming it.
type OptionsIn struct {
	Grep     string `json:"grep,omitempty" jsonschema:"an RE2 regular expression: keep the lines it matches (case-sensitive unless it starts with (?i))"`
	JQ       string `json:"jq,omitempty" jsonschema:"a jq program run on a JSON page; its output, one compact JSON value a line, is the content"`
	Mode     string `json:"mode,omitempty" jsonschema:"sift's own pipeline: text, summary… (refused by serve's fetcher)"`
	Question string `json:"question,omitempty" jsonschema:"sift's own pipeline: a question to answer from the page (refused by serve's fetcher)"`
	Pages    string `json:"pages,omitempty" jsonschema:"sift's own pipeline: the pages of a document to read (refused by serve's fetcher)"`
	Context  *bool  `json:"context,omitempty" jsonschema:"sift's own pipeline (refused by serve's fetcher)"`
	Recover  bool   `json:"recover,omitempty" jsonschema:"sift's own pipeline (refused by serve's fetcher)"`
}

// SubmitIn is batch_submit's input.
type SubmitIn struct {
	Targets        []TargetIn `json:"targets" jsonschema:"the URLs to fetch, at least one"`
	IdempotencyKey string     `json:"idempotency_key,omitempty" jsonschema:"optional: a key of yours for this submit; the same key with the same targets answers the same job while it is reusable, a new key a fresh job"`
}

// Submitted is batch_submit's output.
type Submitted struct {
	ID     string `json:"id" jsonschema:"the job's id"`
	Reused bool   `json:"reused" jsonschema:"true if a recent job with the same targets was answered instead of a new one"`
	Status string `json:"status" jsonschema:"the job's status: queued, running, done, partial, failed or cancelled"`
}

// IDIn is the input of the tools that take a job id.
type IDIn struct {
	ID string `json:"id" jsonschema:"the job's id, as batch_submit answered it"`
}

// WaitIn is batch_wait's input.
type WaitIn struct {
	ID      string `json:"id" jsonschema:"the job's id"`
	Seconds int    `json:"seconds,omitempty" jsonschema:"how long to wait at most, 1 to 60 (default 60)"`
}

// ResultIn is batch_result's input.
type ResultIn struct {
	ID   string `json:"id" jsonschema:"the job's id"`
	Idx  int    `json:"idx" jsonschema:"the target's index in the job, from 0"`
	Page int    `json:"page,omitempty" jsonschema:"the page of the content, from 0 (default 0)"`
}

// ListIn is batch_list's input.
type ListIn struct {
	Status string `json:"status,omitempty" jsonschema:"only jobs of this status: live, queued, running, done, partial, failed, cancelled or terminal"`
	Limit  int    `json:"limit,omitempty" jsonschema:"jobs per page, 1 to 100 (default 20)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the next_cursor of the page before; none for the first page"`
}

// Job is a job as batch_status, batch_wait and batch_list answer it:
// exactly the job GET /v1/batch/{id} answers (its targets without their
// results; no targets in a list), the one shape of a job defined in
// package github.com/sift/batch/engine/apitype; TargetStatus is one of its
// targets.
type (
	Job          = apitype.Job
	TargetStatus = apitype.TargetStatus
)

// ResultPage is batch_result's output beside the page's text (the call's
// text content).
type ResultPage struct {
	Idx          int            `json:"idx"`
	URL          string         `json:"url"`
	Status       string         `json:"status"`
	Error        string         `json:"error,omitempty"`
	Hint         string         `json:"hint,omitempty"`
	Meta         map[string]any `json:"meta,omitempty" jsonschema:"the result's meta: content type, truncation and the like"`
	Page         int            `json:"page" jsonschema:"this page, from 0"`
	Pages        int            `json:"pages" jsonschema:"how many pages the content has"`
	NextPage     *int           `json:"next_page,omitempty" jsonschema:"the page to ask for next; absent on the last"`
	ContentBytes int            `json:"content_bytes" jsonschema:"the whole content's size as JSON text, in bytes (its bytes, each character JSON escapes counted as its escape)"`
	PageBytes    int            `json:"page_bytes" jsonschema:"this page's size in bytes"`
}

// JobList is batch_list's output.
type JobList struct {
	Jobs        []Job    `json:"jobs"`
	NextCursor  string   `json:"next_cursor,omitempty"`
	Unavailable []string `json:"unavailable_nodes,omitempty"`
}

// Cancelled is batch_cancel's output.
type Cancelled struct {
	Cancelled bool `json:"cancelled"`
}

// call runs one tool call with its key, and logs it.
func (t *tools) call(req *mcp.CallToolRequest, tool, id string, fn func(key string) error) error {
	key, ok := t.key(req)
	if !ok {
		return &APIError{Status: http.StatusUnauthorized, Message: "unauthorized", Hint: "send Authorization: Bearer KEY with a key the server knows"}
	}
	err := fn(key)
	code := http.StatusOK
	if err != nil {
		err = errorOf(err)
		code = 0 // unavailable, or cancelled
		var ae *APIError
		if errors.As(err, &ae) {
			code = ae.Status
		}
	}
	t.o.Log.Debug("tool call", slog.String(logKeyTool, tool), slog.String(logKeyJobID, loggedID(id)), slog.Int(logKeyCode, code))
	return err
}

// loggedID is id as the log shows it: an id of the shape the API makes
// them (32 lower-case hex digits), else "(malformed)", so that nothing
// else an agent passes as an id (a URL, its API key, another secret)
// reaches the log.
func loggedID(id string) string {
	if len(id) != 32 {
		return "(malformed)"
	}
	for i := range len(id) {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "(malformed)"
		}
	}
	return id
}

// stopping reports whether the server is stopping (EndWaits).
func (t *tools) stopping() bool { return t.ending != nil && t.ending.Err() != nil }

// jobPath is the API path of job id. An id that a path would read as
// segments (".", "..", one with a '/') is no job's: 404, as the API
// answers it.
func jobPath(id string) (string, error) {
	if id == "" {
		return "", &APIError{Status: http.StatusBadRequest, Message: "no id", Hint: "give the id batch_submit answered"}
	}
	if id == "." || id == ".." || strings.Contains(id, "/") {
		return "", &APIError{Status: http.StatusNotFound, Message: "job not found", Hint: "check the id; jobs are deleted a while after they finish"}
	}
	return "/v1/batch/" + url.PathEscape(id), nil
}

func (t *tools) submit(ctx context.Context, req *mcp.CallToolRequest, in SubmitIn) (*mcp.CallToolResult, Submitted, error) {
	var out Submitted
	err := t.call(req, "batch_submit", "", func(key string) error {
		c, err := t.client(key)
		if err != nil {
			return err
		}
		targets := make([]client.Target, len(in.Targets))
		for i, tg := range in.Targets {
			o := tg.Options
			targets[i] = client.Target{URL: tg.URL, Options: client.Options{Grep: o.Grep, JQ: o.JQ, Mode: o.Mode,
				Question: o.Question, Pages: o.Pages, Context: o.Context, Recover: o.Recover}}
		}
		sub, err := c.SubmitWith(ctx, targets, client.SubmitOptions{IdempotencyKey: in.IdempotencyKey})
		if err != nil {
			return err
		}
		// The API answers the job's path as "status"; an agent wants the
		// status word.
		j, err := c.Job(ctx, sub.ID)
		if err != nil {
			return err
		}
		out = Submitted{ID: sub.ID, Reused: sub.Reused, Status: j.Status}
		return nil
	})
	return textJSON(out, err)
}

func (t *tools) status(ctx context.Context, req *mcp.CallToolRequest, in IDIn) (*mcp.CallToolResult, Job, error) {
	var out Job
	err := t.call(req, "batch_status", in.ID, func(key string) error {
		if _, err := jobPath(in.ID); err != nil {
			return err
		}
		c, err := t.client(key)
		if err != nil {
			return err
		}
		j, err := c.Job(ctx, in.ID)
		out = j
		return err
	})
	return textJSON(out, err)
}

func (t *tools) wait(ctx context.Context, req *mcp.CallToolRequest, in WaitIn) (*mcp.CallToolResult, Job, error) {
	var out Job
	err := t.call(req, "batch_wait", in.ID, func(key string) error {
		if _, err := jobPath(in.ID); err != nil {
			return err
		}
		// The wait is MaxWait by default, else seconds, at most MaxWait
		// (a MaxWait under a second still takes seconds 1: MaxWait).
		maxSec := max(int(t.o.MaxWait/time.Second), 1)
		within := t.o.MaxWait
		switch {
		case in.Seconds < 0 || in.Seconds > maxSec:
			return &APIError{Status: http.StatusBadRequest, Message: "bad seconds", Hint: "give seconds from 1 to " + strconv.Itoa(maxSec)}
		case in.Seconds > 0:
			within = min(time.Duration(in.Seconds)*time.Second, t.o.MaxWait)
		}
		c, err := t.client(key)
		if err != nil {
			return err
		}
		// A stopping server (EndWaits) ends the wait with the job as it
		// then stands; a client gone (its HTTP request's context done)
		// ends it too.
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if t.ending != nil {
			defer context.AfterFunc(t.ending, cancel)()
		}
		gone, stopGone := context.WithCancel(context.Background())
		defer stopGone()
		if rctx, ok := t.reqs.context(req); ok {
			defer context.AfterFunc(rctx, func() { stopGone(); cancel() })()
		}
		token := req.Params.GetProgressToken()
		j, err := c.WaitProgress(wctx, in.ID, within, t.o.PollEvery, func(j client.Job) {
			if token == nil || req.Session == nil {
				return
			}
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(j.TargetsDone), Total: float64(j.TargetsTotal),
				Message: fmt.Sprintf("%d of %d targets stored, %d failed; job %s", j.TargetsDone, j.TargetsTotal, j.TargetsFailed, j.Status),
			})
		})
		if err != nil && ctx.Err() == nil && gone.Err() == nil && t.stopping() {
			j, err = c.Job(ctx, in.ID)
		}
		out = j
		return err
	})
	return textJSON(out, err)
}

func (t *tools) result(ctx context.Context, req *mcp.CallToolRequest, in ResultIn) (*mcp.CallToolResult, ResultPage, error) {
	var out ResultPage
	var content []byte // the page's content as JSON text, between its quotes
	err := t.call(req, "batch_result", in.ID, func(key string) error {
		p, err := jobPath(in.ID)
		if err != nil {
			return err
		}
		if in.Idx < 0 || in.Page < 0 {
			return &APIError{Status: http.StatusBadRequest, Message: "bad idx or page", Hint: "give idx and page as whole numbers from 0"}
		}
		size := t.o.PageBytes
		resp, err := t.b.do(ctx, key, http.MethodGet, p+"/"+strconv.Itoa(in.Idx)+pageQuery(in.Page, size), nil, nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		tp, err := readTargetPage(resp.Body, size)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		out = ResultPage{Idx: tp.Idx, URL: tp.URL, Status: tp.Status, Error: tp.Error, Hint: tp.Hint, Page: in.Page}
		if res := tp.Result; res != nil {
			content = tp.text
			out.Pages, out.ContentBytes, out.PageBytes = pagesOf(res.Range.Total, size), int(res.Range.Total), textLen(content)
			if len(res.Meta) > 0 && string(res.Meta) != "null" {
				if err := json.Unmarshal(res.Meta, &out.Meta); err != nil {
					return fmt.Errorf("%w: meta: %v", ErrUnavailable, err)
				}
			}
		}
		if in.Page > 0 && in.Page >= out.Pages {
			return &APIError{Status: http.StatusNotFound, Message: "page not found",
				Hint: fmt.Sprintf("this result has %d pages, 0 to %d", out.Pages, max(out.Pages-1, 0))}
		}
		if in.Page+1 < out.Pages {
			next := in.Page + 1
			out.NextPage = &next
		}
		return nil
	})
	if err != nil {
		return nil, out, err
	}
	// The page's text is the call's content: the structured output has
	// everything else, so the page is in the message once. Over HTTP the
	// page is written into the answer as the API wrote it (splice); over
	// stdio it is the decoded text, which the SDK encodes.
	var text string
	switch s, ok := t.reqs.served(req); {
	case len(content) > 0 && ok:
		text = s.sw.set(content)
	case len(content) > 0:
		if text, err = decodeText(content); err != nil {
			return nil, out, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	case out.Error != "":
		text = out.Status + ": " + out.Error
		if out.Hint != "" {
			text += " (" + out.Hint + ")"
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}

func (t *tools) list(ctx context.Context, req *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, JobList, error) {
	out := JobList{Jobs: []Job{}}
	err := t.call(req, "batch_list", "", func(key string) error {
		c, err := t.client(key)
		if err != nil {
			return err
		}
		p, err := c.ListPage(ctx, client.ListOptions{Status: in.Status, Limit: in.Limit, Cursor: in.Cursor})
		out.Jobs = append(out.Jobs, p.Jobs...)
		out.NextCursor, out.Unavailable = p.NextCursor, p.UnavailableNodes
		return err
	})
	return textJSON(out, err)
}

func (t *tools) cancel(ctx context.Context, req *mcp.CallToolRequest, in IDIn) (*mcp.CallToolResult, Cancelled, error) {
	var out Cancelled
	err := t.call(req, "batch_cancel", in.ID, func(key string) error {
		if _, err := jobPath(in.ID); err != nil {
			return err
		}
		c, err := t.client(key)
		if err != nil {
			return err
		}
		if err := c.Cancel(ctx, in.ID); err != nil {
			return err
		}
		out.Cancelled = true
		return nil
	})
	return textJSON(out, err)
}

// textJSON is a tool's answer for out and err: on success, its text
// content is out's JSON written without HTML escapes (a URL's "<", ">"
// and "&" as they are), which the SDK's own text, from json.Marshal,
// would escape; on error, the SDK's tool error for err.
func textJSON[T any](out T, err error) (*mcp.CallToolResult, T, error) {
	if err != nil {
		return nil, out, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, out, fmt.Errorf("%w: encode answer: %v", ErrUnavailable, err)
	}
	text := strings.TrimSuffix(b.String(), "\n")
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
}
