package actors

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/persistence"
)

// job is the actor of one live job. It owns the job's rows: it persists every
// change (running, each target, the terminal status, a cancel) and answers
// Cancel. Targets go strictly in order, one at a time: the next target is
// always rec.TargetsDone.
//
// Its life (life.go) is its status, in rec, and its phase: each changed
// only through to, take and setStatus, which check the change against the
// machines' tables. Idle and waiting imply a live status; unsaved and
// settled a terminal one; fetching and storing either (a job cancelled with
// a target in flight).
type job struct {
	cfg        *Config
	supervisor *actor.PID
	rec        persistence.JobRecord
	payload    any
	phase      phase
	cur        int   // fetching, storing: the idx of the target in flight
	busySince  int64 // unix nanos of the next target's first busy answer, 0 for none
	// What a failed write left unwritten: target outcomes, and whether the
	// stored row is behind rec. The next write writes them first; a job
	// that has ended waits in phaseUnsaved, retrying every RetryWait, until
	// they are written (see flush).
	unsaved []persistence.TargetRecord
	dirty   bool
	flushes *time.Timer // unsaved: the next retry
	// storing: the target whose write is at the store (the worker is
	// already free), and the messages that came meanwhile, handled in
	// order once it has committed (the job's writes stay one at a time and
	// in order).
	slot      storingTarget
	stash     []stashed
	onWritten func(error) // the store's callback: a targetWritten to self
	// view is where the job publishes a Snapshot after every change that
	// a reader can see (published is the last one), and where readers'
	// Touches wait for the job's next write.
	view      *View
	published Snapshot
	// stopFetch cancels the context of the target in flight (fetching):
	// with ErrCancelled when the job is cancelled, with nil once its
	// outcome is back.
	stopFetch context.CancelCauseFunc
}

// to moves the job to phase p, checked against phaseMachine (life.go).
func (j *job) to(p phase) {
	if p == j.phase {
		return
	}
	checkLife(j.rec.ID, j.life(), life{j.rec.Status, p}, false)
	if j.phase == phaseUnsaved && j.flushes != nil {
		j.flushes.Stop()
		j.flushes = nil
	}
	j.phase = p
}

// take makes next the job's row, its status change checked against
// statusMachine (life.go).
func (j *job) take(next *persistence.JobRecord) {
	checkLife(j.rec.ID, j.life(), life{next.Status, j.phase}, false)
	j.rec = *next
}

// setStatus moves the job to status st, checked against statusMachine.
func (j *job) setStatus(st string) {
	checkLife(j.rec.ID, j.life(), life{st, j.phase}, false)
	j.rec.Status = st
}

// life is how the job stands: what it reports to the supervisor.
func (j *job) life() life { return life{j.rec.Status, j.phase} }

// inFlight reports whether a target of the job is at a worker or the store.
func (j *job) inFlight() bool { return j.phase == phaseFetching || j.phase == phaseStoring }

// storingTarget is a target being stored: its outcome, the job's row once it
// is stored, and what the hooks are told then.
type storingTarget struct {
	next       persistence.JobRecord
	t          persistence.TargetRecord
	withRow    bool // the row is written with the outcome
	tooLarge   bool // converted by tooLarge: written as it is, or not at all
	err        error
	took       time.Duration
	prevStatus string
}

// stashed is a message that came while a target was being stored.
type stashed struct {
	msg    any
	sender *actor.PID
}

func newJob(cfg *Config, supervisor *actor.PID, rec persistence.JobRecord, payload any) actor.Producer {
	return func() actor.Actor {
		view := cfg.Views.Get(rec.ID)
		if view == nil { // not registered (a test's job): publish to nobody
			view = (&Views{}).add(&rec)
		}
		return &job{cfg: cfg, supervisor: supervisor, rec: rec, payload: payload, view: view,
			published: Snapshot{Job: rec, Running: -1}}
	}
}

