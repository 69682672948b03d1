package dashboard

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/internal/httpx"
	"github.com/sift/batch/engine/internal/readsched"
	"github.com/sift/batch/engine/keyguard"
)

// Prefix is the path the dashboard serves under; its session cookie's
// Path is Prefix too. Mount the [Handler] there without stripping it:
// mux.Handle(dashboard.Prefix, h).
const Prefix = "/ui/"

// The defaults a zero [Options] field takes.
const (
	// DefaultSessionTTL is how long a sign-in lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultSignInsPerMinute is how many sign-in attempts one client
	// address may make a minute (a burst of as many, then one every
	// minute/N).
	DefaultSignInsPerMinute = 5
	// DefaultRefresh is how often live pages are brought up to date.
	DefaultRefresh = time.Second
	// DefaultChartStep is the time between two points of a chart.
	DefaultChartStep = 5 * time.Second
)

// chartPoints is how many points a chart keeps: 60 × ChartStep (5 minutes
// at the default step).
const chartPoints = 60

// Log keys. No attribute the dashboard logs ever holds a URL, a host, a
// client address, an API key or a session token.
const (
	logKeyCaller = "caller"
	logKeyAdmin  = "admin"
	logKeyJobID  = "job_id"
	// A resubmit's: the job's owner, the new job, how many targets,
	// whether Submit reused a job, why it was refused.
	logKeyOwner    = "owner"
	logKeyNewJobID = "new_job_id"
	logKeyTargets  = "targets"
	logKeyReused   = "reused"
	logKeyReason   = "reason"
)

// Options configure a [Handler]. The zero value takes the defaults above;
// a negative number makes [New] fail.
type Options struct {
	// SessionTTL is how long a sign-in lasts: the session cookie's
	// Max-Age, and the server forgets the session then. Default
	// [DefaultSessionTTL] (12h).
	SessionTTL time.Duration
	// TLSProxy says that TLS ends at a proxy in front of the server: the
	// session cookie is then marked Secure even though the request
	// reaching the handler is plain HTTP. Requests that come over TLS get
	// a Secure cookie in any case.
	TLSProxy bool
	// SignInsPerMinute caps sign-in attempts (right or wrong) per client
	// address; past it the answer is 429 with Retry-After. Default
	// [DefaultSignInsPerMinute] (5).
	SignInsPerMinute int
	// Config is the runner's [engine.Config], so that the overview can
	// show the caps in use (live jobs per caller and in all, workers).
	// Zero fields read as the engine's defaults.
	Config engine.Config
	// Gatherer, if set, is the registry the runner's metrics
	// (package github.com/sift/batch/engine/metrics) are registered on:
	// the admin's charts (targets per second, fetch latency, live jobs)
	// and its count of busy workers are read from it, the same numbers
	// /metrics shows. Nil: no charts.
	Gatherer prometheus.Gatherer
	// Refresh is how often a live page (Server-Sent Events) is brought up
	// to date, and how often the runner's live jobs are looked at. Default
	// [DefaultRefresh] (1s).
	Refresh time.Duration
	// ChartStep is the time between two points of a chart; a chart keeps
	// 60 points. Default [DefaultChartStep] (5s).
	ChartStep time.Duration
	// Log receives the dashboard's events: sign-ins, sign-outs, cancels.
	// Default: nothing is logged.
	Log *slog.Logger
	// Now is the clock for sessions and the sign-in throttle. Default
	// time.Now.
	Now func() time.Time
	// Reads is the road the dashboard's reads take: each page's reads run
	// in a turn of its caller's, shared fairly by caller; past the
	// caller's bound of reads waiting, the page is 429 with Retry-After.
	// serve gives it the API's handler ([httpapi.Handler.Read]), so that
	// the dashboard's reads, the API's and the MCP tools' share one set
	// of turns. Default: turns of the dashboard's own (GOMAXPROCS/2),
	// fair by caller, [DefaultMaxQueuedReads] waiting for each.
	Reads Reads
	// Cluster, if set, makes the dashboard one node's in a cluster
	// (package github.com/sift/batch/engine/cluster's *Node is one): its
	// lists, searches and "Recently finished" take in every node's jobs,
	// and a job of another node opens, read from that node. Sessions stay
	// this node's. Default: a single node.
	Cluster Cluster
}

