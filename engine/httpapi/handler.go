package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/internal/httpx"
	"github.com/sift/batch/engine/internal/readsched"
)

// The defaults a zero [Options] field takes.
const (
	// DefaultMaxBody caps a POST /v1/batch body.
	DefaultMaxBody = 256 << 10
	// DefaultRetryAfter is the Retry-After of a 429 or a 503.
	DefaultRetryAfter = 5 * time.Second
	// DefaultMaxWait caps the ?wait= of a long-poll.
	DefaultMaxWait = 60 * time.Second
	// DefaultMaxAnswerBytes is each caller's budget of answer bytes held
	// while they are written (Options.MaxAnswerBytes).
	DefaultMaxAnswerBytes = 64 << 20
	// DefaultMaxQueuedReads is how many reads of one caller may wait for
	// their turn at once (Options.MaxQueuedReads).
	DefaultMaxQueuedReads = 64
)

// The routes, each also the fixed label [Options.Wrap] is given.
const (
	routeSubmit = "POST /v1/batch"
	routeList   = "GET /v1/batch"
	routeJob    = "GET /v1/batch/{id}"
	routeTarget = "GET /v1/batch/{id}/{idx}"
	routeCancel = "DELETE /v1/batch/{id}"
	routeOther  = "/v1/"
	// routeOpenAPI is served without a key.
	routeOpenAPI = "GET " + pathOpenAPI
)

// Log keys. No attribute the handler logs ever holds a URL, a host, an API
// key or a panic value.
const (
	logKeyCaller   = "caller"
	logKeyCode     = "code"
	logKeyDuration = "duration"
	logKeyJobID    = "job_id"
	logKeyMethod   = "method"
	logKeyRoute    = "route"
	logKeyTargets  = "targets"
)

