package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sift/batch/engine"
)

// jobList is GET /v1/batch's answer.
type jobList struct {
	Jobs       []jobHead `json:"jobs"`
	NextCursor string    `json:"next_cursor,omitempty"`
	// UnavailableNodes, in a cluster, names the nodes whose jobs the page
	// may lack: they did not answer, or are not members now.
	UnavailableNodes []string `json:"unavailable_nodes,omitempty"`
}

// list is GET /v1/batch?status=S&limit=N&cursor=C: the caller's own jobs,
// newest first, as summaries. A bad status, limit or cursor is 400 with a
// hint (an empty status or limit too; an empty cursor is the first
// page). Only the caller's jobs are listed, whatever cursor it sends.
//
// ?caller=NAME lists NAME's jobs, and ?caller=* every caller's
// ([engine.Runner.ListAll]), each with its caller: for an admin key only.
// Any other key gets 403 for any caller parameter, its own name included
// (so the answer does not tell which names exist); an admin's empty
// caller is 400.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, c *engine.Caller, class string) {
	q, ok := queryOf(w, r, "status", "limit", "cursor", "caller")
	if !ok {
		return
	}
	whose, across := q.Get("caller"), false
	if _, given := q["caller"]; given {
		switch {
		case class != ClassAdmin:
			writeError(w, http.StatusForbidden, "listing by caller needs an admin key", "leave caller out to list your own jobs")
			return
		case whose == "":
			writeError(w, http.StatusBadRequest, "bad caller: empty", "give caller as a caller's name, or * for every caller's jobs")
			return
		}
		across = true
	} else {
		whose = c.Name
	}
	if vs, given := q["status"]; given && vs[0] == "" {
		writeError(w, http.StatusBadRequest, "bad status: empty", "give status as one of live, queued, running, done, partial, failed, cancelled, terminal, or leave it out")
		return
	}
	opt := engine.ListOptions{Status: q.Get("status"), Cursor: q.Get("cursor")}
	if s, given := q["limit"]; given {
		n, err := strconv.Atoi(s[0])
		if err != nil || n < 1 || n > engine.MaxListLimit {
			writeError(w, http.StatusBadRequest, "bad limit", "give limit as a whole number from 1 to "+strconv.Itoa(engine.MaxListLimit))
			return
		}
		opt.Limit = n
	}
	var (
		jobs        []engine.Job
		next        string
		unavailable []string
		err         error
	)
	switch {
	case h.o.Cluster != nil && whose == "*":
		if !waiting(r, func() { jobs, next, unavailable, err = h.o.Cluster.ListAll(r.Context(), opt) }) {
			return // the client has gone
		}
	case h.o.Cluster != nil:
		if !waiting(r, func() { jobs, next, unavailable, err = h.o.Cluster.List(r.Context(), whose, opt) }) {
			return // the client has gone
		}
	case whose == "*":
		jobs, next, err = h.r.ListAll(opt)
	default:
		jobs, next, err = h.r.List(whose, opt)
	}
	switch {
	case errors.Is(err, engine.ErrBadList):
		hint := "give status as one of live, queued, running, done, partial, failed, cancelled, terminal"
		if strings.Contains(err.Error(), "cursor") {
			hint = "give cursor as the next_cursor of the page before, or none for the first page"
		}
		writeError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), engine.ErrBadList.Error()+": "), hint)
		return
	case err != nil:
		h.log.Warn("list jobs", "err", "store failed")
		h.retryAfter(w)
		writeError(w, http.StatusServiceUnavailable, "jobs cannot be listed now", "try again in a moment")
		return
	}
	out := jobList{Jobs: make([]jobHead, len(jobs)), NextCursor: next, UnavailableNodes: unavailable}
	for i := range jobs {
		out.Jobs[i] = headOf(&jobs[i])
		if across {
			out.Jobs[i].Caller = jobs[i].Caller
		}
	}
	h.writeHeld(w, r, out)
}
