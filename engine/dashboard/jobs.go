package dashboard

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sift/batch/engine"
)

// The jobs page's bounds.
const (
	// jobsPerPage is how many jobs a page of /ui/jobs lists.
	jobsPerPage = 25
	// urlScanJobs is how many of the newest visible jobs a search by URL
	// reads the targets of, at most.
	urlScanJobs = 5000
	// urlMatches is how many jobs a search by URL lists, at most.
	urlMatches = 100
	// idMatches is how many jobs a search by id prefix lists, at most.
	idMatches = 50
	// maxQuery is the longest search the page takes, in bytes.
	maxQuery = 512
	// urlSearches is how many searches by URL run at once, across every
	// session: each reads up to urlScanJobs jobs' targets. They are
	// shared fairly by caller (round-robin among the callers whose
	// searches wait), so one user's searches make another's wait for one
	// search at most, never refuse it.
	urlSearches = 2
	// urlSearchesQueued is how many searches by URL of one caller may
	// wait for a place; past it, 429.
	urlSearchesQueued = 1
)

// statusChoices are the jobs page's status filter, as [engine.ListOptions]
// takes them ("" is every status).
var statusChoices = []string{"", "live", "terminal", "queued", "running", "done", "partial", "failed", "cancelled"}

// hexPrefix matches what may be an id or its beginning: at least
// engine.MinShortPrefix (4) hex digits.
var hexPrefix = regexp.MustCompile(`^[0-9a-f]{4,32}$`)

// jobsQuery is the jobs page's query: its filters, search and page.
type jobsQuery struct {
	Status string
	Caller string // admin only: "" is every caller
	Q      string
	Cursor string
}

// url is the page of q, at cursor.
func (q jobsQuery) url(cursor string) string {
	v := url.Values{}
	for k, s := range map[string]string{"status": q.Status, "caller": q.Caller, "q": q.Q, "cursor": cursor} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return Prefix + "jobs"
	}
	return Prefix + "jobs?" + v.Encode()
}

// jobsPageView is the jobs page.
type jobsPageView struct {
	Admin    bool
	Query    jobsQuery
	Statuses []string
	Jobs     []jobView
	// Title says what is listed: "Jobs", "Jobs whose id begins with …".
	Title string
	// Note says how a search went: what it scanned, what it left out.
	Note string
	Msg  string // a refusal: a bad filter or cursor; or the store unread
	// Unavailable says that the store could not be read (503, not 400).
	Unavailable bool
	// Busy says that too many searches by URL run already (429).
	Busy bool
	// Missing names the cluster's nodes whose jobs the list may lack:
	// they did not answer.
	Missing []string
	Next    string // the next page's URL, "" on the last
	First   string // the first page's URL, "" on the first
}

// jobsPage is GET /ui/jobs: every job the session may see, newest first,
// a page at a time, with filters for status and (for an admin) caller, and
// a search by id prefix or URL substring. ?id=ID (the overview's "Open a
// job") opens a job by its id or short id.
func (h *Handler) jobsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	qs := r.URL.Query()
	if qs.Has("id") && strings.TrimSpace(qs.Get("id")) != "" {
		h.openJob(w, r, ss, strings.ToLower(strings.TrimSpace(qs.Get("id"))))
		return
	}
	q := parseJobsQuery(qs, ss)
	v := h.jobsView(r.Context(), ss, q)
	code := http.StatusOK
	switch {
	case v.Busy:
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "2")
	case v.Unavailable:
		code = http.StatusServiceUnavailable
	case v.Msg != "":
		code = http.StatusBadRequest
	}
	stream := ""
	if code == http.StatusOK {
		stream = q.stream()
	}
	h.render(w, code, "jobs", pageData{Title: "Jobs", User: user(ss), Stream: stream, Body: v})
}

// parseJobsQuery reads the jobs page's query: the caller filter is an
// admin's only (another session's is dropped: it lists its own jobs).
func parseJobsQuery(qs url.Values, ss *session) jobsQuery {
	q := jobsQuery{Status: qs.Get("status"), Q: strings.TrimSpace(qs.Get("q")), Cursor: qs.Get("cursor")}
	if ss.admin {
		q.Caller = strings.TrimSpace(qs.Get("caller"))
		if q.Caller == "*" {
			q.Caller = "" // every caller, as the API's ?caller=*
		}
	}
	return q
}

// stream is the event stream of q's page, when it is live: a list's first
// page, without a search ("" otherwise: a search or an older page stays as
// it was read).
func (q jobsQuery) stream() string {
	if q.Q != "" || q.Cursor != "" {
		return ""
	}
	v := url.Values{"list": {"1"}}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	if q.Caller != "" {
		v.Set("caller", q.Caller)
	}
	return Prefix + "events?" + v.Encode()
}