// Options configure a [Handler]. The zero value takes the defaults above;
// a negative number makes [New] fail.
type Options struct {
	// MaxBody caps a POST /v1/batch body, enforced while reading: past it
	// the answer is 413. Default [DefaultMaxBody] (256 KiB).
	MaxBody int64
	// TargetsPerJob is the runner's [engine.Config.TargetsPerJob], for the
	// hint of a 422 "too many targets". Default
	// [engine.DefaultTargetsPerJob].
	TargetsPerJob int
	// RetryAfter is the Retry-After of a 429 or a 503, rounded up to
	// seconds.
	// Default [DefaultRetryAfter] (5s).
	RetryAfter time.Duration
	// Honoured names the target options ([engine.Options], as spelled in
	// JSON: "mode", "question", "pages", "grep", "jq", "context",
	// "recover") that the runner's FetchFunc honours. A submitted target
	// that sets any other is refused, 422, naming the option: nothing is
	// silently ignored. Default (nil): every option is refused. sift, whose
	// own pipeline honours mode, question, pages, context and recover,
	// names those; the fetcher of package fetcher names its own
	// ([github.com/sift/batch/engine/fetcher.Fetcher.Honours]).
	Honoured []string
	// Check, if set, checks each submitted target's options (a regular
	// expression that compiles, say) once they are known to be honoured;
	// its error is answered 422 with its text. The fetcher's
	// [github.com/sift/batch/engine/fetcher.Fetcher.Check] fits.
	Check func(engine.Target) error
	// MaxWait caps the ?wait= of GET /v1/batch/{id}: a longer one is 400.
	// The server's WriteTimeout must leave room for it. Default
	// [DefaultMaxWait] (60s).
	MaxWait time.Duration
	// MaxInFlight caps the authenticated reads and cancels whose work
	// (the runner's reads and writes, encoding the answer) runs at once;
	// the others wait their turn. A request holds its turn only while it
	// works: it gives it up while it waits in a long-poll (and answers it
	// without one), while another node answers it, and while its answer
	// goes to the client (a ?results=1 answer takes it again for each
	// next result, and a result larger than 512 KiB for each next piece
	// of it), so a client that reads slowly or not at all holds up
	// no one: only its own connection, until the server's WriteTimeout
	// ends it. A submit takes no turn: once per job, it keeps the workers
	// busy. The runner's own work shares the CPU with the handlers:
	// without a cap, hundreds of clients polling as fast as they can
	// starve it (BenchmarkServe_PollLoad: 0.17× of the targets/s with
	// /healthz polled instead; 0.86× with the default).
	//
	// The turns are shared fairly by caller (package
	// engine/internal/readsched): a request that finds no turn free waits
	// in its caller's queue, and the turns that free up go round the
	// callers that wait, one request each (round-robin), each caller's in
	// the order they came. So one caller's flood of reads makes its own
	// reads wait, not another caller's: that one waits for at most one
	// request of each caller ahead of it. The dashboard's reads and the
	// MCP tools (which call this API) take the same turns ([Handler.Read]).
	// Default GOMAXPROCS/2, at least 1.
	MaxInFlight int
	// MaxQueuedReads caps, for each caller, its requests that wait for a
	// turn (MaxInFlight): past it a request is answered 429 "reads
	// queued" with Retry-After at once, having done no work. A request
	// already admitted that takes its turn again (after a long-poll's
	// wait, between the results of a ?results=1 answer) is never refused:
	// it waits in its caller's queue. Default [DefaultMaxQueuedReads] (64).
	MaxQueuedReads int
	// MaxAnswerBytes caps, for each caller (API key), the bytes of its
	// answers held in memory while they are written to its clients: a
	// target's result, the current result of a ?results=1 answer, a job
	// or a list page, and on a cluster node a forwarded answer's part
	// (256 KiB). An answer to a client that does not read stays in memory
	// until its connection fails or the server's WriteTimeout ends it, so
	// without a bound one key's connections that never read could hold
	// any number of results. An answer reserves its size before its
	// status is sent (a result once read, before it is copied into the
	// answer; a caller whose budget is full is refused before the read)
	// and gives it back once written or once its connection has failed;
	// one that does not fit is answered 429 with Retry-After and the hint
	// to read the answers already asked for; it never waits. A
	// caller that holds nothing is always served, so an answer larger
	// than the budget is served, alone. Once a ?results=1 answer has
	// begun (its status sent), a next result that does not fit waits for
	// room instead, without a turn: only that caller's answer waits.
	// Errors and cancels, small, are counted but never refused. So one
	// caller's answers being written hold at most MaxAnswerBytes plus one
	// answer, and its errors and cancels. Each caller's
	// count is shared by all its requests, safe for concurrent use, and
	// dropped once it holds nothing. Default [DefaultMaxAnswerBytes]
	// (64 MiB).
	MaxAnswerBytes int64
	// Cluster, if set, makes the handler one node's API in a cluster
	// (package github.com/sift/batch/engine/cluster's *Node): a request
	// about another node's job is forwarded to it, and a list merges every
	// node's jobs. Default: a single node.
	Cluster Cluster
	// Wrap, if set, wraps each route's handler, given the route's fixed
	// label ("GET /v1/batch/{id}"; never a request's path): the metrics'
	// [github.com/sift/batch/engine/metrics.Metrics.Middleware], for instance. It sees every request,
	// those answered 401 included.
	Wrap func(route string, h http.Handler) http.Handler
	// Log receives a line per request at Debug, and the API's events
	// (submits, cancels, handler panics). Default: nothing is logged.
	Log *slog.Logger
}

// Cluster is what a [Handler] asks of the cluster its runner is a node
// of; package github.com/sift/batch/engine/cluster's *Node is one. The
// node that holds a job answers the requests forwarded to it with its own
// Handler, each built without a body (Body nil): a POST so built is
// answered 405, "submit to any node: POST is not forwarded".
type Cluster interface {
	// Forward answers r, a request about job id, if that job is another
	// node's, and returns true; false, having written nothing, if it is
	// this node's to answer.
	Forward(w http.ResponseWriter, r *http.Request, id string) bool
	// List is [engine.Runner.List] across the nodes, with the names of
	// the nodes whose jobs the page may lack.
	List(ctx context.Context, caller string, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error)
	// ListAll is [engine.Runner.ListAll] across the nodes, as List.
	ListAll(ctx context.Context, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error)
}

