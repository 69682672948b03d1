package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/persistence"
)

// Reads never send a message and never wait for the work: a job actor
// publishes a snapshot of its job after every change (actors.Views), and
// the rest comes from what the store has committed, through Badger's
// concurrent read transactions. What a reader sees is the committed
// outcomes plus the runner's in-memory knowledge: a target being fetched
// or stored reads running; an outcome whose write failed and waits for a
// retry reads as the job's actor holds it.

// Job returns a job's summary; false for an unknown id and for a job past
// its lease + [Config.TTL]. It costs one store point read whatever the id
// (unknown, live, finished), and never writes. Safe for concurrent use.
func (r *Runner) Job(id string) (Job, bool) {
	rec, _, ok := r.row(id)
	if !ok {
		return Job{}, false
	}
	return toJob(&rec), true
}

// Lookup returns a job's summary as [Runner.Job] does, or why it cannot:
// an error wrapping [ErrNotFound] for an unknown or expired id, and one
// wrapping [ErrUnavailable] (with [ErrDiskFull] on a full disk) while the
// store cannot read (down after a failed sync): a job the store cannot
// read now is never answered as gone. It costs what [Runner.Job] does.
// Safe for concurrent use.
func (r *Runner) Lookup(id string) (Job, error) {
	rec, _, err := r.rowErr(id)
	if err != nil {
		return Job{}, err
	}
	return toJob(&rec), nil
}

// row reads a job's row, with what its actor has published over it.
func (r *Runner) row(id string) (persistence.JobRecord, *actors.Snapshot, bool) {
	rec, snap, err := r.rowErr(id)
	return rec, snap, err == nil
}

// rowErr is row with the reason of a miss: ErrNotFound, or a store that
// cannot read (unavailable).
func (r *Runner) rowErr(id string) (persistence.JobRecord, *actors.Snapshot, error) {
	rec, err := r.store.Row(id)
	if err != nil {
		r.readFailed("read job", id, err)
		err = unavailable(err)
		if v := r.views.Get(id); v != nil && errors.Is(err, ErrUnavailable) {
			// A live job's actor holds it: serve what it published.
			if s := v.Load(); !r.snapExpired(v, s) {
				return s.Job, s, nil
			}
		}
		return rec, nil, err
	}
	if v := r.views.Get(id); v != nil {
		s := v.Load()
		if r.snapExpired(v, s, rec.Lease) {
			return rec, nil, ErrNotFound
		}
		return s.Job, s, nil
	}
	if !rec.Settled {
		// No actor owns it: its last write failed before the runner
		// stopped. Its progress is in its outcome rows.
		if rec, err = r.store.Job(id); err != nil {
			r.readFailed("read job", id, err)
			return rec, nil, unavailable(err)
		}
	}
	if r.expired(&rec) {
		return rec, nil, ErrNotFound
	}
	r.asReaped(&rec)
	return rec, nil, nil
}

// unavailable is the runner's answer to a failed store read: ErrUnavailable
// (naming a full disk) when the store could not read, ErrNotFound otherwise.
func unavailable(err error) error {
	switch {
	case errors.Is(err, persistence.ErrUnavailable) && errors.Is(err, persistence.ErrDiskFull):
		return fmt.Errorf("read job: %w: %w", ErrUnavailable, ErrDiskFull)
	case errors.Is(err, persistence.ErrUnavailable):
		return fmt.Errorf("read job: %w: disk error", ErrUnavailable)
	}
	return ErrNotFound
}

// expired reports a settled job past its lease + TTL: gone, swept or not.
func (r *Runner) expired(rec *persistence.JobRecord) bool {
	return rec.Settled && rec.Expired(r.cfg.TTL, r.cfg.Now().UnixNano())
}

// snapExpired reports a job that has ended, as its actor holds it, past
// its lease + TTL: an actor may outlive its job's expiry for a moment.
func (r *Runner) snapExpired(v *actors.View, s *actors.Snapshot, stored ...int64) bool {
	lease := max(s.Job.Lease, v.Touched())
	for _, l := range stored { // a Touch that went to the store as the actor stopped
		lease = max(lease, l)
	}
	return !IsLive(s.Job.Status) && persistence.Expired(lease, r.cfg.TTL, r.cfg.Now().UnixNano())
}

// readFailed logs a read that failed for a reason other than a missing job
// (see quiet).
func (r *Runner) readFailed(what, id string, err error) {
	if !r.quiet(err) {
		r.log.Warn(what, slog.String(keyJobID, id), slog.String(keyErr, storeErrText(err)))
	}
}

