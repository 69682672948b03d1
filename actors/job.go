package actors

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/persistence"
)

// job is the actor of one live job. It owns the job's rows: it persists every
// change (running, each target, the terminal status, a cancel) and answers
// Cancel and Status. Targets go strictly in order, one at a time: the next
// target is always rec.TargetsDone.
type job struct {
	cfg        *Config
	supervisor *actor.PID
	rec        persistence.JobRecord
	payload    any
	inflight   int   // idx of the target being fetched, -1 for none
	busySince  int64 // unix nanos of the next target's first busy answer, 0 for none
	// What a failed write left unwritten: target outcomes, and whether the
	// stored row is behind rec. The next write writes them first; a job
	// that has ended keeps its actor, and retries every RetryWait, until
	// they are written (see flush).
	unsaved []persistence.TargetRecord
	dirty   bool
	flushes *time.Timer
}

func newJob(cfg *Config, supervisor *actor.PID, rec persistence.JobRecord, payload any) actor.Producer {
	return func() actor.Actor {
		return &job{cfg: cfg, supervisor: supervisor, rec: rec, payload: payload, inflight: -1}
	}
}

// Receive implements actor.Actor.
func (j *job) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *dispatch:
		j.dispatch(ctx, m)
	case *fetched:
		j.fetched(ctx, m)
	case *CancelJob:
		ctx.Respond(j.cancel(ctx))
	case *StatusJob:
		ctx.Respond(j.status())
	case *TouchJob:
		if m.Lease > j.rec.Lease {
			j.rec.Lease = m.Lease
			j.save("touch")
		}
		ctx.Respond(true)
	case *shutdownJob:
		j.shutdown()
		ctx.Respond(true)
	case *flushTick:
		j.flushes = nil
		if !j.flush("retry") {
			j.retryFlush(ctx)
		} else if j.terminal() && j.rec.Settled {
			ctx.Send(j.supervisor, &jobEnded{id: j.rec.ID, settled: true})
		}
	case *actor.Stopping:
		if j.flushes != nil {
			j.flushes.Stop()
		}
	}
}

func (j *job) terminal() bool { return !persistence.IsLive(j.rec.Status) }

func (j *job) now() int64 { return j.cfg.Now().UnixNano() }

func (j *job) save(what string) {
	if len(j.unsaved) > 0 {
		j.flush(what) // each outcome is written with the row
		return
	}
	if err := j.cfg.Store.SaveJob(&j.rec); err != nil {
		j.dirty = true
		j.cfg.Log.Warn("store job", slog.String(keyJobID, j.rec.ID), slog.String(keyStatus, j.rec.Status),
			slog.String("what", what), slog.String(keyErr, storeErrText(err)))
		return
	}
	j.dirty = false
}

// flush writes what failed writes left unwritten: the outcomes in order,
// each with the row, then the row. It reports whether all is written.
func (j *job) flush(what string) bool {
	for len(j.unsaved) > 0 {
		t := &j.unsaved[0]
		if err := j.writeTarget(t); err != nil {
			j.cfg.Log.Warn("store target", slog.String(keyJobID, j.rec.ID), slog.Int(keyIdx, t.Idx),
				slog.String("what", what), slog.String(keyErr, storeErrText(err)))
			return false
		}
		j.unsaved = j.unsaved[1:]
		j.dirty = false
	}
	if j.dirty {
		j.save(what)
	}
	return !j.dirty
}