// runner is what the handler asks of an [*engine.Runner]. Tests wrap it to
// count the work an answer does.
type runner interface {
	SubmitWith(ctx context.Context, c *engine.Caller, callerClass string, targets []engine.Target, opt engine.SubmitOptions) (string, bool, error)
	TryCancel(id string) (bool, error)
	Lookup(id string) (engine.Job, error)
	Targets(id string) (engine.Job, []engine.TargetStatus, bool)
	ResultJSON(id string, idx int) ([]byte, bool)
	ResultRange(id string, idx int, off, n int64) ([]byte, int64, bool)
	ContentRange(id string, idx int, off, n int64) (engine.ContentRange, bool)
	Touch(id string)
	Wait(ctx context.Context, id string) (engine.Job, error)
	List(caller string, opt engine.ListOptions) ([]engine.Job, string, error)
	ListAll(opt engine.ListOptions) ([]engine.Job, string, error)
}

// Handler is the batch HTTP API of a runner, as sift exposes it: an
// [http.Handler] for the paths under /v1/ (see the package doc). Create one
// with [New]. It is safe for concurrent use.
type Handler struct {
	reads   *readsched.Scheduler // the turns, shared fairly by caller (Options.MaxInFlight, MaxQueuedReads)
	answers *answerBudget        // each caller's answer bytes held (Options.MaxAnswerBytes)
	sizes   resultSizes          // the sizes of results read, to refuse an answer before its read
	r       runner
	auth    Authenticator
	o       Options
	log     *slog.Logger
	mux     *http.ServeMux
	otherH  http.Handler // routeOther's, for paths the mux would redirect

	// ending is cancelled by EndWaits.
	ending   context.Context
	endWaits context.CancelFunc
}

// New returns the API of r, with auth telling who presents each key. A nil
// r or auth, or a negative option, is an error. The handler serves paths
// as they are: mount it at "/v1/" (or at "/v1/batch" and "/v1/batch/")
// without stripping a prefix.
func New(r *engine.Runner, auth Authenticator, o Options) (*Handler, error) {
	if r == nil {
		return nil, errors.New("new handler: nil runner")
	}
	return newHandler(r, auth, o)
}