// quiet reports a store error that is no failure to log: a missing job, or
// a store closed after the runner (a runner made by Open closes its own;
// reads after Close are normal use, such as a dashboard still polling).
// A store closed under a running runner is logged.
func (r *Runner) quiet(err error) bool {
	return errors.Is(err, persistence.ErrNotFound) || errors.Is(err, persistence.ErrClosed) && r.isClosed()
}

// Targets returns a job's summary and every target's status, error and
// hint, from one consistent view; no result is read (Result is nil). False
// as for [Runner.Job]. It never writes. Safe for concurrent use.
func (r *Runner) Targets(id string) (Job, []TargetStatus, bool) {
	if v := r.views.Get(id); v != nil {
		if m, ok := v.Derived(v.Load()).(*targetsRead); ok {
			return m.job, slices.Clone(m.targets), true
		}
	}
	return r.read(id, r.store.TargetStatuses, false)
}

// targetsRead is what [Runner.Targets] read of a live job under one of
// its snapshots, kept with the snapshot (actors.View.SetDerived) for the
// next readers of the same snapshot: a job polled by many clients is read
// from the store once per change, not once per poll. It is what they
// would read: while a snapshot is the latest, the job's actor writes only
// the outcome of the target it says is running (which reads running
// whatever the store has) or of those it holds unsaved (which read as it
// holds them); every other outcome row of the job stays as it is, and a
// live job is never deleted. Immutable.
type targetsRead struct {
	job     Job
	targets []TargetStatus
}

// Status returns a job and its targets, with each stored result decoded; a
// target being fetched reads running. It returns false for an unknown id and
// for a job past its lease + [Config.TTL]. Status never writes. It reads
// every result: a poll that needs none should call [Runner.Targets] or
// [Runner.Job]. Safe for concurrent use.
func (r *Runner) Status(id string) (Job, []TargetStatus, bool) {
	return r.read(id, r.store.JobWithTargets, true)
}

// read reads a job and its targets with get, and lays its actor's
// snapshot over them. The snapshot is loaded first: the store then holds
// at least what it says, and the overlay makes the two agree (a target it
// says is running may already be committed: it reads running).
func (r *Runner) read(id string, get func(string) (persistence.JobRecord, []persistence.TargetRecord, error), results bool) (Job, []TargetStatus, bool) {
	var snap *actors.Snapshot
	v := r.views.Get(id)
	if v != nil {
		snap = v.Load()
	}
	rec, ts, err := get(id)
	if err != nil {
		r.readFailed("read targets", id, err)
		return Job{}, nil, false
	}
	if snap != nil && r.snapExpired(v, snap, rec.Lease) {
		return Job{}, nil, false
	}
	if snap == nil {
		if r.expired(&rec) {
			return Job{}, nil, false
		}
		r.asReaped(&rec)
		return toJob(&rec), toTargets(&rec, ts, results), true
	}
	overlay(&rec, ts, snap)
	job, targets := toJob(&rec), toTargets(&rec, ts, results)
	if !results && IsLive(snap.Job.Status) {
		v.SetDerived(snap, &targetsRead{job: job, targets: slices.Clone(targets)})
	}
	return job, targets, true
}

// overlay lays a job actor's snapshot over what the store has: its status,
// error and times, its running target, its unsaved outcomes; and counts the
// progress from the result.
func overlay(rec *persistence.JobRecord, ts []persistence.TargetRecord, s *actors.Snapshot) {
	rec.Status, rec.Error, rec.Started, rec.Ended = s.Job.Status, s.Job.Error, s.Job.Started, s.Job.Ended
	for _, u := range s.Unsaved {
		if u.Idx >= 0 && u.Idx < len(ts) {
			u.URL, u.Options = ts[u.Idx].URL, ts[u.Idx].Options
			ts[u.Idx] = u
		}
	}
	if i := s.Running; i >= 0 && i < len(ts) {
		t := &ts[i]
		*t = persistence.TargetRecord{Idx: t.Idx, URL: t.URL, Options: t.Options, Status: persistence.TargetRunning}
	}
	rec.Recount(ts)
}

func toJob(j *persistence.JobRecord) Job {
	return Job{
		ID:            j.ID,
		Caller:        j.Caller,
		Status:        j.Status,
		Error:         j.Error,
		TargetsTotal:  j.TargetsTotal,
		TargetsDone:   j.TargetsDone,
		TargetsFailed: j.TargetsFailed,
		CreatedAt:     j.Created / 1e9,
		StartedAt:     j.Started / 1e9,
		EndedAt:       j.Ended / 1e9,
		Duration:      jobDuration(j),
	}
}