// jobsView lists the jobs of q that ss may see.
func (h *Handler) jobsView(ctx context.Context, ss *session, q jobsQuery) jobsPageView {
	v := jobsPageView{Admin: ss.admin, Query: q, Statuses: statusChoices, Title: "Jobs"}
	if len(q.Q) > maxQuery || len(q.Caller) > maxQuery || !utf8.ValidString(q.Q+q.Caller) {
		v.Msg = "A search or caller is at most " + itoa(maxQuery) + " characters of text."
		v.Query.Q, v.Query.Caller = "", ""
		return v
	}
	if !validStatus(q.Status) {
		v.Msg = "No such status: choose one from the list."
		v.Query.Status = ""
		return v
	}
	if q.Cursor != "" {
		v.First = q.url("")
	}
	switch {
	case q.Q == "":
		var (
			jobs    []engine.Job
			next    string
			missing []string
			err     error
		)
		if !h.readIn(ctx, ss, &v, func() {
			jobs, next, missing, err = h.listPage(ctx, ss, q.Caller, engine.ListOptions{Status: q.Status, Limit: jobsPerPage, Cursor: q.Cursor})
		}) {
			return v
		}
		if err != nil {
			v.Msg, v.Unavailable = listErrText(err), !errors.Is(err, engine.ErrBadList)
			return v
		}
		v.Missing = missing
		v.Jobs = h.rows(ss, jobs)
		if next != "" {
			v.Next = q.url(next)
			if len(jobs) < jobsPerPage {
				// The store looked at engine.ListScan jobs for this page
				// and found fewer that match: the page is short, not the
				// last.
				v.Note = "This page looked at " + itoa(engine.ListScan) + " jobs (a page looks at no more) and found " +
					itoa(len(jobs)) + " that match: Older → looks further."
			}
		}
	case hexPrefix.MatchString(strings.ToLower(q.Q)):
		v.Title = "Jobs whose id begins with " + strings.ToLower(q.Q)
		var (
			jobs    []engine.Job
			missing []string
			bounded bool
			err     error
		)
		if !h.readIn(ctx, ss, &v, func() { jobs, missing, bounded, err = h.findByPrefix(ctx, ss, strings.ToLower(q.Q), idMatches) }) {
			return v
		}
		if err != nil {
			v.Msg, v.Unavailable = listErrText(err), !errors.Is(err, engine.ErrBadList)
			return v
		}
		v.Missing = missing
		if bounded {
			v.Note = "This node's jobs searched whole; the other nodes' among the newest " + itoa(urlScanJobs) + " jobs only."
		}
		var keep []engine.Job
		for _, j := range jobs {
			if statusMatches(q.Status, j.Status) && (q.Caller == "" || j.Caller == q.Caller) {
				keep = append(keep, j)
			}
		}
		v.Jobs = h.rows(ss, keep)
		if len(keep) == 0 {
			// Hex digits may be part of a URL too.
			if u := h.urlSearch(ctx, ss, q, v, false); !u.Busy {
				return u
			}
			v.Note = "No job's id begins with these digits (a search of the URLs for them is not possible right now: try again in a moment)."
		}
		v.First = ""
	default:
		return h.urlSearch(ctx, ss, q, v, true)
	}
	return v
}

// readIn runs fn in a read turn of ss's caller ([Options.Reads]); false,
// with v's message set (Busy: 429), if it was refused or ctx ended.
func (h *Handler) readIn(ctx context.Context, ss *session, v *jobsPageView, fn func()) bool {
	err := h.reads.Read(ctx, ss.name, fn)
	switch {
	case err == nil:
		return true
	case errors.Is(err, errBusy):
		v.Msg, v.Busy = "Too many reads of yours wait for their turn already: try again in a few seconds.", true
	default:
		v.Msg, v.Unavailable = "The request ended before the jobs were read.", true
	}
	return false
}