func newHandler(r runner, auth Authenticator, o Options) (*Handler, error) {
	switch {
	case auth == nil:
		return nil, errors.New("new handler: nil authenticator")
	case o.MaxBody < 0:
		return nil, errors.New("new handler: MaxBody must not be negative")
	case o.TargetsPerJob < 0:
		return nil, errors.New("new handler: TargetsPerJob must not be negative")
	case o.RetryAfter < 0:
		return nil, errors.New("new handler: RetryAfter must not be negative")
	case o.MaxWait < 0:
		return nil, errors.New("new handler: MaxWait must not be negative")
	case o.MaxInFlight < 0:
		return nil, errors.New("new handler: MaxInFlight must not be negative")
	case o.MaxAnswerBytes < 0:
		return nil, errors.New("new handler: MaxAnswerBytes must not be negative")
	case o.MaxQueuedReads < 0:
		return nil, errors.New("new handler: MaxQueuedReads must not be negative")
	}
	if o.MaxBody == 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.TargetsPerJob == 0 {
		o.TargetsPerJob = engine.DefaultTargetsPerJob
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = max(runtime.GOMAXPROCS(0)/2, 1)
	}
	if o.MaxAnswerBytes == 0 {
		o.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if o.MaxQueuedReads == 0 {
		o.MaxQueuedReads = DefaultMaxQueuedReads
	}
	o.Honoured = slices.Clone(o.Honoured)
	h := &Handler{r: r, auth: auth, o: o, log: o.Log, mux: http.NewServeMux(), reads: readsched.New(o.MaxInFlight, o.MaxQueuedReads),
		answers: newAnswerBudget(o.MaxAnswerBytes)}
	h.ending, h.endWaits = context.WithCancel(context.Background())
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	handle := func(route string, fn func(http.ResponseWriter, *http.Request, *engine.Caller, string), turns bool) {
		var hh http.Handler = h.guard(route, h.authenticate(fn, turns))
		if o.Wrap != nil {
			hh = o.Wrap(route, hh)
		}
		h.mux.Handle(route, hh)
		if route == routeOther {
			h.otherH = hh
		}
	}
	// A submit takes no turn: it is what keeps the workers busy, once per
	// job, and must not queue behind a crowd of polls
	// (BenchmarkServe_PollLoad).
	handle(routeSubmit, h.submit, false)
	handle(routeList, h.list, true)
	handle(routeJob, h.job, true)
	handle(routeTarget, h.target, true)
	handle(routeCancel, h.cancel, true)
	handle(routeOther, h.other, true)
	var doc http.Handler = h.guard(routeOpenAPI, http.HandlerFunc(h.openapi))
	if o.Wrap != nil {
		doc = o.Wrap(routeOpenAPI, doc)
	}
	h.mux.Handle(routeOpenAPI, doc)
	return h, nil
}

// ServeHTTP answers one API request. A path that ends in a slash is the
// resource of the path without it: GET /v1/batch/ lists, as GET /v1/batch
// does (the route's label for Options.Wrap is the resource's). A path
// with a "." or ".." segment or an empty one (/v1/batch/./ID) names no
// resource: 404, never the redirect to the cleaned path that
// [http.ServeMux] would answer (the API never redirects).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; len(p) > len("/v1/") && strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "//") {
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = strings.TrimSuffix(p, "/"), strings.TrimSuffix(u.RawPath, "/")
		r2.URL = &u
		r = r2
	}
	if p := r.URL.Path; strings.HasPrefix(p, "/v1/") && len(p) > len("/v1/") && path.Clean(p) != p {
		h.otherH.ServeHTTP(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Front returns a handler that gives every request under /v1/ to api (the
// API's [Handler], wrapped or not) and any other to next (a mux of the
// server's other routes). Mounted as mux.Handle("/v1/", api) instead, a
// path with a "." or empty segment (/v1/batch/./ID) would be answered by
// the mux's redirect to the cleaned path before api saw it; through
// Front, api answers it 404. It is safe for concurrent use if api and
// next are.
func Front(api, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			api.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// EndWaits ends every pending long-poll (GET /v1/batch/{id}?wait=…) with
// the job as it stands, and has later ones answer at once, so that none
// holds up a graceful stop: register it with the server's
// [http.Server.RegisterOnShutdown]. It is idempotent and safe for
// concurrent use.
func (h *Handler) EndWaits() { h.endWaits() }

// guard logs each request, and answers a handler's panic (a bug) with 500
// and a log line that has the route only: left to net/http, the panic value
// and the stack would reach the log.
func (h *Handler) guard(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := httpx.NewStatusRecorder(w)
		abort := false
		func() {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				switch {
				case v == http.ErrAbortHandler:
					// net/http's own way to drop a connection (an answer
					// cut short); it logs nothing.
					abort = true
				case !rec.WroteHeader:
					h.log.Error("handler panicked: a possible bug in siftbatch", slog.String(logKeyRoute, route))
					writeError(rec, http.StatusInternalServerError, "internal error", "try again; if it persists, report it")
				default:
					// Part of an answer is out: drop the connection so
					// that it cannot pass for a whole one.
					h.log.Error("handler panicked: a possible bug in siftbatch", slog.String(logKeyRoute, route))
					rec.Code, abort = http.StatusInternalServerError, true
				}
			}()
			next.ServeHTTP(rec, r)
		}()
		h.log.Debug("request", slog.String(logKeyRoute, route), slog.String(logKeyMethod, r.Method),
			slog.Int(logKeyCode, rec.Code), slog.Duration(logKeyDuration, time.Since(start)))
		if abort {
			panic(http.ErrAbortHandler)
		}
	})
}

// authenticate admits requests whose Bearer key the authenticator knows;
// the others get 401 (503 if the authenticator failed). With turns, an
// admitted request waits its turn (Options.MaxInFlight).
func (h *Handler) authenticate(fn func(http.ResponseWriter, *http.Request, *engine.Caller, string), turns bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		var (
			c     *engine.Caller
			class string
			err   error = ErrUnknownKey
		)
		// One Authorization header only: with two, a proxy that reads the
		// other one would disagree about who the caller is.
		if key = strings.TrimSpace(key); ok && strings.EqualFold(scheme, "Bearer") && key != "" && len(r.Header.Values("Authorization")) == 1 {
			c, class, err = h.auth.Authenticate(r.Context(), key)
		}
		switch {
		case err == nil && c != nil && c.Name != "" && !turns:
			fn(w, r, c, class)
		case err == nil && c != nil && c.Name != "":
			// The caller's work waits its turn (Options.MaxInFlight); it
			// gives it up while it waits on the network or a long-poll,
			// and what it writes meanwhile is kept until then (turnWriter).
			t := &turn{reads: h.reads, caller: c.Name, ans: answerHold{b: h.answers, caller: c.Name}}
			if err := t.admit(r.Context()); err != nil {
				if errors.Is(err, ErrReadsQueued) {
					h.refuseQueued(w)
				}
				return // refused, or the client has gone
			}
			t.w = &turnWriter{ResponseWriter: w, t: t}
			defer t.ans.free() // the answer is out, or its connection failed: its bytes are given back
			defer t.release()  // after a panic: the place is freed, what was kept is dropped
			fn(t.w, r.WithContext(context.WithValue(r.Context(), turnKey{}, t)), c, class)
			t.give() // the answer, or its end, goes out without the turn
		case errors.Is(err, ErrThrottled):
			WriteThrottled(w, err)
		case err != nil && !errors.Is(err, ErrUnknownKey):
			h.log.Warn("authenticate failed")
			h.retryAfter(w)
			writeError(w, http.StatusServiceUnavailable, "authentication unavailable", "try again later")
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="siftbatch"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer KEY with a key the server knows")
		}
	})
}

