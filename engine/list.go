package engine

import (
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/sift/batch/persistence"
)

// The bounds of [ListOptions.Limit].
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// ListOptions filter and page [Runner.List]. The zero value lists every
// job of the caller, DefaultListLimit at a time.
type ListOptions struct {
	// Status keeps the jobs with that status: queued, running, done,
	// partial, failed or cancelled; or live (queued or running) or
	// terminal (the others). "" keeps all.
	Status string
	// Limit is the most jobs a page holds: 0 means DefaultListLimit; at
	// most MaxListLimit.
	Limit int
	// Cursor is the next cursor of the page before; "" for the first page.
	Cursor string
}

// ErrBadList is returned by [Runner.List], wrapped with the reason, for a
// status, limit or cursor it does not take.
var ErrBadList = errors.New("bad list request")

// List returns caller's jobs, newest first (by creation time, then id), as
// summaries, filtered by opt.Status, a page of at most opt.Limit, and the
// cursor of the next page ("" on the last page). Expired jobs never appear,
// swept or not; a live job reads as its actor holds it. A cursor is opaque
// and lists only caller's jobs, whoever's page it came from. A bad status,
// limit or cursor is an error wrapping [ErrBadList]. It never writes; safe
// for concurrent use. It reads the caller's index: each page costs a seek
// and a point read per job looked at.
func (r *Runner) List(caller string, opt ListOptions) ([]Job, string, error) {
	match, ok := statusFilters[opt.Status]
	if !ok {
		return nil, "", fmt.Errorf("%w: status %q is none of live, queued, running, done, partial, failed, cancelled, terminal", ErrBadList, opt.Status)
	}
	limit := opt.Limit
	switch {
	case limit < 0 || limit > MaxListLimit:
		return nil, "", fmt.Errorf("%w: limit must be from 1 to %d", ErrBadList, MaxListLimit)
	case limit == 0:
		limit = DefaultListLimit
	}
	var after []byte
	if opt.Cursor != "" {
		var err error
		if after, err = base64.RawURLEncoding.DecodeString(opt.Cursor); err != nil || len(after) == 0 {
			return nil, "", fmt.Errorf("%w: cursor is not one List gave", ErrBadList)
		}
	}
	recs, next, err := r.store.CallerJobs(caller, after, limit, func(rec *persistence.JobRecord) bool {
		j, ok := r.readable(rec)
		return ok && match(j.Status)
	})
	switch {
	case errors.Is(err, persistence.ErrBadCursor):
		return nil, "", fmt.Errorf("%w: cursor is not one List gave", ErrBadList)
	case err != nil:
		return nil, "", fmt.Errorf("list jobs: %w", err)
	}
	jobs := make([]Job, 0, len(recs))
	for i := range recs {
		if j, ok := r.readable(&recs[i]); ok && match(j.Status) {
			jobs = append(jobs, toJob(&j))
		}
	}
	cursor := ""
	if next != nil {
		cursor = base64.RawURLEncoding.EncodeToString(next)
	}
	return jobs, cursor, nil
}

// readable lays a job's snapshot over its stored row, as Job reads it;
// false for an expired job.
func (r *Runner) readable(rec *persistence.JobRecord) (persistence.JobRecord, bool) {
	if v := r.views.Get(rec.ID); v != nil {
		s := v.Load()
		return s.Job, !r.snapExpired(v, s, rec.Lease)
	}
	return *rec, !r.expired(rec)
}

var statusFilters = map[string]func(string) bool{
	"":                          func(string) bool { return true },
	"live":                      IsLive,
	"terminal":                  func(s string) bool { return !IsLive(s) },
	persistence.StatusQueued:    is(persistence.StatusQueued),
	persistence.StatusRunning:   is(persistence.StatusRunning),
	persistence.StatusDone:      is(persistence.StatusDone),
	persistence.StatusPartial:   is(persistence.StatusPartial),
	persistence.StatusFailed:    is(persistence.StatusFailed),
	persistence.StatusCancelled: is(persistence.StatusCancelled),
}

func is(want string) func(string) bool { return func(s string) bool { return s == want } }
