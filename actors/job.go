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
	inflight   int   // idx of the target being fetched or stored, -1 for none
	busySince  int64 // unix nanos of the next target's first busy answer, 0 for none
	// What a failed write left unwritten: target outcomes, and whether the
	// stored row is behind rec. The next write writes them first; a job
	// that has ended keeps its actor, and retries every RetryWait, until
	// they are written (see flush).
	unsaved []persistence.TargetRecord
	dirty   bool
	flushes *time.Timer
	// storing is the target whose write is at the store (asynchronous: the
	// worker is already free); nil for none. Until it has committed, every
	// message but Status waits in deferred, so the job's writes stay one
	// at a time and in order.
	storing   *storingTarget
	slot      storingTarget // what storing points to
	deferred  []deferredMsg
	onWritten func(error) // the store's callback: a targetWritten to self
	// view is where the job publishes a Snapshot after every change that
	// a reader can see (published is the last one), and where readers'
	// Touches wait for the job's next write.
	view      *View
	published Snapshot
}

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

// deferredMsg is a message that came while a target was being stored.
type deferredMsg struct {
	msg    any
	sender *actor.PID
}

func newJob(cfg *Config, supervisor *actor.PID, rec persistence.JobRecord, payload any) actor.Producer {
	return func() actor.Actor {
		view := cfg.Views.Get(rec.ID)
		if view == nil { // not registered (a test's job): publish to nobody
			view = (&Views{}).add(&rec)
		}
		return &job{cfg: cfg, supervisor: supervisor, rec: rec, payload: payload, inflight: -1, view: view,
			published: Snapshot{Job: rec, Running: -1}}
	}
}

// Receive implements actor.Actor.
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
		j.written(ctx, m)
	default:
		if j.storing != nil {
			j.deferred = append(j.deferred, deferredMsg{msg: m, sender: ctx.Sender()})
			return
		}
		j.handle(ctx, m, ctx.Sender())
	}
	j.publish()
}

// stopped hands the job over to the store: a Touch that came since the
// job's last write is written, and its view is removed if the store has
// it all (otherwise it stays: the truth as the actor held it).
func (j *job) stopped() {
	touched := j.view.closeTouches()
	if touched > j.rec.Lease && j.rec.Settled && !j.dirty && len(j.unsaved) == 0 {
		if _, err := j.cfg.Store.Touch(j.rec.ID, touched); err != nil {
			j.cfg.Log.Warn("store job", slog.String(keyJobID, j.rec.ID), slog.String("what", "touch"), slog.String(keyErr, storeErrText(err)))
		}
	}
	if !j.dirty && len(j.unsaved) == 0 {
		j.cfg.Views.remove(j.rec.ID)
	}
}

// warn logs a store failure at Warn, once what it changed is published:
// whoever reads the log line and then the job sees the change.
func (j *job) warn(msg string, attrs ...any) {
	j.publish()
	j.cfg.Log.Warn(msg, attrs...)
}

// publish publishes the job's state to readers if it has changed since
// the last time. Unsaved outcomes are copied: the actor's slice changes.
func (j *job) publish() {
	p := &j.published
	if p.Job == j.rec && p.Running == j.inflight && len(p.Unsaved) == len(j.unsaved) {
		return
	}
	*p = Snapshot{Job: j.rec, Running: j.inflight}
	if len(j.unsaved) > 0 {
		p.Unsaved = append([]persistence.TargetRecord(nil), j.unsaved...)
	}
	s := *p
	j.view.publish(&s)
}

// handle handles a message now; sender is who gets the answer.
func (j *job) handle(ctx actor.Context, msg any, sender *actor.PID) {
	switch m := msg.(type) {
	case *dispatch:
		j.dispatch(ctx, m)
	case *fetched:
		j.fetched(ctx, m)
	case *CancelJob:
		ok := j.cancel(ctx)
		j.publish() // before the answer: a read after Cancel sees it
		reply(ctx, sender, ok)
	case *shutdownJob:
		j.shutdown(ctx)
		j.publish()
		reply(ctx, sender, true)
	case *flushTick:
		j.flushes = nil
		if !j.flush("retry") {
			j.retryFlush(ctx)
		} else if j.terminal() && j.rec.Settled {
			ctx.Send(j.supervisor, &jobEnded{id: j.rec.ID, settled: true})
		}
	}
}