// Cluster is what a [Handler] asks of the cluster its runner is a node
// of; package github.com/sift/batch/engine/cluster's *Node is one. Its
// methods are called from many requests at once.
type Cluster interface {
	// List is [engine.Runner.List] across the nodes, with the names of
	// the nodes whose jobs the page may lack.
	List(ctx context.Context, caller string, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error)
	// ListAll is [engine.Runner.ListAll] across the nodes, as List.
	ListAll(ctx context.Context, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error)
	// ReadJob reads job id and its targets from the node that holds it,
	// when that is another node: node "" (and no error) when the job is
	// this node's to read; a zero job when that node has none; an error,
	// whose text names the node, when it cannot be read now. It returns
	// the first targets only (fewer than the job's TargetsTotal) of a job
	// whose targets are too many for one answer.
	ReadJob(ctx context.Context, id string) (job engine.Job, targets []engine.TargetStatus, node string, err error)
}

// runner is what the dashboard asks of an [*engine.Runner].
type runner interface {
	Live() []engine.Job
	List(caller string, opt engine.ListOptions) ([]engine.Job, string, error)
	ListAll(opt engine.ListOptions) ([]engine.Job, string, error)
	FindJobs(caller, prefix string, limit int) ([]engine.Job, error)
	Submit(ctx context.Context, c *engine.Caller, callerClass string, targets []engine.Target) (string, bool, error)
	Job(id string) (engine.Job, bool)
	Lookup(id string) (engine.Job, error)
	Targets(id string) (engine.Job, []engine.TargetStatus, bool)
	Result(id string, idx int) (*engine.Result, bool)
	ResultJSON(id string, idx int) ([]byte, bool)
	ResultRange(id string, idx int, off, n int64) ([]byte, int64, bool)
	ContentRange(id string, idx int, off, n int64) (engine.ContentRange, bool)
	TryCancel(id string) (bool, error)
	Err() error
	HookPanics() uint64
}

//go:embed static templates
var assets embed.FS