// urlSearch lists the jobs, among the newest urlScanJobs the session may
// see (with q's filters), that have a target whose URL holds q.Q (case
// aside): the first urlMatches of them. In a cluster, this node's jobs
// only (the other nodes' targets are not read: as many requests as jobs),
// and the page says so.
//
// A search takes one of the urlSearches places, shared fairly by caller
// (a caller's search past urlSearchesQueued waiting is 429), and reads
// each page of jobs in a read turn of its own, so that the other reads of
// the server go on between its pages. Without wait (a search by id that
// found nothing, tried on the URLs too), it runs only if a place is free
// at once, else it is Busy.
func (h *Handler) urlSearch(ctx context.Context, ss *session, q jobsQuery, v jobsPageView, wait bool) jobsPageView {
	v.Title, v.First, v.Next = "Jobs with a URL that holds “"+q.Q+"”", "", ""
	switch {
	case !wait && !h.searches.TryAcquire():
		v.Msg, v.Busy = "Other searches by URL are running: try again in a moment, or search by id.", true
		return v
	case wait:
		if err := h.searches.Acquire(ctx, ss.name, false); err != nil {
			v.Msg, v.Busy = "Other searches by URL of yours wait already: try again in a moment, or search by id.", true
			return v
		}
	}
	defer h.searches.Release()
	needle := strings.ToLower(q.Q)
	scanned, cursor := 0, ""
	var found []engine.Job
	more := false
	for scanned < urlScanJobs && len(found) < urlMatches {
		var (
			jobs []engine.Job
			next string
			err  error
		)
		if !h.readIn(ctx, ss, &v, func() {
			jobs, next, err = h.localPage(ss, q.Caller, engine.ListOptions{Status: q.Status, Limit: engine.MaxListLimit, Cursor: cursor})
			if err != nil {
				return
			}
			for i, j := range jobs {
				if scanned == urlScanJobs || len(found) == urlMatches {
					more = more || i < len(jobs) || next != ""
					break
				}
				scanned++
				if _, ts, ok := h.r.Targets(j.ID); ok && anyURLHolds(ts, needle) {
					found = append(found, j)
				}
			}
		}) {
			return v
		}
		if err != nil {
			v.Msg, v.Unavailable = listErrText(err), !errors.Is(err, engine.ErrBadList)
			return v
		}
		if next == "" {
			break
		}
		cursor = next
		more = true
	}
	if len(found) < urlMatches && scanned < urlScanJobs {
		more = false
	}
	v.Jobs = h.rows(ss, found)
	switch {
	case more && len(found) == urlMatches:
		v.Note = "The first " + itoa(urlMatches) + " matches shown, from the newest " + itoa(scanned) + " jobs: narrow the search, or filter by status."
	case more:
		v.Note = "Searched the URLs of the newest " + itoa(scanned) + " jobs only (a search reads at most " + itoa(urlScanJobs) + "): filter by status or caller to reach older ones."
	default:
		v.Note = "Searched the URLs of all " + itoa(scanned) + " jobs."
	}
	if h.o.Cluster != nil {
		v.Note += " Only this node's jobs are searched by URL: search the other nodes' from their own dashboards."
	}
	return v
}

func anyURLHolds(ts []engine.TargetStatus, needle string) bool {
	for _, t := range ts {
		if strings.Contains(strings.ToLower(t.URL), needle) {
			return true
		}
	}
	return false
}

// rows are jobs as the jobs page lists them.
func (h *Handler) rows(ss *session, jobs []engine.Job) []jobView {
	out := make([]jobView, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, newJobView(j, ss.admin, h.atWorker(j)))
	}
	return out
}

// openJob is GET /ui/jobs?id=ID: a whole id, or a short one (≥ 4 hex
// digits, the beginning of the id as every list shows it), opens the
// job; several jobs that begin so are listed; none, or another caller's
// (for all but an admin), is answered as a missing job.
func (h *Handler) openJob(w http.ResponseWriter, r *http.Request, ss *session, id string) {
	h.openJobTurn(w, r, ss, id, func(fn func()) bool { return h.readTurn(w, r, ss, fn) })
}

// openJobInTurn is openJob for a page that already holds a read turn of
// the session's caller (jobPage, run by inTurn): its search runs in that
// turn, since waiting for a second turn of the same caller behind the
// first would never end.
func (h *Handler) openJobInTurn(w http.ResponseWriter, r *http.Request, ss *session, id string) {
	h.openJobTurn(w, r, ss, id, func(fn func()) bool { fn(); return true })
}