// reply answers a request (a deferred one too: ctx.Respond answers only the
// message being handled).
func reply(ctx actor.Context, to *actor.PID, v any) {
	if to != nil {
		ctx.Send(to, v)
	}
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
		ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: j.settledState(ctx), status: j.rec.Status})
		return
	}
	j.inflight = j.rec.TargetsDone
	queued := j.rec.Status == persistence.StatusQueued
	if queued {
		j.rec.Status = persistence.StatusRunning
	}
	j.publish() // readers see the target running before it starts
	ctx.Send(m.worker, &fetch{job: ctx.Self(), jobID: j.rec.ID, idx: j.inflight, payload: j.payload})
	if queued {
		// While the first target is fetched: its outcome is written after
		// this (the store keeps the order), never before.
		j.save("running")
	}
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
	if m.idx != j.inflight || m.abandoned {
		// Not the target in flight (cannot happen): never store it twice,
		// but give the worker back. Or the runner gave up on the fetch at
		// shutdown: the target stays pending, and the drain fails the job.
		j.inflight = -1
		ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: j.settledState(ctx), status: j.rec.Status})
		return
	}
	now := j.now()
	out := m.outcome
	if out.Busy {
		j.inflight = -1
		if j.busySince == 0 {
			j.busySince = now
		}
		if now-j.busySince <= int64(j.cfg.RetryFor) {
			state := jobWaiting
			if j.terminal() {
				state = j.settledState(ctx)
			}
			ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: state, status: j.rec.Status})
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

	// The target stays in flight (inflight) until it is stored.
	if len(j.unsaved) == 0 {
		// The common case: the worker goes on while the target is stored
		// (in a group commit with other jobs' targets); the job keeps its
		// place in the rotation and hears from the store (written).
		// Only the outcome is written, unless this settles the job or the
		// row is behind after a failed write: the outcome rows are the
		// store's record of a live job's progress (SaveOutcomeAsync).
		j.storing = p
		p.withRow = next.Settled || j.dirty
		ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: m.worker, state: jobStoring})
		j.write(p)
		return
	}
	// A failed write left rows unwritten: this outcome joins them, and
	// they are written in order, then the row (blocking; only after a
	// failed write).
	j.rec = p.next
	j.unsaved = append(j.unsaved, p.t)
	j.dirty = true
	j.inflight = -1
	j.flush("target")
	j.stored(ctx, m.worker, p)
}

// written takes the outcome of the target write at the store, then the
// messages that waited for it.
func (j *job) written(ctx actor.Context, m *targetWritten) {
	p := j.storing
	if p == nil {
		return // cannot happen: one write at a time
	}
	if errors.Is(m.err, persistence.ErrTooLarge) && !p.tooLarge {
		tooLarge(&p.next, &p.t)
		p.tooLarge, p.err = true, errTooLarge
		j.write(p)
		return
	}
	j.storing = nil
	j.rec = p.next
	defer j.replay(ctx) // the messages that waited for the write
	if m.err != nil {
		j.unsaved = append(j.unsaved, p.t)
		j.dirty = true // the flush writes the row with the outcome
		j.inflight = -1
		j.warn("store target", slog.String(keyJobID, j.rec.ID), slog.Int(keyIdx, p.t.Idx),
			slog.String(keyErr, storeErrText(m.err)))
	} else if p.withRow {
		j.dirty = false
	}
	j.stored(ctx, nil, p)
}

// replay handles the messages that waited for a write, in order, until one
// of them starts another.
func (j *job) replay(ctx actor.Context) {
	for len(j.deferred) > 0 && j.storing == nil {
		d := j.deferred[0]
		j.deferred[0] = deferredMsg{}
		j.deferred = j.deferred[1:]
		j.handle(ctx, d.msg, d.sender)
	}
	if len(j.deferred) == 0 {
		j.deferred = nil
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
// waits in unsaved): it tells the supervisor how the job stands (freeing
// worker, if not nil), then the hooks, then evicts.
func (j *job) stored(ctx actor.Context, worker *actor.PID, p *storingTarget) {
	j.inflight = -1
	state := jobReady
	if j.terminal() {
		state = j.endState(ctx)
	}
	ctx.Send(j.supervisor, &jobDone{id: j.rec.ID, worker: worker, state: state, lease: j.rec.Lease, status: j.rec.Status})

	j.cfg.hook(ctx, hookEvent{hook: hookTarget, jobID: j.rec.ID, err: p.err, d: p.took, n: len(p.t.Result)})
	if persistence.IsLive(p.prevStatus) && j.terminal() {
		j.ended(ctx)
	}
	if n, err := j.cfg.Store.Evict(j.cfg.MaxBytes); err != nil {
		j.warn("evict", slog.String(keyJobID, j.rec.ID), slog.String(keyErr, storeErrText(err)))
	} else if n > 0 {
		j.cfg.Log.Debug("evicted jobs", slog.Int(keyCount, n))
	}
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
	j.ended(ctx)
	return true
}

// shutdown fails a live job with "shutdown"; the runner is closing and
// nothing of it is in flight any more.
func (j *job) shutdown(ctx actor.Context) {
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
	j.ended(ctx)
}