// Receive implements actor.Actor: the lifecycle, then the message as the
// phase takes it.
func (j *job) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		root, self := ctx.ActorSystem().Root, ctx.Self()
		j.onWritten = func(err error) {
			if err == nil {
				root.Send(self, writtenOK) // the common case, without an allocation
				return
			}
			root.Send(self, &targetWritten{err: err})
		}
	case *actor.Stopping:
		if j.flushes != nil {
			j.flushes.Stop()
		}
	case *actor.Stopped:
		j.stopped()
	case *actor.Restarting:
	case *targetWritten:
		if j.phase == phaseStoring {
			j.written(ctx, m)
		}
	default:
		if j.phase == phaseStoring {
			j.stash = append(j.stash, stashed{msg: m, sender: ctx.Sender()})
			return
		}
		j.handle(ctx, m, ctx.Sender())
	}
	j.publish()
}

// handle handles a message in any phase but storing; sender is who gets
// the answer.
func (j *job) handle(ctx actor.Context, msg any, sender *actor.PID) {
	switch m := msg.(type) {
	case *dispatch:
		if j.phase == phaseWaiting && !j.terminal() {
			j.to(phaseIdle) // the supervisor's retry wait is over
		}
		if j.phase != phaseIdle {
			// Cancelled before the supervisor heard: give the worker back.
			j.report(ctx, m.worker)
			return
		}
		j.dispatch(ctx, m)
	case *fetched:
		if j.phase != phaseFetching { // cannot happen: give the worker back
			j.report(ctx, m.worker)
			return
		}
		j.fetched(ctx, m)
	case *CancelJob:
		ok := j.cancel(ctx)
		j.publish() // before the answer: a read after Cancel sees it
		reply(ctx, sender, ok)
		if ok && j.rec.Settled {
			j.cfg.evictSoon(ctx) // a flood of cancels is bounded too
		}
	case *shutdownJob:
		j.shutdown(ctx)
		j.publish()
		reply(ctx, sender, true)
	case *flushTick:
		if j.phase == phaseUnsaved {
			j.flushes = nil
			if !j.flush("retry") {
				j.retryFlush(ctx)
				return
			}
			j.to(phaseSettled)
			j.report(ctx, nil)
			j.cfg.evictSoon(ctx)
		}
	}
}

// report tells the supervisor how the job stands, giving worker back (nil:
// none).
func (j *job) report(ctx actor.Context, worker *actor.PID) {
	ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: worker, life: j.life(), lease: j.rec.Lease})
}

// reply answers a request (a stashed one too: ctx.Respond answers only the
// message being handled).
func reply(ctx actor.Context, to *actor.PID, v any) {
	if to != nil {
		ctx.Send(to, v)
	}
}

// stopped hands the job over to the store: a Touch that came since the
// job's last write is written, and its view is removed if the store has
// it all (otherwise it stays: the truth as the actor held it).
func (j *job) stopped() {
	touched := j.view.closeTouches()
	if touched > j.rec.Lease && j.rec.Settled && j.allWritten() {
		if _, err := j.cfg.Store.Touch(j.rec.ID, touched); err != nil {
			j.cfg.Log.Warn("store job", slog.String(keyJobID, j.rec.ID), slog.String("what", "touch"), slog.String(keyErr, storeErrText(err)))
		}
	}
	if j.allWritten() {
		j.cfg.Views.remove(j.rec.ID)
	}
}

// allWritten reports whether the store has every change the actor made.
func (j *job) allWritten() bool { return !j.dirty && len(j.unsaved) == 0 }

// warn logs a store failure at Warn, once what it changed is published:
// whoever reads the log line and then the job sees the change.
func (j *job) warn(msg string, attrs ...any) {
	j.publish()
	j.cfg.Log.Warn(msg, attrs...)
}

// running is the idx of the target in flight, -1 for none.
func (j *job) running() int {
	if j.phase == phaseFetching || j.phase == phaseStoring {
		return j.cur
	}
	return -1
}

// publish publishes the job's state to readers if it has changed since
// the last time. Unsaved outcomes are copied: the actor's slice changes.
func (j *job) publish() {
	p := &j.published
	running := j.running()
	if p.Job == j.rec && p.Running == running && len(p.Unsaved) == len(j.unsaved) {
		return
	}
	*p = Snapshot{Job: j.rec, Running: running}
	if len(j.unsaved) > 0 {
		p.Unsaved = append([]persistence.TargetRecord(nil), j.unsaved...)
	}
	s := *p
	j.view.publish(&s)
}