// retryFlush has flush tried again after RetryWait (a job that has ended
// has no other event to write on).
func (j *job) retryFlush(ctx actor.Context) {
	if j.flushes != nil {
		return
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	j.flushes = time.AfterFunc(j.cfg.RetryWait, func() { root.Send(self, &flushTick{}) })
}

// endState is the state of a job that has ended with nothing in flight:
// settled, or unsaved until flush has written it.
func (j *job) endState(ctx actor.Context) jobState {
	if j.dirty || len(j.unsaved) > 0 {
		j.retryFlush(ctx)
		return jobUnsaved
	}
	return jobSettled
}

// storeErrText is a store error for a log line: the store's own sentinels by
// name, anything else as "write failed" (Badger's texts may carry keys).
func storeErrText(err error) string {
	for _, e := range []error{persistence.ErrClosed, persistence.ErrTooLarge, persistence.ErrNotFound, persistence.ErrCorrupt} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "write failed"
}

func (j *job) dispatch(ctx actor.Context, m *dispatch) {
	if j.terminal() || j.inflight >= 0 || j.rec.TargetsDone >= j.rec.TargetsTotal {
		// Cancelled (or failed) before the supervisor heard: give the worker back.
		ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: j.settledState(ctx)})
		return
	}
	if j.rec.Status == persistence.StatusQueued {
		j.rec.Status = persistence.StatusRunning
		j.save("running")
	}
	j.inflight = j.rec.TargetsDone
	ctx.Send(m.worker, &fetch{job: ctx.Self(), jobID: j.rec.ID, idx: j.inflight, payload: j.payload})
}

// settledState settles a terminal job with nothing in flight, or says the
// job is ready.
func (j *job) settledState(ctx actor.Context) jobState {
	if !j.terminal() {
		return jobReady
	}
	if !j.rec.Settled && j.inflight < 0 {
		j.rec.Settled = true
		j.save("settle")
	}
	return j.endState(ctx)
}

func (j *job) fetched(ctx actor.Context, m *fetched) {
	if m.idx != j.inflight {
		// Not the target in flight (cannot happen): never store it twice,
		// but give the worker back.
		ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: j.settledState(ctx)})
		return
	}
	j.inflight = -1
	now := j.now()
	out := m.outcome
	if out.Busy {
		if j.busySince == 0 {
			j.busySince = now
		}
		if now-j.busySince <= int64(j.cfg.RetryFor) {
			state := jobWaiting
			if j.terminal() {
				state = j.settledState(ctx)
			}
			ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: state})
			return
		}
		out.Busy = false // busy for longer than RetryFor: store it failed
	}
	j.busySince = 0

	t := persistence.TargetRecord{Idx: m.idx, Status: persistence.TargetDone, Result: out.Result}
	if out.Err != nil {
		t = persistence.TargetRecord{Idx: m.idx, Status: persistence.TargetFailed, Error: out.Msg, Hint: out.Hint}
	}
	prevStatus := j.rec.Status
	j.rec.TargetsDone++
	if t.Status == persistence.TargetFailed {
		j.rec.TargetsFailed++
	}
	j.rec.ResultBytes += int64(len(t.Result))
	j.rec.Lease = now
	if !j.terminal() && j.rec.TargetsDone == j.rec.TargetsTotal {
		switch j.rec.TargetsFailed {
		case 0:
			j.rec.Status = persistence.StatusDone
		case j.rec.TargetsTotal:
			j.rec.Status = persistence.StatusFailed
		default:
			j.rec.Status = persistence.StatusPartial
		}
	}
	if j.terminal() {
		j.rec.Settled = true
	}
	j.storeTarget(&t)

	state := jobReady
	if j.terminal() {
		state = j.endState(ctx)
	}
	ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: state})

	if j.cfg.Hooks.Target != nil {
		j.cfg.Hooks.Target(out.Err, m.took, len(t.Result))
	}
	if persistence.IsLive(prevStatus) && j.terminal() {
		j.ended()
	}
	if n, err := j.cfg.Store.Evict(j.cfg.MaxBytes); err != nil {
		j.cfg.Log.Warn("evict", slog.String(keyJobID, j.rec.ID), slog.String(keyErr, storeErrText(err)))
	} else if n > 0 {
		j.cfg.Log.Debug("evicted jobs", slog.Int(keyCount, n))
	}
}

