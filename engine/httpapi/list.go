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
func (h *Handler) list(w http.ResponseWriter, r *http.Request, c *engine.Caller, _ string) {
	q, ok := queryOf(w, r, "status", "limit", "cursor")
	if !ok {
		return
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
	if h.o.Cluster != nil {
		if !waiting(r, func() { jobs, next, unavailable, err = h.o.Cluster.List(r.Context(), c.Name, opt) }) {
			return // the client has gone
		}
	} else {
		jobs, next, err = h.r.List(c.Name, opt)
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
		writeError(w, http.StatusServiceUnavailable, "jobs cannot be listed now", "try again in a moment")
		return
	}
	out := jobList{Jobs: make([]jobHead, len(jobs)), NextCursor: next, UnavailableNodes: unavailable}
	for i, j := range jobs {
		out.Jobs[i] = jobHead{ID: j.ID, Status: j.Status, Error: j.Error, TargetsTotal: j.TargetsTotal,
			TargetsDone: j.TargetsDone, TargetsFailed: j.TargetsFailed, CreatedAt: j.CreatedAt}
	}
	h.writeHeld(w, r, out)
}