func (j *job) terminal() bool { return !persistence.IsLive(j.rec.Status) }

func (j *job) now() int64 { return j.cfg.Now().UnixNano() }

func (j *job) save(what string) {
	j.rec.Lease = max(j.rec.Lease, j.view.Touched())
	if len(j.unsaved) > 0 {
		j.flush(what) // the outcomes first, then the row
		return
	}
	if err := j.cfg.Store.SaveJob(&j.rec); err != nil {
		j.dirty = true
		j.warn("store job", slog.String(keyJobID, j.rec.ID), slog.String(keyStatus, j.rec.Status),
			slog.String("what", what), slog.String(keyErr, storeErrText(err)))
		return
	}
	j.dirty = false
}

// flush writes what failed writes left unwritten: the outcomes in order,
// each on its own (the store counts an unsettled job's progress from them),
// then the row, so that a row that settles the job is never stored before
// one of its outcomes. It reports whether all is written.
func (j *job) flush(what string) bool {
	for len(j.unsaved) > 0 {
		t := &j.unsaved[0]
		if err := j.writeOutcome(t); err != nil {
			j.warn("store target", slog.String(keyJobID, j.rec.ID), slog.Int(keyIdx, t.Idx),
				slog.String("what", what), slog.String(keyErr, storeErrText(err)))
			return false
		}
		j.unsaved = j.unsaved[1:]
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

// settle ends a job that is terminal with nothing in flight: its row is
// settled (written now, unless the write that settled it carried it), and
// the job is settled, or unsaved until a retry has written what a failed
// write left (retry: arm the retries; not at shutdown).
func (j *job) settle(ctx actor.Context, retry bool) {
	if !j.rec.Settled {
		j.rec.Settled = true
		j.save("settle")
	}
	if j.allWritten() {
		j.to(phaseSettled)
		return
	}
	j.to(phaseUnsaved)
	if retry {
		j.retryFlush(ctx)
	}
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

// dispatch starts the next target on the worker: idle → fetching.
func (j *job) dispatch(ctx actor.Context, m *dispatch) {
	j.cur = j.rec.TargetsDone
	j.to(phaseFetching)
	queued := j.rec.Status == persistence.StatusQueued
	if queued {
		j.setStatus(persistence.StatusRunning)
	}
	j.publish() // readers see the target running before it starts
	parent := j.cfg.FetchContext
	if parent == nil {
		parent = context.Background()
	}
	fctx, stop := context.WithCancelCause(parent)
	j.endFetch()
	j.stopFetch = stop
	ctx.Send(m.worker, &fetch{job: ctx.Self(), jobID: j.rec.ID, idx: j.cur, payload: j.payload, ctx: fctx})
	if queued {
		// While the first target is fetched: its outcome is written after
		// this (the store keeps the order), never before.
		j.save("running")
	}
}

// putBack ends a fetch that stores nothing and gives the worker back:
// fetching → p (idle, or waiting for a busy target), or the end for a job
// cancelled meanwhile.
func (j *job) putBack(ctx actor.Context, worker *actor.PID, p phase) {
	if j.terminal() {
		j.settle(ctx, true)
	} else {
		j.to(p)
	}
	j.report(ctx, worker)
	if j.rec.Settled {
		j.cfg.evictSoon(ctx)
	}
}

// fetched takes a target's outcome: fetching → storing (the common case),
// or idle, or the end.
func (j *job) fetched(ctx actor.Context, m *fetched) {
	j.endFetch()
	if m.idx != j.cur || m.abandoned {
		// Not the target in flight (cannot happen): never store it twice,
		// but give the worker back. Or the runner gave up on the fetch at
		// shutdown: the target stays pending, and the drain fails the job.
		j.putBack(ctx, m.worker, phaseIdle)
		return
	}
	now := j.now()
	out := m.outcome
	if out.Busy {
		if j.busySince == 0 {
			j.busySince = now
		}
		if now-j.busySince <= int64(j.cfg.RetryFor) {
			j.putBack(ctx, m.worker, phaseWaiting)
			return
		}
		out.Busy = false // busy for longer than RetryFor: store it failed
	}
	j.busySince = 0

	p := &j.slot // one write at a time: reused
	*p = storingTarget{next: j.rec, err: out.Err, took: m.took, prevStatus: j.rec.Status}
	p.t = persistence.TargetRecord{Idx: m.idx, Status: persistence.TargetDone, Result: out.Result, Stored: now}
	if out.Err != nil {
		p.t = persistence.TargetRecord{Idx: m.idx, Status: persistence.TargetFailed, Error: out.Msg, Hint: out.Hint, Stored: now}
	}
	next := &p.next
	next.CountOutcome(p.t.Status, int64(len(p.t.Result)), now)
	next.Lease = max(next.Lease, j.view.Touched())
	if persistence.IsLive(next.Status) {
		if st := next.TerminalStatus(); st != "" {
			next.Status = st
		}
	}
	if !persistence.IsLive(next.Status) {
		next.Settled = true
	}

	if len(j.unsaved) == 0 {
		// The common case: the worker goes on while the target is stored
		// (in a group commit with other jobs' targets); the job keeps its
		// place in the rotation and hears from the store (written).
		// Only the outcome is written, unless this settles the job or the
		// row is behind after a failed write: the outcome rows are the
		// store's record of a live job's progress (SaveOutcomeAsync).
		j.to(phaseStoring)
		p.withRow = next.Settled || j.dirty
		j.report(ctx, m.worker)
		j.write(p)
		return
	}
	// A failed write left rows unwritten: this outcome joins them, and
	// they are written in order, then the row (blocking; only after a
	// failed write).
	j.take(&p.next)
	j.unsaved = append(j.unsaved, p.t)
	j.dirty = true
	j.to(phaseIdle) // not in flight: readers see it as unsaved holds it
	j.flush("target")
	j.stored(ctx, m.worker, p)
}

// written takes the outcome of the target write at the store, then the
// messages that waited for it: storing → idle, or the end.
func (j *job) written(ctx actor.Context, m *targetWritten) {
	p := &j.slot
	if errors.Is(m.err, persistence.ErrTooLarge) && !p.tooLarge {
		tooLarge(&p.next, &p.t)
		p.tooLarge, p.err = true, errTooLarge
		j.write(p)
		return
	}
	j.take(&p.next)
	if m.err != nil {
		j.unsaved = append(j.unsaved, p.t)
		j.dirty = true  // the flush writes the row with the outcome
		j.to(phaseIdle) // not in flight: readers see it as unsaved holds it
		j.warn("store target", slog.String(keyJobID, j.rec.ID), slog.Int(keyIdx, p.t.Idx),
			slog.String(keyErr, storeErrText(m.err)))
	} else if p.withRow {
		j.dirty = false
	}
	j.stored(ctx, nil, p)
	j.unstash(ctx)
}

// unstash handles the messages that waited for a write, in order, until one
// of them starts another.
func (j *job) unstash(ctx actor.Context) {
	for len(j.stash) > 0 && j.phase != phaseStoring {
		d := j.stash[0]
		j.stash[0] = stashed{}
		j.stash = j.stash[1:]
		j.handle(ctx, d.msg, d.sender)
	}
	if len(j.stash) == 0 {
		j.stash = nil
	}
}

// write hands the storing target's write to the store.
func (j *job) write(p *storingTarget) {
	if p.withRow {
		j.cfg.Store.SaveTargetAsync(&p.next, &p.t, j.onWritten)
	} else {
		j.cfg.Store.SaveOutcomeAsync(j.rec.ID, &p.t, j.onWritten)
	}
}

// stored goes on once a target is stored (or its write has failed, and it
// waits in unsaved): the job goes idle or ends, tells the supervisor
// (freeing worker, if not nil), then the hooks, then evicts.
func (j *job) stored(ctx actor.Context, worker *actor.PID, p *storingTarget) {
	if j.terminal() {
		j.settle(ctx, true)
	} else {
		j.to(phaseIdle)
	}
	j.report(ctx, worker)

	j.cfg.hook(ctx, hookEvent{hook: hookTarget, jobID: j.rec.ID, err: p.err, d: p.took, n: len(p.t.Result)})
	if persistence.IsLive(p.prevStatus) && j.terminal() {
		j.ended(ctx)
	}
	j.cfg.evictSoon(ctx)
}

// writeOutcome writes one outcome on its own (see flush). A result too
// large to store is stored failed instead, and the row is behind then.
func (j *job) writeOutcome(t *persistence.TargetRecord) error {
	err := j.cfg.Store.SaveOutcome(j.rec.ID, t)
	if errors.Is(err, persistence.ErrTooLarge) && t.Error != errTooLarge.Error() {
		tooLarge(&j.rec, t)
		j.dirty = true
		err = j.cfg.Store.SaveOutcome(j.rec.ID, t)
	}
	return err
}

// errTooLarge is what Hooks.Target is told, and the error stored, for an
// outcome too large to store as it is.
var errTooLarge = errors.New("result too large to store")

// tooLarge turns a target whose outcome is too large to store (its result;
// or its error text or hint, which the engine bounds, so not in practice)
// into a failed one with a short error, and the job's row with it.
func tooLarge(rec *persistence.JobRecord, t *persistence.TargetRecord) {
	if t.Status == persistence.TargetDone {
		rec.UncountResult(int64(len(t.Result)))
	}
	*t = persistence.TargetRecord{Idx: t.Idx, Status: persistence.TargetFailed, Error: errTooLarge.Error(), Stored: t.Stored}
}

// ended reports a job that has just become terminal to the hooks.
func (j *job) ended(ctx actor.Context) {
	j.cfg.Log.Debug("job ended", slog.String(keyJobID, j.rec.ID), slog.String(keyStatus, j.rec.Status),
		slog.Int("targets_done", j.rec.TargetsDone), slog.Int("targets_failed", j.rec.TargetsFailed))
	j.cfg.hookJob(ctx, j.rec.ID, j.rec.Status)
	j.cfg.hook(ctx, hookEvent{hook: hookJobSeconds, jobID: j.rec.ID, d: time.Duration(j.now() - j.rec.Created)})
}

// endFetch releases the context of the fetch in flight, if any.
func (j *job) endFetch() {
	if j.stopFetch != nil {
		j.stopFetch(nil)
		j.stopFetch = nil
	}
}

// cancel cancels a live job: idle → the end; fetching stays fetching, its
// context cancelled (cause ErrCancelled), and the target's outcome then
// settles it.
func (j *job) cancel(ctx actor.Context) bool {
	if j.terminal() {
		return false
	}
	j.setStatus(persistence.StatusCancelled)
	j.rec.Settled = !j.inFlight()
	if j.stopFetch != nil { // the fetch in flight stops; its outcome settles the job
		j.stopFetch(batchtype.ErrCancelled)
	}
	j.save("cancelled")
	if j.rec.Settled {
		j.settle(ctx, true)
	}
	// The supervisor hears before the canceller does, so a Submit that
	// follows the Cancel sees the caps already freed.
	j.report(ctx, nil)
	j.ended(ctx)
	return true
}

// shutdown fails a live job with "shutdown"; the runner is closing and
// nothing of it is in flight any more (the drain waits for that), so it
// goes to the end without retries: the actor stops with the runner.
func (j *job) shutdown(ctx actor.Context) {
	if j.terminal() {
		if !j.rec.Settled || !j.allWritten() {
			j.rec.Settled = true
			j.save("settle")
			if j.phase == phaseUnsaved && j.allWritten() {
				j.to(phaseSettled)
			}
		}
		return
	}
	j.setStatus(persistence.StatusFailed)
	j.rec.Error = "shutdown"
	j.rec.Settled = !j.inFlight()
	j.save("shutdown")
	if j.rec.Settled {
		j.settle(ctx, false)
	}
	j.ended(ctx)
}