// Handler is the dashboard of a runner: an [http.Handler] for the paths
// under [Prefix] (see the package doc). Create one with [New] and stop it
// with [Handler.Close]. It is safe for concurrent use.
type Handler struct {
	r    runner
	auth httpapi.Authenticator
	o    Options
	log  *slog.Logger
	mux  *http.ServeMux
	tpl  *template.Template

	sessions sessions
	streams  callerStreams
	throttle throttle
	stats    stats
	sizes    sizes
	ticks    ticker
	// searches are the places of the searches by URL (urlSearches),
	// shared fairly by caller; each caller may have
	// urlSearchesQueued waiting.
	searches *readsched.Scheduler
	// reads is Options.Reads, or the dashboard's own.
	reads Reads

	// ctx is cancelled by Close: it ends the background loop and every
	// event stream.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New returns the dashboard of r, with auth telling who presents each key
// at sign-in ([httpapi.Keys] fits; a key of class [httpapi.ClassAdmin]
// signs in as an admin). It starts one goroutine that looks at the
// runner's live jobs every [Options.Refresh] and samples the charts:
// [Handler.Close] stops it. A nil r or auth, or a negative option, is an
// error.
func New(r *engine.Runner, auth httpapi.Authenticator, o Options) (*Handler, error) {
	if r == nil {
		return nil, errors.New("new dashboard: nil runner")
	}
	return newHandler(r, auth, o)
}

func newHandler(r runner, auth httpapi.Authenticator, o Options) (*Handler, error) {
	switch {
	case auth == nil:
		return nil, errors.New("new dashboard: nil authenticator")
	case o.SessionTTL < 0:
		return nil, errors.New("new dashboard: SessionTTL must not be negative")
	case o.SignInsPerMinute < 0:
		return nil, errors.New("new dashboard: SignInsPerMinute must not be negative")
	case o.Refresh < 0:
		return nil, errors.New("new dashboard: Refresh must not be negative")
	case o.ChartStep < 0:
		return nil, errors.New("new dashboard: ChartStep must not be negative")
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.SignInsPerMinute == 0 {
		o.SignInsPerMinute = DefaultSignInsPerMinute
	}
	if o.Refresh == 0 {
		o.Refresh = DefaultRefresh
	}
	if o.ChartStep == 0 {
		o.ChartStep = DefaultChartStep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Config = withDefaults(o.Config)
	tpl, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, err // a bug: the templates are embedded
	}
	h := &Handler{r: r, auth: auth, o: o, log: o.Log, mux: http.NewServeMux(), tpl: tpl}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.sessions.m = make(map[[sha256.Size]byte]*session)
	h.searches = readsched.New(urlSearches, urlSearchesQueued)
	h.reads = o.Reads
	if h.reads == nil {
		h.reads = newOwnReads()
	}
	h.throttle = throttle{perMinute: o.SignInsPerMinute, m: make(map[string]*bucket)}
	h.ticks.init()
	h.ctx, h.cancel = context.WithCancel(context.Background())

	static, _ := fs.Sub(assets, "static")
	h.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", staticFiles(static)))
	h.mux.HandleFunc("GET "+Prefix+"{$}", h.overview)
	h.mux.HandleFunc("POST "+Prefix+"signin", h.signIn)
	h.mux.HandleFunc("POST "+Prefix+"signout", h.signedIn(h.signOut))
	h.mux.HandleFunc("GET "+Prefix+"jobs", h.signedIn(h.jobsPage))
	h.mux.HandleFunc("GET "+Prefix+"jobs/{id}", h.signedIn(h.inTurn(h.jobPage)))
	h.mux.HandleFunc("GET "+Prefix+"jobs/{id}/{idx}", h.signedIn(h.inTurn(h.resultPage)))
	h.mux.HandleFunc("POST "+Prefix+"jobs/{id}/cancel", h.signedIn(h.cancelJob))
	h.mux.HandleFunc("POST "+Prefix+"jobs/{id}/resubmit", h.signedIn(h.resubmitJob))
	h.mux.HandleFunc("GET "+Prefix+"events", h.signedIn(h.events))
	h.mux.HandleFunc(Prefix, h.notFound)

	h.wg.Add(1)
	go h.loop()
	return h, nil
}

// withDefaults fills the zero caps of cfg with the engine's defaults, as
// [engine.New] does.
func withDefaults(cfg engine.Config) engine.Config {
	if cfg.JobsPerCaller == 0 {
		cfg.JobsPerCaller = engine.DefaultJobsPerCaller
	}
	if cfg.JobsTotal == 0 {
		cfg.JobsTotal = engine.DefaultJobsTotal
	}
	if cfg.Workers == 0 {
		cfg.Workers = engine.DefaultWorkers
	}
	cfg.Workers = min(cfg.Workers, engine.MaxWorkers)
	return cfg
}

// ServeHTTP answers one dashboard request. A panic in answering it (a
// bug) is answered 500, or, once part of the answer is out, ends the
// connection; it is logged without its value (which may hold a URL).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httpx.NewStatusRecorder(w)
	defer func() {
		v := recover()
		switch {
		case v == nil:
			return
		case v == http.ErrAbortHandler:
		case !rec.WroteHeader:
			h.log.Error("dashboard handler panicked: a possible bug in siftbatch")
			http.Error(rec, "internal error: try again; if it persists, report it", http.StatusInternalServerError)
			return
		default:
			h.log.Error("dashboard handler panicked: a possible bug in siftbatch")
		}
		panic(http.ErrAbortHandler) // net/http drops the connection, and logs nothing
	}()
	h.serve(rec, r)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on a form POST, which sameOrigin refuses.
	hd.Set("Referrer-Policy", "same-origin")
	if r.Body == nil {
		// Not a request net/http read off a connection (it always sets
		// one): a form's reads must not panic on it.
		r.Body = http.NoBody
	}
	if r.Method == http.MethodPost && !sameOrigin(r) {
		h.page(w, r, http.StatusForbidden, "error", errorPage{Title: "Forbidden", Msg: "This form was sent from another site."})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Close ends every event stream and stops the background goroutine; later
// streams end at once. Register it with the server's
// [http.Server.RegisterOnShutdown], so that no stream holds up a graceful
// stop. It is idempotent and safe for concurrent use.
func (h *Handler) Close() {
	h.closeOnce.Do(func() {
		h.cancel()
		h.wg.Wait()
	})
}

// sameOrigin reports whether a POST comes from a page of this server: an
// Origin header, when the browser sends one, must name this host.
// SameSite=Strict and the CSRF token are the main guards; this is one
// more.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer") // no Origin (an older browser): the page it came from
		if o == "" {
			return true
		}
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// signedIn admits requests with a live session; the others are sent to
// the sign-in form (401 for the event stream and for POSTs).
func (h *Handler) signedIn(fn func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ss, ok := h.session(r); ok {
			fn(w, r, ss)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path != Prefix+"events" {
			http.Redirect(w, r, Prefix, http.StatusSeeOther)
			return
		}
		h.page(w, r, http.StatusUnauthorized, "error", errorPage{Title: "Signed out", Msg: "Your session has ended: sign in again."})
	}
}

// session returns the request's session, from its cookie.
func (h *Handler) session(r *http.Request) (*session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil, false
	}
	return h.sessions.get(c.Value, h.o.Now())
}

// setCookie sets (or, with maxAge < 0, clears) the session cookie.
func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     Prefix,
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil || h.o.TLSProxy,
		SameSite: http.SameSiteStrictMode,
	})
}