// openJobTurn is openJob with the search run by turn: false when the turn
// was refused (answered) or the client has gone.
func (h *Handler) openJobTurn(w http.ResponseWriter, r *http.Request, ss *session, id string, turn func(func()) bool) {
	if validID.MatchString(id) {
		http.Redirect(w, r, Prefix+"jobs/"+id, http.StatusSeeOther)
		return
	}
	if !hexPrefix.MatchString(id) {
		h.jobNotFound(w, r)
		return
	}
	var (
		jobs    []engine.Job
		missing []string
		err     error
	)
	if !turn(func() { jobs, missing, _, err = h.findByPrefix(r.Context(), ss, id, idMatches) }) {
		return // refused (429), or the client has gone
	}
	switch {
	case err == nil && len(jobs) == 0 && len(missing) > 0:
		// The job may be on a node that did not answer.
		w.Header().Set("Retry-After", "5")
		h.page(w, r, http.StatusServiceUnavailable, "error", errorPage{Title: "Node unavailable",
			Msg: "No job found with these digits, but node " + strings.Join(missing, ", ") + " did not answer: its jobs were not searched. Try again in a while.", Back: Prefix})
	case err != nil || len(jobs) == 0:
		h.jobNotFound(w, r)
	case len(jobs) == 1:
		http.Redirect(w, r, Prefix+"jobs/"+jobs[0].ID, http.StatusSeeOther)
	default:
		v := jobsPageView{Admin: ss.admin, Statuses: statusChoices, Query: jobsQuery{Q: id}, Missing: missing,
			Title: "Jobs whose id begins with " + id, Note: "More than one job begins with these digits: choose one.", Jobs: h.rows(ss, jobs)}
		h.render(w, http.StatusOK, "jobs", pageData{Title: "Jobs", User: user(ss), Body: v})
	}
}

// listPage is a page of the jobs ss may see: its own; for an admin,
// caller's, or every caller's when caller is "". In a cluster, every
// node's, and missing names the nodes whose jobs the page may lack.
func (h *Handler) listPage(ctx context.Context, ss *session, caller string, opt engine.ListOptions) (jobs []engine.Job, next string, missing []string, err error) {
	if !ss.admin {
		caller = ss.name
	}
	switch c := h.o.Cluster; {
	case c != nil && caller != "":
		return c.List(ctx, caller, opt)
	case c != nil:
		return c.ListAll(ctx, opt)
	}
	jobs, next, err = h.localPage(ss, caller, opt)
	return jobs, next, nil, err
}

// localPage is listPage on this node's runner only.
func (h *Handler) localPage(ss *session, caller string, opt engine.ListOptions) ([]engine.Job, string, error) {
	switch {
	case !ss.admin:
		return h.r.List(ss.name, opt)
	case caller != "":
		return h.r.List(caller, opt)
	}
	return h.r.ListAll(opt)
}

// findByPrefix returns the jobs ss may see whose short id (or id) begins
// with prefix, newest first, at most limit. In a cluster, this node's
// store is searched whole ([engine.Runner.FindJobs]) and the other nodes'
// jobs among the newest urlScanJobs the session may see (scanned reports
// that the bound was reached); missing names the nodes that did not
// answer.
func (h *Handler) findByPrefix(ctx context.Context, ss *session, prefix string, limit int) (jobs []engine.Job, missing []string, bounded bool, err error) {
	caller := ss.name
	if ss.admin {
		caller = ""
	}
	jobs, err = h.r.FindJobs(caller, prefix, limit)
	if err != nil || h.o.Cluster == nil {
		return jobs, nil, false, err
	}
	long := len(prefix) > engine.ShortIDLen
	matches := func(id string) bool {
		if long {
			return strings.HasPrefix(id, prefix)
		}
		return strings.HasPrefix(engine.ShortID(id), prefix)
	}
	scanned, cursor := 0, ""
	for scanned < urlScanJobs {
		page, next, miss, err := h.listPage(ctx, ss, "", engine.ListOptions{Limit: engine.MaxListLimit, Cursor: cursor})
		if err != nil {
			return nil, nil, false, err
		}
		missing = mergeNames(missing, miss)
		for _, j := range page {
			if scanned == urlScanJobs {
				bounded = true
				break
			}
			scanned++
			if matches(j.ID) {
				jobs = append(jobs, j)
			}
		}
		if next == "" {
			break
		}
		cursor = next
		bounded = bounded || scanned == urlScanJobs
	}
	slices.SortFunc(jobs, func(a, b engine.Job) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	jobs = slices.CompactFunc(jobs, func(a, b engine.Job) bool { return a.ID == b.ID })
	if limit > 0 && len(jobs) > limit {
		jobs = jobs[:limit]
	}
	return jobs, missing, bounded, nil
}

// itoa writes n with a comma between thousands: 5,000.
func itoa(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func validStatus(s string) bool {
	for _, c := range statusChoices {
		if s == c {
			return true
		}
	}
	return false
}

// statusMatches reports whether a job's status passes the filter f, as
// [engine.ListOptions.Status] would.
func statusMatches(f, status string) bool {
	switch f {
	case "":
		return true
	case "live":
		return engine.IsLive(status)
	case "terminal":
		return !engine.IsLive(status)
	}
	return f == status
}

// listErrText is a list's error as the page says it.
func listErrText(err error) string {
	if errors.Is(err, engine.ErrBadList) {
		return "This page's link is not one the dashboard gave (a bad cursor or filter): start again from the first page."
	}
	return "The jobs cannot be read right now: try again later."
}
