package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
)

// resubmitJob is POST /ui/jobs/{id}/resubmit, with the session's CSRF
// token: the owner or an admin submits a new job of exactly the failed
// targets of an ended job, with their options, through the runner's
// normal Submit (caps and idempotency apply; a refusal is shown). The new
// job is the owner's: submitted by the owner, it runs as the owner signed
// in (name and class); by an admin, it runs under the owner's name with
// the standard class (the owner's key is never stored), and the log names
// the admin. It redirects to the new job's page (or to the job Submit
// reused). In a cluster, a job of another node is read from that node, and
// the new job is this node's (any node takes a job).
func (h *Handler) resubmitJob(w http.ResponseWriter, r *http.Request, ss *session) {
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
	}
	j, ts := jr.job, jr.targets
	back := Prefix + "jobs/" + j.ID
	if jr.node == "" {
		if _, ts, ok = h.r.Targets(j.ID); !ok {
			h.jobNotFound(w, r)
			return
		}
	} else if len(ts) < j.TargetsTotal {
		h.page(w, r, http.StatusConflict, "error", errorPage{Title: "Not resubmitted", Msg: "This job, on node " + jr.node +
			", has too many targets to be read from this node whole: resubmit its failed targets from node " + jr.node + "'s dashboard.", Back: back})
		return
	}
	var failed []engine.Target
	for _, t := range ts {
		if t.Status == engine.TargetFailed {
			failed = append(failed, engine.Target{URL: t.URL, Options: t.Options})
		}
	}
	if engine.IsLive(j.Status) || len(failed) == 0 {
		h.page(w, r, http.StatusConflict, "error", errorPage{Title: "Nothing to resubmit", Msg: "Only a job that has ended with failed targets can have them resubmitted.", Back: back})
		return
	}
	caller, class := engine.Caller{Name: j.Caller}, httpapi.ClassStandard
	if j.Caller == ss.name {
		caller, class = ss.caller, ss.class
	}
	id, reused, err := h.r.Submit(context.WithoutCancel(r.Context()), &caller, class, failed)
	if err != nil {
		code, msg := resubmitRefusal(err)
		h.log.Info("dashboard resubmit refused", slog.String(logKeyCaller, ss.name), slog.Bool(logKeyAdmin, ss.admin),
			slog.String(logKeyJobID, j.ID), slog.Int(logKeyTargets, len(failed)), slog.String(logKeyReason, msg))
		h.page(w, r, code, "error", errorPage{Title: "Not resubmitted", Msg: msg, Back: back})
		return
	}
	h.log.Info("failed targets resubmitted from the dashboard", slog.String(logKeyCaller, ss.name), slog.Bool(logKeyAdmin, ss.admin),
		slog.String(logKeyOwner, j.Caller), slog.String(logKeyJobID, j.ID), slog.String(logKeyNewJobID, id), slog.Int(logKeyTargets, len(failed)), slog.Bool(logKeyReused, reused))
	q := url.Values{"from": {j.ID}}
	if reused {
		q.Set("reused", "1")
	}
	http.Redirect(w, r, Prefix+"jobs/"+id+"?"+q.Encode(), http.StatusSeeOther)
}

// resubmitRefusal is the answer to a Submit that refused a resubmit: its
// status code and what the page says.
func resubmitRefusal(err error) (int, string) {
	switch {
	case errors.Is(err, engine.ErrCallerBusy):
		return http.StatusTooManyRequests, "The job's owner has as many live jobs as it may: wait for one to end, then try again."
	case errors.Is(err, engine.ErrBusy):
		return http.StatusTooManyRequests, "The runner has as many live jobs as it may: wait for one to end, then try again."
	case errors.Is(err, engine.ErrNotSynced):
		return http.StatusServiceUnavailable, "The server's disk failed to sync the job: nothing was created. Try again in a moment."
	case errors.Is(err, engine.ErrDiskFull):
		return http.StatusInsufficientStorage, "The server's disk is below its reserve: no new job is taken until there is room. Running jobs are held and go on by themselves."
	case errors.Is(err, engine.ErrTooManyTargets):
		return http.StatusBadRequest, "Too many targets for one job."
	case errors.Is(err, engine.ErrRetryLater), errors.Is(err, engine.ErrNoAdmission):
		return http.StatusServiceUnavailable, "The runner cannot take a job right now: try again in a moment."
	case errors.Is(err, engine.ErrInvalid), errors.Is(err, engine.ErrNoTargets):
		return http.StatusBadRequest, "These targets cannot be submitted again."
	case errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrFailed):
		return http.StatusServiceUnavailable, "The runner is stopping: nothing can be submitted."
	}
	return http.StatusServiceUnavailable, "The job could not be submitted: try again later."
}