// storeTarget stores one target with the job's new row. A result too large
// to store is stored failed instead; any other store error is logged, the
// job goes on, and the outcome is written with the next write (see flush).
func (j *job) storeTarget(t *persistence.TargetRecord) {
	if len(j.unsaved) > 0 && !j.flush("target") {
		j.unsaved = append(j.unsaved, *t)
		return
	}
	if err := j.writeTarget(t); err != nil {
		j.cfg.Log.Warn("store target", slog.String(keyJobID, j.rec.ID), slog.Int(keyIdx, t.Idx),
			slog.String(keyErr, storeErrText(err)))
		j.unsaved = append(j.unsaved, *t)
		return
	}
	j.dirty = false
}

// writeTarget writes one outcome with the job's row. A result too large to
// store is stored failed instead, whether this is its first write or one
// after a failed write.
func (j *job) writeTarget(t *persistence.TargetRecord) error {
	err := j.cfg.Store.SaveTarget(&j.rec, t)
	if errors.Is(err, persistence.ErrTooLarge) && t.Status == persistence.TargetDone {
		j.rec.ResultBytes -= int64(len(t.Result))
		j.rec.TargetsFailed++
		if j.rec.Status == persistence.StatusDone {
			j.rec.Status = persistence.StatusPartial
			if j.rec.TargetsFailed == j.rec.TargetsTotal {
				j.rec.Status = persistence.StatusFailed
			}
		}
		*t = persistence.TargetRecord{Idx: t.Idx, Status: persistence.TargetFailed, Error: "result too large to store"}
		err = j.cfg.Store.SaveTarget(&j.rec, t)
	}
	return err
}

// ended reports a job that has just become terminal to the hooks.
func (j *job) ended() {
	j.cfg.Log.Debug("job ended", slog.String(keyJobID, j.rec.ID), slog.String(keyStatus, j.rec.Status),
		slog.Int("targets_done", j.rec.TargetsDone), slog.Int("targets_failed", j.rec.TargetsFailed))
	j.cfg.hookJob(j.rec.Status)
	if j.cfg.Hooks.JobSeconds != nil {
		j.cfg.Hooks.JobSeconds(time.Duration(j.now() - j.rec.Created))
	}
}

func (j *job) cancel(ctx actor.Context) bool {
	if j.terminal() {
		return false
	}
	j.rec.Status = persistence.StatusCancelled
	j.rec.Settled = j.inflight < 0
	j.save("cancelled")
	// The supervisor hears before the canceller does, so a Submit that
	// follows the Cancel sees the caps already freed.
	settled := j.rec.Settled && j.endState(ctx) == jobSettled
	ctx.Send(j.supervisor, &jobEnded{id: j.rec.ID, settled: settled})
	j.ended()
	return true
}

func (j *job) status() *StatusReply {
	// The actor's own row is the truth while it lives; the targets are read.
	ts, err := j.cfg.Store.Targets(j.rec.ID, j.rec.TargetsTotal)
	if err != nil {
		return &StatusReply{Live: true, Job: j.rec, Err: err}
	}
	if j.inflight >= 0 && j.inflight < len(ts) && ts[j.inflight].Status == persistence.TargetPending {
		ts[j.inflight].Status = persistence.TargetRunning
	}
	for _, t := range j.unsaved {
		if t.Idx < len(ts) {
			t.URL, t.Options = ts[t.Idx].URL, ts[t.Idx].Options
			ts[t.Idx] = t
		}
	}
	return &StatusReply{Live: true, Job: j.rec, Targets: ts}
}

// shutdown fails a live job with "shutdown"; the runner is closing and
// nothing of it is in flight any more.
func (j *job) shutdown() {
	if j.terminal() {
		if !j.rec.Settled || j.dirty || len(j.unsaved) > 0 {
			j.rec.Settled = true
			j.save("settle")
		}
		return
	}
	j.rec.Status = persistence.StatusFailed
	j.rec.Error = "shutdown"
	j.rec.Settled = true
	j.save("shutdown")
	j.ended()
}
