package engine

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/sift/batch/persistence"
)

// The bounds of [ListOptions.Limit].
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// ListScan is the most stored jobs one page of [Runner.List] or
// [Runner.ListAll] looks at: a page whose status filter few jobs match
// stops there, with fewer jobs than its limit (maybe none) and a next
// cursor that goes on after the last job it looked at. So a page costs the
// same whatever the number of jobs stored.
const ListScan = persistence.ListScan

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
// cursor of the next page ("" on the last page). A page looks at most at
// [ListScan] of caller's jobs: with a status few of them have, it may hold
// fewer than opt.Limit jobs, or none, and still have a next cursor, which
// goes on after the last job looked at; page on until the cursor is "".
// Expired jobs never appear, swept or not; a live job reads as its actor
// holds it. A cursor is opaque and lists only caller's jobs, whoever's
// page it came from. A bad status, limit or cursor is an error wrapping
// [ErrBadList]. It never writes; safe for concurrent use. It reads the
// caller's index: each page costs a seek and a point read per job looked
// at, at most ListScan, whatever the number of jobs stored.
func (r *Runner) List(caller string, opt ListOptions) ([]Job, string, error) {
	jobs, _, next, err := r.list(r.callerJobs(caller), opt, false)
	return jobs, next, err
}

// ListAll is [Runner.List] over every caller's jobs: newest first (by
// creation time, then id), filtered by opt.Status, a page of at most
// opt.Limit, and the cursor of the next page ("" on the last page), with
// the same rules for a bad status, limit or cursor (an error wrapping
// [ErrBadList]). It is for an administrator: it does not check who asks.
// Expired jobs never appear. It reads an index of every job, newest
// first: each page costs a seek and a point read per job looked at, at
// most [ListScan], whatever the number of jobs stored; so a page may hold
// fewer than opt.Limit jobs, or none, with a next cursor, as for List. Its cursors and List's mark a
// position in the same order: one taken from either pages on in the
// other. It never writes; safe for concurrent use.
func (r *Runner) ListAll(opt ListOptions) ([]Job, string, error) {
	jobs, _, next, err := r.list(r.store.AllJobs, opt, false)
	return jobs, next, err
}

// ListAllAt is [Runner.ListAll] that also returns, for each job, the
// cursor of the page that goes on after it, as [Peer.ListAt] does for a
// caller's jobs: so a cluster merges every node's pages across callers.
// Safe for concurrent use.
func (p Peer) ListAllAt(opt ListOptions) (jobs []Job, cursors []string, next string, err error) {
	if p.r == nil {
		return nil, nil, "", noRunner("list jobs")
	}
	return p.r.list(p.r.store.AllJobs, opt, true)
}

// callerJobs is caller's index, as list reads an index.
func (r *Runner) callerJobs(caller string) indexReader {
	return func(after []byte, limit int, keep func(*persistence.JobRecord) bool) ([]persistence.JobRecord, []byte, error) {
		return r.store.CallerJobs(caller, after, limit, keep)
	}
}

// indexReader reads a page of a newest-first index of the store
// ([persistence.Store.CallerJobs], [persistence.Store.AllJobs]).
type indexReader func(after []byte, limit int, keep func(*persistence.JobRecord) bool) ([]persistence.JobRecord, []byte, error)

// ListAt is [Runner.List] that also returns, for each job, the cursor of
// the page that goes on after it. Cursors compare ([CompareCursors]) in the
// order List gives, whichever runner they come from: so the pages of
// several runners merge into one (package github.com/sift/batch/engine/cluster
// lists a caller's jobs across nodes with it: a merged page ends at the
// newest of the nodes' next cursors, or its last job, and that cursor is
// good on every node). Safe for concurrent
// use.
func (p Peer) ListAt(caller string, opt ListOptions) (jobs []Job, cursors []string, next string, err error) {
	if p.r == nil {
		return nil, nil, "", noRunner("list jobs")
	}
	return p.r.list(p.r.callerJobs(caller), opt, true)
}

func (r *Runner) list(index indexReader, opt ListOptions, withCursors bool) ([]Job, []string, string, error) {
	match, ok := statusFilters[opt.Status]
	if !ok {
		return nil, nil, "", fmt.Errorf("%w: status %q is none of live, queued, running, done, partial, failed, cancelled, terminal", ErrBadList, opt.Status)
	}
	limit := opt.Limit
	switch {
	case limit < 0 || limit > MaxListLimit:
		return nil, nil, "", fmt.Errorf("%w: limit must be from 1 to %d", ErrBadList, MaxListLimit)
	case limit == 0:
		limit = DefaultListLimit
	}
	var after []byte
	if opt.Cursor != "" {
		var err error
		if after, err = base64.RawURLEncoding.DecodeString(opt.Cursor); err != nil || len(after) == 0 {
			return nil, nil, "", fmt.Errorf("%w: cursor is not one List gave", ErrBadList)
		}
	}
	recs, next, err := index(after, limit, func(rec *persistence.JobRecord) bool {
		j, ok := r.readable(rec)
		return ok && match(j.Status)
	})
	switch {
	case errors.Is(err, persistence.ErrBadCursor):
		return nil, nil, "", fmt.Errorf("%w: cursor is not one List gave", ErrBadList)
	case err != nil:
		return nil, nil, "", fmt.Errorf("list jobs: %w", err)
	}
	jobs := make([]Job, 0, len(recs))
	var cursors []string
	for i := range recs {
		if j, ok := r.readable(&recs[i]); ok && match(j.Status) {
			jobs = append(jobs, toJob(&j))
			if withCursors {
				c, err := persistence.CallerCursor(recs[i].Created, recs[i].ID)
				if err != nil {
					return nil, nil, "", fmt.Errorf("list jobs: %w", err)
				}
				cursors = append(cursors, base64.RawURLEncoding.EncodeToString(c))
			}
		}
	}
	cursor := ""
	if next != nil {
		cursor = base64.RawURLEncoding.EncodeToString(next)
	}
	return jobs, cursors, cursor, nil
}

// CompareCursors compares two cursors of [Peer.ListAt] by the jobs they
// go on after: negative if a's job comes first in a List (is newer),
// positive if b's does, 0 if they are the same. A cursor List did not give
// sorts after every good one.
func CompareCursors(a, b string) int {
	ab, aok := decodeCursor(a)
	bb, bok := decodeCursor(b)
	switch {
	case !aok && !bok:
		return strings.Compare(a, b)
	case !aok:
		return 1
	case !bok:
		return -1
	}
	return bytes.Compare(ab, bb)
}

// decodeCursor decodes a cursor of List; false if it is not one (not
// base64, or not the length of one: "" and "AAAA" are no cursors).
func decodeCursor(c string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	return b, err == nil && len(b) == persistence.CallerCursorLen
}

// readable lays a job's snapshot over its stored row, as Job reads it;
// false for an expired job.
func (r *Runner) readable(rec *persistence.JobRecord) (persistence.JobRecord, bool) {
	if v := r.views.Get(rec.ID); v != nil {
		s := v.Load()
		return s.Job, !r.snapExpired(v, s, rec.Lease)
	}
	j := *rec
	r.asReaped(&j)
	return j, !r.expired(rec)
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