// turn is a request's place among the MaxInFlight served at once.
//
// A request holds its place only while it works (the runner's reads, the
// cluster's list, encoding its answer), never while it waits on the
// network: on a client that sends its body slowly, on a long-poll, on
// another node, or on a client that does not read its socket. The last is
// what turnWriter is for: while the place is held, nothing the handler
// writes reaches the client (it is kept); it goes out once the place is
// given up. So a client that never reads holds only its own connection
// (and the server's WriteTimeout ends that), never a place; without it,
// one such client would hold every other caller's reads for the length of
// its connection (BenchmarkServe_SlowReader).
//
// What is kept is bounded by what a handler writes while it holds its
// place: a small answer whole (an error, a cancel, a list page of at most
// engine.MaxListLimit jobs, a job's targets without their results, all
// bounded by the job's targets); a large one is written after giving the
// place up, from the handler's own buffer, without a copy: one target's
// result, 512 KiB at a time (streamResult takes its place again to read
// each next piece), or a ?results=1 answer one target at a time
// (writeJob takes its place again for each next result). So at most one
// result of an answer is in memory at once, and a read of a large result
// holds a place for a piece's read, never for the whole result's.
//
// Memory: what an answer holds while it is written is reserved from its
// caller's budget (answerHold, Options.MaxAnswerBytes) before it is built;
// what is kept is counted when the turn is given up.
type turn struct {
	reads  *readsched.Scheduler
	caller string
	held   bool
	w      *turnWriter // nil outside authenticate (a handler called directly in tests)
	ans    answerHold  // the bytes the answer holds of its caller's budget
}