// jobDuration is j's Ended − Started, or 0 when either is unknown.
func jobDuration(j *persistence.JobRecord) time.Duration {
	if j.Started <= 0 || j.Ended < j.Started {
		return 0
	}
	return time.Duration(j.Ended - j.Started)
}

// toTargets is job j's targets ts as a read answers them: a pending
// target of an ended job reads the hint [NotRunHint] gives it (why it will
// not run).
func toTargets(j *persistence.JobRecord, ts []persistence.TargetRecord, results bool) []TargetStatus {
	out := make([]TargetStatus, len(ts))
	for i := range ts {
		t := &ts[i]
		out[i] = TargetStatus{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: cmp.Or(t.Hint, NotRunHint(j.Status, j.Error, t.Status)),
			Options: decodeOptions(t.Options), Duration: t.Took, StoredAt: t.Stored / 1e9}
		if results && t.Status == persistence.TargetDone && t.Result != nil {
			out[i].Result = decodeResult(t.Result)
		}
	}
	return out
}

// decodeOptions decodes a target's stored options; none ("{}", the
// common case, costs no decoding) and options that do not decode read as
// the zero Options.
func decodeOptions(b []byte) Options {
	var o Options
	if len(b) == 0 || string(b) == "{}" {
		return o
	}
	if json.Unmarshal(b, &o) != nil {
		return Options{}
	}
	return o
}

func decodeResult(b []byte) *Result {
	var res Result
	if json.Unmarshal(b, &res) != nil {
		return nil
	}
	return &res
}

// Result returns target idx's result, decoded; false unless the job is
// readable (as for [Runner.Job]) and that target is stored done. It reads
// that one result. Safe for concurrent use.
func (r *Runner) Result(id string, idx int) (*Result, bool) {
	b, ok := r.ResultJSON(id, idx)
	if !ok {
		return nil, false
	}
	res := decodeResult(b)
	return res, res != nil
}

// ResultJSON returns target idx's result as its stored JSON bytes, to be
// written out as they are; false as for [Runner.Result]. The bytes are the
// caller's. A result is immutable once stored. Safe for concurrent use.
func (r *Runner) ResultJSON(id string, idx int) ([]byte, bool) {
	if idx < 0 {
		return nil, false
	}
	rec, snap, ok := r.row(id)
	if !ok || idx >= rec.TargetsTotal {
		return nil, false
	}
	if snap != nil {
		if idx == snap.Running {
			return nil, false
		}
		for _, u := range snap.Unsaved {
			if u.Idx == idx {
				if u.Status != persistence.TargetDone {
					return nil, false
				}
				return append([]byte(nil), u.Result...), true
			}
		}
	}
	b, err := r.store.ResultJSON(id, idx)
	if err != nil {
		r.readFailed("read result", id, err)
		return nil, false
	}
	return b, true
}

// ResultRange returns bytes [off, off+n) of target idx's result as its
// stored JSON (fewer at its end, none past it: n is clamped to what is
// left, any n up to MaxInt64 is safe), and the stored JSON's whole
// length; false as for [Runner.ResultJSON], and for a negative off or n.
// It reads the target's outcome and only the stored chunks (512 KiB each)
// the range covers, so a page of a large result costs about the page, and
// n 0 costs no result read at all: the length alone. The stored JSON is
// [Result]'s, as [Runner.ResultJSON] returns it: it begins
// {"content":" and the content's text follows, JSON-escaped. The bytes
// are the caller's. Safe for concurrent use.
func (r *Runner) ResultRange(id string, idx int, off, n int64) ([]byte, int64, bool) {
	if idx < 0 || off < 0 || n < 0 {
		return nil, 0, false
	}
	rec, snap, ok := r.row(id)
	if !ok || idx >= rec.TargetsTotal {
		return nil, 0, false
	}
	if snap != nil {
		if idx == snap.Running {
			return nil, 0, false
		}
		for _, u := range snap.Unsaved {
			if u.Idx == idx {
				if u.Status != persistence.TargetDone {
					return nil, 0, false
				}
				size := int64(len(u.Result))
				if n == 0 || off >= size {
					return []byte{}, size, true
				}
				return append([]byte(nil), u.Result[off:off+min(n, size-off)]...), size, true
			}
		}
	}
	b, size, err := r.store.ResultRange(id, idx, off, n)
	if err != nil {
		r.readFailed("read result", id, err)
		return nil, 0, false
	}
	return b, size, true
}

// touchCoalesce is the granularity of a settled job's stored lease: Touch
// writes it rounded up to the next whole second, so that many Touches of
// one job within a second write once, and the stored lease is never
// earlier than the latest Touch (a polled job never expires early).
const touchCoalesce = time.Second