// signIn is POST /ui/signin, the form's key: a session cookie and a
// redirect to the overview; a wrong key 401 with the form again; past the
// throttle 429.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request) {
	now := h.o.Now()
	if ok, wait := h.throttle.allow(keyguard.ClientAddr(r, h.o.TLSProxy), now); !ok {
		secs := int(wait.Seconds()) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		h.page(w, r, http.StatusTooManyRequests, "signin", signInPage{Msg: "Too many sign-in attempts: wait " + strconv.Itoa(secs) + " s and try again."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	key := r.PostFormValue("key")
	c, class, err := h.auth.Authenticate(r.Context(), key)
	switch {
	case err == nil && c != nil && c.Name != "" && key != "":
	case errors.Is(err, httpapi.ErrThrottled):
		secs := httpapi.RetryAfterSeconds(err)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		h.page(w, r, http.StatusTooManyRequests, "signin", signInPage{Msg: "Too many unknown keys from this address: wait " + strconv.Itoa(secs) + " s and try again."})
		return
	case err != nil && !errors.Is(err, httpapi.ErrUnknownKey):
		h.log.Warn("dashboard sign-in: authenticate failed")
		h.page(w, r, http.StatusServiceUnavailable, "signin", signInPage{Msg: "Signing in is not possible right now: try again later."})
		return
	default:
		h.log.Info("dashboard sign-in refused")
		h.page(w, r, http.StatusUnauthorized, "signin", signInPage{Msg: "That key is not known."})
		return
	}
	admin := class == httpapi.ClassAdmin
	token, _ := h.sessions.createAs(*c, class, admin, now.Add(h.o.SessionTTL), now)
	h.setCookie(w, r, token, int(h.o.SessionTTL/time.Second))
	h.log.Info("dashboard sign-in", slog.String(logKeyCaller, c.Name), slog.Bool(logKeyAdmin, admin))
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// signOut is POST /ui/signout: the session ends here and in the browser.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request, ss *session) {
	if !ss.validCSRF(r.PostFormValue("csrf")) {
		h.page(w, r, http.StatusForbidden, "error", errorPage{Title: "Forbidden", Msg: "This form has expired: reload the page and try again."})
		return
	}
	h.sessions.end(ss)
	h.setCookie(w, r, "", -1)
	h.log.Info("dashboard sign-out", slog.String(logKeyCaller, ss.name))
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// cancelJob is POST /ui/jobs/{id}/cancel, with the session's CSRF token:
// the owner or an admin cancels a live job. In a cluster, a job of
// another node is not cancelled from here: the page says where to.
func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request, ss *session) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if !ss.validCSRF(r.PostFormValue("csrf")) {
		h.page(w, r, http.StatusForbidden, "error", errorPage{Title: "Forbidden", Msg: "This form has expired: reload the page and try again."})
		return
	}
	jr, ok := h.read(r.Context(), r.PathValue("id"), ss)
	switch {
	case !ok:
		h.jobNotFound(w, r)
		return
	case jr.err != nil:
		h.nodeUnavailable(w, r, jr)
		return
	case jr.node != "":
		h.page(w, r, http.StatusConflict, "error", errorPage{Title: "On another node", Msg: "This job runs on node " + jr.node +
			": this node's dashboard cancels only its own node's jobs. Cancel it from node " + jr.node +
			"'s dashboard, or over the API (DELETE /v1/batch/" + jr.job.ID + " with its owner's key, on any node).", Back: Prefix + "jobs/" + jr.job.ID})
		return
	}
	j := jr.job
	ok, err := h.r.TryCancel(j.ID)
	switch {
	case errors.Is(err, engine.ErrDiskFull):
		h.page(w, r, http.StatusInsufficientStorage, "error", errorPage{Title: "Disk full", Msg: "The server's disk has no room for a write: the cancel was not stored, and the job goes on as it was (held while the disk is full). Try again in a moment.", Back: Prefix + "jobs/" + j.ID})
		return
	case err != nil:
		h.page(w, r, http.StatusServiceUnavailable, "error", errorPage{Title: "Store unavailable", Msg: "The server's disk is failing, or the runner did not answer in time: the cancel may not have been made. Look at the job, and try again in a moment if it still runs.", Back: Prefix + "jobs/" + j.ID})
		return
	}
	if !ok {
		h.page(w, r, http.StatusConflict, "error", errorPage{Title: "Already ended", Msg: "The job has already ended: there is nothing to cancel.", Back: Prefix + "jobs/" + j.ID})
		return
	}
	h.log.Info("job cancelled from the dashboard", slog.String(logKeyCaller, ss.name), slog.Bool(logKeyAdmin, ss.admin), slog.String(logKeyJobID, j.ID))
	http.Redirect(w, r, Prefix+"jobs/"+j.ID, http.StatusSeeOther)
}

// jobRead is a job the session may see, as [Handler.read] found it.
type jobRead struct {
	job engine.Job
	// targets are the job's targets when another node holds it (read
	// with the job); nil for this node's (read them with the runner).
	targets []engine.TargetStatus
	// node is the node that holds the job, when another ([Options.Cluster]).
	node string
	// err says that the node that holds the job cannot be read now: job
	// is then zero, and the page answers 503.
	err error
}

// read returns job id if the session may see it: its owner's, or any for
// an admin; in a cluster, read from the node that holds it. ok is false
// for another caller's job and a missing one alike: both cost the same
// one lookup and look the same.
func (h *Handler) read(ctx context.Context, id string, ss *session) (jr jobRead, ok bool) {
	if h.o.Cluster != nil && validID.MatchString(id) {
		j, ts, node, err := h.o.Cluster.ReadJob(ctx, id)
		switch {
		case err != nil:
			return jobRead{node: node, err: err}, true
		case node != "":
			if j.ID == "" || !(ss.admin || j.Caller == ss.name) {
				return jobRead{}, false
			}
			return jobRead{job: j, targets: ts, node: node}, true
		}
	}
	j, ok := h.r.Job(id)
	if ok && (ss.admin || j.Caller == ss.name) {
		return jobRead{job: j}, true
	}
	return jobRead{}, false
}

// nodeUnavailable answers 503 for a job whose node cannot be read now,
// as the API does: the job may be there.
func (h *Handler) nodeUnavailable(w http.ResponseWriter, r *http.Request, jr jobRead) {
	w.Header().Set("Retry-After", "5")
	h.page(w, r, http.StatusServiceUnavailable, "error", errorPage{Title: "Node unavailable",
		Msg: "This job is another node's, which cannot be read now (" + jr.err.Error() + "): try again in a while.", Back: Prefix})
}

// jobNotFound answers a job page that found no job of the caller's: 404,
// unless the store cannot read now (engine.ErrUnavailable), when it is
// 503 with Retry-After naming the cause: a job the store cannot read is
// never shown as gone.
func (h *Handler) jobNotFound(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != "" {
		if _, err := h.r.Lookup(id); errors.Is(err, engine.ErrUnavailable) {
			cause := "a disk error"
			if errors.Is(err, engine.ErrDiskFull) {
				cause = "a full disk"
			}
			w.Header().Set("Retry-After", "5")
			h.page(w, r, http.StatusServiceUnavailable, "error", errorPage{Title: "Store unavailable",
				Msg: "The server's store cannot read now (" + cause + "): the job is not lost; try again in a while.", Back: Prefix})
			return
		}
	}
	h.page(w, r, http.StatusNotFound, "error", errorPage{Title: "Job not found", Msg: "No job of yours has this id. Jobs are deleted a while after they finish.", Back: Prefix})
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.page(w, r, http.StatusNotFound, "error", errorPage{Title: "Not found", Msg: "There is no such page.", Back: Prefix})
}

// staticFiles serves the embedded assets, cacheable for a few minutes.
// Only files: a directory (the root, /ui/static/, among them) is 404, not
// a listing of what it holds.
func staticFiles(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) { // no file has such a name (net/http would answer 500)
			http.NotFound(w, r)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" {
			name = "."
		}
		if fi, err := fs.Stat(fsys, name); err != nil || !fi.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	})
}