type turnKey struct{}

// admit takes the request's first place, in its caller's queue:
// ErrReadsQueued if the caller has Options.MaxQueuedReads requests
// waiting already; ctx's error if it ends first.
func (t *turn) admit(ctx context.Context) error {
	if err := t.reads.Acquire(ctx, t.caller, false); err != nil {
		return err
	}
	t.held = true
	return nil
}

// take waits for a place again, in the caller's queue whatever its
// bound (the request is admitted already); false if ctx ends first.
func (t *turn) take(ctx context.Context) bool {
	if t.reads.Acquire(ctx, t.caller, true) != nil {
		return false
	}
	t.held = true
	return true
}

// release frees the place, if held, and nothing else.
func (t *turn) release() {
	if t.held {
		t.reads.Release()
		t.held = false
	}
}

// give frees the place, if held, then sends what the request wrote while
// it held it.
func (t *turn) give() {
	t.release()
	if t.w != nil {
		t.ans.add(len(t.w.kept)) // held until the request ends
		_ = t.w.send()
	}
}

// turnWriter is the ResponseWriter of a request that takes turns. While
// its turn is held, Write keeps the bytes; without it, Write sends what
// was kept, then p. The header and status go through at once: net/http
// sends them with the first bytes of the body. Not for concurrent use
// (a handler writes from its own goroutine).
type turnWriter struct {
	http.ResponseWriter
	t    *turn
	kept []byte
	err  error // the first error of a send: the client has gone
}

// Write implements http.ResponseWriter.
func (w *turnWriter) Write(p []byte) (int, error) {
	if w.t.held {
		w.kept = append(w.kept, p...)
		return len(p), nil
	}
	if err := w.send(); err != nil {
		return 0, err
	}
	return w.ResponseWriter.Write(p)
}

// WriteKept is Write for bytes that never change (httpx.KeptWriter):
// without the turn they go to the writer underneath to keep; with it they
// are kept here, copied as Write keeps them.
func (w *turnWriter) WriteKept(p []byte) (int, error) {
	if w.t.held {
		return w.Write(p)
	}
	if err := w.send(); err != nil {
		return 0, err
	}
	return httpx.WriteKept(w.ResponseWriter, p)
}

// send writes what was kept, once; the first error again after one.
func (w *turnWriter) send() error {
	if w.err == nil && len(w.kept) > 0 {
		_, w.err = w.ResponseWriter.Write(w.kept)
		w.kept = nil
	}
	return w.err
}

// turnOf is r's turn; nil if r takes none (a submit).
func turnOf(r *http.Request) *turn {
	t, _ := r.Context().Value(turnKey{}).(*turn)
	return t
}

// giveTurn gives r's turn up for the rest of the request, and sends what
// r wrote while it held it.
func giveTurn(r *http.Request) {
	if t := turnOf(r); t != nil {
		t.give()
	}
}

// waiting gives r's turn up while wait runs, and takes it again; false if
// the client went away meanwhile.
func waiting(r *http.Request, wait func()) bool {
	t := turnOf(r)
	if t == nil {
		wait()
		return true
	}
	t.give()
	wait()
	return t.take(r.Context())
}

// queryOf parses r's query, of a route that takes the parameters named:
// a query that does not parse, a parameter not named, or one given twice
// is answered 400 naming it, and false returned.
func queryOf(w http.ResponseWriter, r *http.Request, takes ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad query", "encode the query as name=value pairs joined by &, with %XX escapes")
		return nil, false
	}
	hint := "this route takes no query parameters"
	if len(takes) > 0 {
		hint = "this route takes " + strings.Join(takes, ", ")
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(takes, k):
			writeError(w, http.StatusBadRequest, "unknown parameter "+quoteName(k), hint)
			return nil, false
		case len(q[k]) > 1:
			writeError(w, http.StatusBadRequest, "parameter "+quoteName(k)+" given more than once", "give it once")
			return nil, false
		}
	}
	return q, true
}
