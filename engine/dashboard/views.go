package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sift/batch/engine"
)

// previewBytes is how much of a result's content its page shows.
const previewBytes = 4 << 10

// recentRows is how many finished jobs the overview lists.
const recentRows = 10

var funcs = template.FuncMap{}

// pageData is what every page template gets.
type pageData struct {
	Title string
	User  *userView // nil when signed out
	// Stream is the URL of the page's event stream; set on live pages.
	Stream string
	Body   any
}

// userView is who is signed in, as the header shows it.
type userView struct {
	Name  string
	Admin bool
	CSRF  string
}

type errorPage struct {
	Title string
	Msg   string
	Back  string
}

type signInPage struct{ Msg string }

// page renders a page outside the signed-in pages: the sign-in form, or
// an error page. An error page for r of a live session keeps the
// navigation and Sign out, as every signed-in page has them.
func (h *Handler) page(w http.ResponseWriter, r *http.Request, code int, name string, body any) {
	d := pageData{Title: "Sign in", Body: body}
	if e, ok := body.(errorPage); ok {
		d.Title = e.Title
		if ss, ok := h.session(r); ok {
			d.User = user(ss)
		}
	}
	h.render(w, code, name, d)
}

// render writes a page: the template name executed with d.
func (h *Handler) render(w http.ResponseWriter, code int, name string, d pageData) {
	var buf bytes.Buffer
	if err := h.tpl.ExecuteTemplate(&buf, name, d); err != nil {
		h.log.Error("dashboard template failed: a possible bug in siftbatch", slog.String("template", name))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func user(ss *session) *userView { return &userView{Name: ss.name, Admin: ss.admin, CSRF: ss.csrf} }

// overview is GET /ui/: the sign-in form, or the overview of the jobs the
// session may see.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ss, ok := h.session(r)
	if !ok {
		h.page(w, r, http.StatusOK, "signin", signInPage{})
		return
	}
	var v overviewView
	if !h.readTurn(w, r, ss, func() { v = h.overviewView(r.Context(), ss) }) {
		return // refused (429), or the client has gone
	}
	h.render(w, http.StatusOK, "overview", pageData{Title: "Overview", User: user(ss), Stream: Prefix + "events", Body: v})
}

// jobView is one job as a row of the overview shows it.
type jobView struct {
	ID         string
	Short      string // the short id every list shows and "Open a job" takes
	Caller     string
	ShowCaller bool
	Status     string
	Error      string
	Created    string
	Total      int
	Done       int
	Failed     int
	// NotRun counts the targets an ended job left pending, which will
	// never run ([engine.NotRun]): Done + NotRun is Total once it ended.
	NotRun int
	Live   bool
	Bar    barView
	// Started and Ended are the job's times ("" when unknown: not yet, or
	// stored before siftbatch kept them); Took is its duration, or how
	// long it has run so far while live ("" when unknown).
	Started, Ended, Took string
}

// barView is a progress bar: succeeded, failed, the target in flight
// (the next one, while it is at a worker: a job's targets go one at a
// time), and the pending rest (or, once the job has ended, the targets
// that will never run), as percentages of the SVG's width.
type barView struct {
	OkPct, FailPct      float64
	FlightX, FlightPct  float64
	NotRunX, NotRunPct  float64
	Flight              bool
	Ok, Failed, Pending int
	NotRun              int
}

// newBar is j's bar; atWorker says that one of its targets is at a
// worker now (a running job waits its turn in the rotation most of the
// time: it shows no target in flight then).
func newBar(j engine.Job, atWorker bool) barView {
	b := barView{Ok: j.TargetsDone - j.TargetsFailed, Failed: j.TargetsFailed, NotRun: engine.NotRun(j.Status, j.TargetsTotal, j.TargetsDone)}
	b.Pending = j.TargetsTotal - j.TargetsDone - b.NotRun
	if j.TargetsTotal <= 0 {
		return b
	}
	unit := 100 / float64(j.TargetsTotal)
	b.OkPct = round2(float64(b.Ok) * unit)
	b.FailPct = round2(float64(b.Failed) * unit)
	if b.NotRun > 0 {
		b.NotRunX, b.NotRunPct = round2(b.OkPct+b.FailPct), round2(float64(b.NotRun)*unit)
	}
	if atWorker && engine.IsLive(j.Status) && b.Pending > 0 {
		b.Flight, b.FlightX, b.FlightPct = true, round2(b.OkPct+b.FailPct), round2(unit)
	}
	return b
}

func round2(f float64) float64 { return float64(int(f*100+0.5)) / 100 }

// newJobView is j as a row shows it; atWorker as for [newBar].
func newJobView(j engine.Job, showCaller, atWorker bool) jobView {
	v := jobView{
		ID: j.ID, Short: engine.ShortID(j.ID), Caller: j.Caller, ShowCaller: showCaller, Status: j.Status, Error: j.Error,
		Created: time.Unix(j.CreatedAt, 0).UTC().Format("Jan 2 15:04:05 UTC"),
		Total:   j.TargetsTotal, Done: j.TargetsDone, Failed: j.TargetsFailed, NotRun: engine.NotRun(j.Status, j.TargetsTotal, j.TargetsDone),
		Live: engine.IsLive(j.Status), Bar: newBar(j, atWorker),
		Started: fmtWhen(j.StartedAt), Ended: fmtWhen(j.EndedAt),
	}
	switch {
	case j.Duration > 0:
		v.Took = fmtDuration(j.Duration) // to the millisecond
	case j.StartedAt > 0 && j.EndedAt >= j.StartedAt:
		v.Took = fmtSpan(time.Duration(j.EndedAt-j.StartedAt) * time.Second) // whole seconds are all that is known
	}
	return v
}

// withRunning sets v.Took to how long a live job has run by now.
func (v jobView) withRunning(j engine.Job, now time.Time) jobView {
	if v.Live && j.StartedAt > 0 {
		v.Took = fmtSpan(now.Sub(time.Unix(j.StartedAt, 0))) + " so far"
	}
	return v
}

// fmtWhen is a unix time as the pages show it; "" for 0 (unknown).
func fmtWhen(unix int64) string {
	if unix <= 0 {
		return ""
	}
	return time.Unix(unix, 0).UTC().Format("Jan 2 15:04:05 UTC")
}

// fmtSpan is a job's duration, known to the second: < 1 s, 8 s, 3m 04s,
// 2h 05m.
func fmtSpan(d time.Duration) string {
	switch {
	case d < 0:
		return ""
	case d < time.Second:
		return "< 1 s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	}
	return fmtDuration(d)
}

// fmtDuration is a duration as the pages show it: < 1 ms, 85 ms, 4.2 s,
// 3m 04s, 2h 05m.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return ""
	case d < time.Millisecond:
		return "< 1 ms"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
}

// callerCount is one caller's live jobs, for the admin's caps.
type callerCount struct {
	Name string
	N    int
}

// overviewView is the overview's live part.
type overviewView struct {
	Admin  bool
	Live   []jobView
	Queued int
	Recent []jobView

	// A caller's own numbers.
	Mine          int
	JobsPerCaller int

	// The admin's: the whole runner.
	LiveTotal  int
	JobsTotal  int
	PerCaller  []callerCount
	Workers    int
	Busy       string
	State      string
	HookPanics uint64
	Charts     []chartView
	// FetchP50 and FetchP95 are the fetch time's quantiles over the last
	// 15 minutes ("" when no target was stored then), of FetchN targets.
	FetchP50, FetchP95 string
	FetchN             int
	// Missing names the cluster's nodes whose jobs the lists may lack:
	// they did not answer.
	Missing []string
}

// clusterLiveRows is how many live jobs of the other nodes of a cluster
// the overview lists, at most.
const clusterLiveRows = 100

func (h *Handler) overviewView(ctx context.Context, ss *session) overviewView {
	v := overviewView{Admin: ss.admin, JobsPerCaller: h.o.Config.JobsPerCaller}
	counts := map[string]int{}
	live := h.r.Live()
	here := make(map[string]bool, len(live))
	for _, j := range live {
		counts[j.Caller]++
		here[j.ID] = true
		if !ss.admin && j.Caller != ss.name {
			continue
		}
		v.Live = append(v.Live, newJobView(j, ss.admin, h.atWorker(j)))
		if j.Status == engine.StatusQueued {
			v.Queued++
		}
	}
	v.Mine = counts[ss.name]
	if h.o.Cluster != nil {
		// The other nodes' live jobs, after this node's (which are in
		// rotation order): newest first.
		jobs, _, missing, err := h.listPage(ctx, ss, "", engine.ListOptions{Status: "live", Limit: clusterLiveRows})
		if err == nil {
			for _, j := range jobs {
				if !here[j.ID] {
					v.Live = append(v.Live, newJobView(j, ss.admin, false))
					if j.Status == engine.StatusQueued {
						v.Queued++
					}
				}
			}
		}
		v.Missing = missing
	}
	recent, missing := h.finished(ctx, ss)
	for _, j := range recent {
		v.Recent = append(v.Recent, newJobView(j, ss.admin, false))
	}
	v.Missing = mergeNames(v.Missing, missing)
	if !ss.admin {
		return v
	}
	for name, n := range counts {
		v.LiveTotal += n
		v.PerCaller = append(v.PerCaller, callerCount{name, n})
	}
	slices.SortFunc(v.PerCaller, func(a, b callerCount) int { return strings.Compare(a.Name, b.Name) })
	v.JobsTotal, v.Workers = h.o.Config.JobsTotal, h.o.Config.Workers
	v.Busy = "—"
	v.State = "serving"
	if err := h.r.Err(); err != nil {
		v.State = err.Error()
	}
	v.HookPanics = h.r.HookPanics()
	if busy, ok := h.stats.busy(); ok {
		v.Busy = strconv.Itoa(int(busy))
	}
	v.Charts = h.stats.charts()
	if p50, p95, n, ok := h.stats.fetchQuantiles(); ok {
		v.FetchP50, v.FetchP95, v.FetchN = fmtSeconds(p50), fmtSeconds(p95), n
	}
	return v
}

// atWorker reports whether one of the live job j's targets is at a worker
// now: read with [engine.Runner.Targets], which a live job answers from
// its actor's latest snapshot (the store is read once per change of it,
// not once per page). A queued job has none.
func (h *Handler) atWorker(j engine.Job) bool {
	if j.Status != engine.StatusRunning {
		return false
	}
	_, ts, ok := h.r.Targets(j.ID)
	return ok && anyAtWorker(ts)
}

func anyAtWorker(ts []engine.TargetStatus) bool {
	for _, t := range ts {
		if t.Status == engine.TargetRunning {
			return true
		}
	}
	return false
}

// finished returns the newest finished jobs the session may see, from
// the store's indexes (so they are right after a restart): a caller's
// own ([engine.Runner.List]); every caller's for an admin
// ([engine.Runner.ListAll]); in a cluster, every node's, with the names of
// the nodes that did not answer. None when the store cannot be read.
func (h *Handler) finished(ctx context.Context, ss *session) ([]engine.Job, []string) {
	jobs, _, missing, err := h.listPage(ctx, ss, "", engine.ListOptions{Status: "terminal", Limit: recentRows})
	if err != nil {
		return nil, missing
	}
	return jobs, missing
}

// mergeNames is the sorted union of two lists of names.
func mergeNames(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// validID matches a job id: 32 lowercase hex digits.
var validID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// targetView is one target as the job page shows it.
type targetView struct {
	Idx    int
	URL    string
	Status string
	Error  string
	Hint   string
	Size   string // the size of the page the result holds (its content), "" when none
	// Options are the options the target ran with, those set.
	Options []metaPair
	// Took is the fetch's duration, Stored when its outcome was stored
	// ("" when unknown).
	Took, Stored string
}

// jobPageView is the job page's live part.
type jobPageView struct {
	Job     jobView
	Targets []targetView
	CSRF    string
	// Resubmit offers "Resubmit failed targets": the job has ended with
	// failed targets.
	Resubmit bool
	// From is the job this one was resubmitted from (its page only, not
	// its stream); Reused says that Submit gave back a job that was there.
	From, FromShort string
	Reused          bool
	// Node is the node that holds the job, when another (a cluster): it
	// is cancelled there, and its results are read there. Unlisted is how
	// many of its targets were too many to read from it.
	Node     string
	Unlisted int
}

// targetOptions are the options set in o, by their JSON names.
func targetOptions(o engine.Options) []metaPair {
	var out []metaPair
	for _, p := range []metaPair{{"mode", o.Mode}, {"question", o.Question}, {"pages", o.Pages}, {"grep", o.Grep}, {"jq", o.JQ}} {
		if p.Value != "" {
			out = append(out, p)
		}
	}
	if o.Context != nil {
		out = append(out, metaPair{"context", strconv.FormatBool(*o.Context)})
	}
	if o.Recover {
		out = append(out, metaPair{"recover", "true"})
	}
	return out
}

// jobPageView returns the job page of id: ok false if the session may
// not see it (or it is gone); an error if it is another node's that
// cannot be read now.
func (h *Handler) jobPageView(ctx context.Context, id string, ss *session) (v jobPageView, ok bool, err error) {
	jr, ok := h.read(ctx, id, ss)
	switch {
	case !ok:
		return jobPageView{}, false, nil
	case jr.err != nil:
		return jobPageView{}, true, jr.err
	}
	j, ts := jr.job, jr.targets
	if jr.node == "" {
		if j, ts, ok = h.r.Targets(id); !ok {
			return jobPageView{}, false, nil
		}
	}
	v = jobPageView{Job: newJobView(j, true, anyAtWorker(ts)).withRunning(j, h.o.Now()), CSRF: ss.csrf, Node: jr.node}
	v.Resubmit = !engine.IsLive(j.Status) && j.TargetsFailed > 0
	if jr.node != "" {
		v.Unlisted = j.TargetsTotal - len(ts)
	}
	for _, t := range ts {
		tv := targetView{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: t.Hint,
			Options: targetOptions(t.Options), Stored: fmtWhen(t.StoredAt)}
		if t.Duration > 0 {
			tv.Took = fmtDuration(t.Duration)
		}
		if t.Status == engine.TargetDone && jr.node == "" {
			if n, ok := h.sizes.get(h.r, id, t.Idx); ok {
				tv.Size = humanBytes(n)
			}
		}
		v.Targets = append(v.Targets, tv)
	}
	return v, true, nil
}

// jobPage is GET /ui/jobs/{id}: every target of a job the session may
// see; 404 for another caller's job, exactly as for a missing one; 503
// for another node's job when that node cannot be read now. An id that is
// not whole (the short id every list shows, or 4 or more of its first
// digits, in any case) is answered as "Open a job" answers it
// ([Handler.openJob]): the one job of the session's that begins so opens,
// several are listed, none (or only another caller's) is 404.
func (h *Handler) jobPage(w http.ResponseWriter, r *http.Request, ss *session) {
	id := r.PathValue("id")
	if !validID.MatchString(id) {
		h.openJobInTurn(w, r, ss, strings.ToLower(id))
		return
	}
	v, ok, err := h.jobPageView(r.Context(), id, ss)
	switch {
	case !ok:
		h.jobNotFound(w, r)
		return
	case err != nil:
		h.nodeUnavailable(w, r, jobRead{err: err})
		return
	}
	if from := r.URL.Query().Get("from"); validID.MatchString(from) {
		if jr, ok := h.read(r.Context(), from, ss); ok && jr.err == nil {
			v.From, v.FromShort, v.Reused = from, engine.ShortID(from), r.URL.Query().Get("reused") == "1"
		}
	}
	h.render(w, http.StatusOK, "job", pageData{Title: "Job " + engine.ShortID(id), User: user(ss), Stream: Prefix + "events?job=" + id, Body: v})
}

// resultView is the result page.
type resultView struct {
	JobID     string
	JobShort  string
	Idx       int
	URL       string
	Meta      []metaPair
	Content   string
	Size      string
	Truncated bool
}

type metaPair struct{ Key, Value string }

// resultPage is GET /ui/jobs/{id}/{idx}: the first bytes of one stored
// result.
func (h *Handler) resultPage(w http.ResponseWriter, r *http.Request, ss *session) {
	id := r.PathValue("id")
	jr, ok := h.read(r.Context(), id, ss)
	j := jr.job
	idx, err := strconv.Atoi(r.PathValue("idx"))
	switch {
	case ok && jr.err != nil:
		h.nodeUnavailable(w, r, jr)
		return
	case !ok || err != nil || idx < 0 || idx >= j.TargetsTotal:
		h.jobNotFound(w, r)
		return
	case jr.node != "":
		h.page(w, r, http.StatusNotImplemented, "error", errorPage{Title: "On another node", Msg: "This job's results are stored on node " + jr.node +
			": open them from node " + jr.node + "'s dashboard, or over the API (GET /v1/batch/" + id + "/" + strconv.Itoa(idx) + " with its owner's key, on any node).", Back: Prefix + "jobs/" + id})
		return
	}
	_, ts, ok := h.r.Targets(id)
	res, rok := readHead(h.r, id, idx) // the content's first bytes and the meta: not the whole result
	if !ok || !rok || idx >= len(ts) {
		h.page(w, r, http.StatusNotFound, "error", errorPage{Title: "No result", Msg: "This target has no stored result.", Back: Prefix + "jobs/" + id})
		return
	}
	v := resultView{JobID: id, JobShort: engine.ShortID(id), Idx: idx, URL: ts[idx].URL, Size: humanBytes(int(res.size))}
	v.Content, v.Truncated = res.content, res.truncated
	keys := make([]string, 0, len(res.meta))
	for k := range res.meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v.Meta = append(v.Meta, metaPair{k, fmt.Sprint(res.meta[k])})
	}
	h.render(w, http.StatusOK, "result", pageData{Title: fmt.Sprintf("Result %d of %s", idx, engine.ShortID(id)), User: user(ss), Body: v})
}

func humanBytes(n int) string {
	switch {
	case n < 1<<10:
		return strconv.Itoa(n) + " B"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// sizes caches the sizes of stored results' contents (the page, as the
// result page shows it, not the stored JSON with its meta and escapes): a
// result never changes once stored, so each is read once. Safe for
// concurrent use.
type sizes struct {
	mu sync.Mutex
	m  map[string]int
}

// maxSizes bounds the cache; past it, it starts again empty.
const maxSizes = 10000

func (s *sizes) get(r runner, id string, idx int) (int, bool) {
	key := id + "/" + strconv.Itoa(idx)
	s.mu.Lock()
	n, ok := s.m[key]
	s.mu.Unlock()
	if ok {
		return n, true
	}
	cr, ok := r.ContentRange(id, idx, 0, 1) // the page's length (its JSON text) from the stored result's ends: no result read
	if !ok {
		return 0, false
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxSizes {
		s.m = make(map[string]int)
	}
	s.m[key] = int(cr.Total)
	return int(cr.Total), true
}