// Touch moves a job's lease to now, so that it stays readable for another
// [Config.TTL]. A live job's lease is held by its actor and written with
// the job's next write: no store write. A finished job's stored lease is
// rewritten at most once per second (to now rounded up to the second; with
// a TTL under 2 s, to now on every call). An unknown or expired id is
// ignored. Safe for concurrent use.
func (r *Runner) Touch(id string) {
	now := r.cfg.Now().UnixNano()
	if v := r.views.Get(id); v != nil {
		s := v.Load()
		if IsLive(s.Job.Status) && v.Touch(now) {
			// A live job is never swept nor evicted, so its row is there
			// (no need to read it), and its actor writes the lease.
			return
		}
		if rec, err := r.store.Row(id); err != nil || r.snapExpired(v, s, rec.Lease) {
			return // gone: a Touch does not bring it back
		}
		// An ended job's actor may still write its row (it has the Touch
		// too), or have settled it already, and the sweep reads only the
		// store: the store gets the Touch too.
		v.Touch(now)
	}
	rec, err := r.store.Row(id)
	if err != nil || r.expired(&rec) {
		return
	}
	lease := now
	if r.cfg.TTL >= 2*touchCoalesce {
		if rem := now % int64(touchCoalesce); rem != 0 {
			lease += int64(touchCoalesce) - rem
		}
		if rec.Lease >= lease {
			return
		}
	}
	if _, err := r.store.TouchUnexpired(id, lease, now-int64(r.cfg.TTL)); err != nil && !r.quiet(err) {
		r.log.Warn("touch", slog.String(keyJobID, id), slog.String(keyErr, storeErrText(err)))
	}
}

// Wait blocks until the job id is terminal and returns it, within
// milliseconds of its terminal write; it does not poll. It returns
// [ErrNotFound] for an unknown or expired id, [ErrClosed] with the job as
// it was left once the runner is stopping or has stopped (Close, or a
// failure: even for a job that had ended before, and for an id it cannot
// find then; a Wait begun after the Close of a runner made by [Open] has
// closed its store gets a zero Job), and
// ctx.Err() with the job as it stands when ctx is done. Safe for concurrent
// use.
func (r *Runner) Wait(ctx context.Context, id string) (Job, error) {
	if r.ownsStore {
		r.waitFor(id)
		defer r.waitEnd(id)
	}
	for {
		j, err := r.Lookup(id)
		ok := err == nil
		switch {
		case r.isClosed():
			// The runner is stopping or stopped (asked before !ok: a
			// runner made by Open closes its store, and then finds no
			// job): answer once it has left the job as it stays (a job
			// the close ended, "shutdown", too).
			select {
			case <-r.done:
			case <-ctx.Done():
				return j, ctx.Err()
			}
			return r.lastJob(id), ErrClosed
		case !ok:
			return Job{}, err
		case !IsLive(j.Status):
			return j, nil
		}
		v := r.views.Get(id)
		if v == nil {
			runtime.Gosched() // its actor has just stopped: its row is written
			continue
		}
		select {
		case <-v.Ended():
		case <-r.done:
		case <-ctx.Done():
			j, _ = r.Job(id)
			return j, ctx.Err()
		}
	}
}

// waitFor registers a Wait for job id on a runner that owns its store;
// waitEnd unregisters it.
func (r *Runner) waitFor(id string) {
	r.waitMu.Lock()
	defer r.waitMu.Unlock()
	if r.waits == nil {
		r.waits = make(map[string]*waited)
	}
	w := r.waits[id]
	if w == nil {
		w = &waited{}
		r.waits[id] = w
	}
	w.n++
}

func (r *Runner) waitEnd(id string) {
	r.waitMu.Lock()
	defer r.waitMu.Unlock()
	if w := r.waits[id]; w != nil {
		if w.n--; w.n == 0 {
			delete(r.waits, id)
		}
	}
}

// lastJob returns job id as the stopped runner left it (zero if it finds
// none): read from the store, or, once Shutdown has closed a store the
// runner owns, as Shutdown read it just before (for a Wait registered
// then; see waitFor).
func (r *Runner) lastJob(id string) Job {
	if !r.ownsStore {
		j, _ := r.Job(id)
		return j
	}
	r.waitMu.Lock() // Shutdown closes the store only once it holds it
	defer r.waitMu.Unlock()
	if !r.storeGone {
		j, _ := r.Job(id)
		return j
	}
	if w := r.waits[id]; w != nil {
		return w.job
	}
	return Job{}
}

func (r *Runner) isClosed() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.closed
}
