package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

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
//
// Its writes are retried by the store's writer, in order (persistence's
// SaveTargetRetried, SaveJobRetried): a write that fails is answered
// ErrRetrying at once and the job goes on; it keeps the write in retrying
// until the writer answers it again, once written. On a durable store the
// writer answers a failed write only once it has been written and synced:
// the job waits for it (storing; or in save) and never goes on past a
// write that is not on stable storage.
type job struct {
	cfg     *Config
	rec     persistence.JobRecord
	payload any
	phase   phase
	// slot is the target in flight: its fetch (fetching), then its write
	// (storing: the worker is already free). Messages that come while it
	// is storing wait in stash and are handled in order once the store
	// has answered (the job takes no decision before that).
	slot  inFlight
	stash []stashed
	// view is where the job publishes a Snapshot after every change that
	// a reader can see, and where readers' Touches wait for the job's next
	// write.
	view *View
	// retrying are the writes the store's writer holds to retry, oldest
	// first (it answers them in that order): an outcome, or the job's row
	// (Idx -1). Readers see the outcomes as they are here
	// (Snapshot.Unsaved). A job that has ended waits in phaseUnsaved until
	// they are written.
	retrying []persistence.TargetRecord
	// onWritten is the store's callback for every write of the job: a
	// message to the job.
	onWritten persistence.WriteDone
	// span is the job's span from Submit (nil: none), until it starts;
	// then trace has it, with its targets' spans (trace.go).
	span  trace.Span
	trace jobTrace
}

// inFlight is a job's target in flight.
type inFlight struct {
	// stop cancels the fetch's context (fetching): with ErrCancelled when
	// the job is cancelled, with nil once its outcome is back.
	stop context.CancelCauseFunc
	// busySince is when the target was first answered busy (unix nanos, 0
	// for never): the supervisor keeps it between tries and sends it with
	// each dispatch.
	busySince int64
	// storing: the outcome, the job's row once it is stored, and what the
	// hooks are told then.
	next       persistence.JobRecord
	t          persistence.TargetRecord
	withRow    bool // the row is written with the outcome
	tooLarge   bool // converted by tooLarge: written as it is, or not at all
	err        error
	took       time.Duration
	prevStatus string
	// held: the store holds the write (a durable store: writeHeld), why.
	held error
}

// to moves the job to phase p, checked against phaseMachine (life.go).
func (j *job) to(p phase) {
	if p == j.phase {
		return
	}
	checkLife(j.rec.ID, j.life(), life{j.rec.Status, p}, false)
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

// stashed is a message that came while a target was being stored.
type stashed struct {
	msg    any
	sender *actor.PID
}

func newJob(cfg *Config, rec persistence.JobRecord, payload any, span trace.Span) actor.Producer {
	return func() actor.Actor {
		view := cfg.Views.Get(rec.ID)
		if view == nil { // not registered (a test's job): publish to nobody
			view = (&Views{}).add(&rec)
		}
		return &job{cfg: cfg, rec: rec, payload: payload, view: view, span: span}
	}
}

// Receive implements actor.Actor: the lifecycle, then the message as the
// phase takes it.
func (j *job) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		j.trace.start(j.cfg.tracer, j.span, &j.rec)
		j.span = nil
		root, self, halted := ctx.ActorSystem().Root, ctx.Self(), &j.cfg.halted
		j.onWritten = func(err error, late bool) {
			switch {
			case halted.Load(): // the runner has stopped: nobody to tell
			case late:
				root.Send(self, &lateWritten{err: err})
			case err == nil:
				root.Send(self, writtenOK) // the common case, without an allocation
			default:
				root.Send(self, &targetWritten{err: err})
			}
		}
	case *actor.Stopped:
		j.stopped()
	case *actor.Stopping, *actor.Restarting:
	case *targetWritten:
		if j.phase == phaseStoring {
			j.written(ctx, m)
		}
	case *lateWritten:
		j.lateWritten(ctx, m.err) // in any phase: it is about an earlier write
	case *writeHeld:
		if j.phase == phaseStoring {
			j.slot.held = m.err
			j.refuseStashedCancels(ctx)
		}
	default:
		if j.phase == phaseStoring {
			if _, ok := m.(*CancelJob); ok && j.cfg.Store.Durable() {
				// On a durable store the job stores nothing more until the
				// write in flight is synced: one the store holds (the disk
				// full, or failing) waits for it. The cancel does not: it
				// is refused at once, nothing changed.
				err := j.slot.held
				if err == nil {
					err = j.cfg.Store.Writable()
				}
				if err != nil {
					reply(ctx, ctx.Sender(), fmt.Errorf("cancel: %w", err))
					return
				}
			}
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
		ok, err := j.cancel(ctx)
		if err != nil {
			reply(ctx, sender, err)
			return
		}
		j.publish() // before the answer: a read after Cancel sees it
		reply(ctx, sender, ok)
		if ok && j.rec.Settled {
			j.cfg.evictSoon(ctx) // a flood of cancels is bounded too
		}
	case *shutdownJob:
		j.shutdown(ctx)
		j.publish()
		reply(ctx, sender, true)
	}
}

// report tells the supervisor how the job stands, giving worker back (nil:
// none).
func (j *job) report(ctx actor.Context, worker *actor.PID) {
	ctx.Send(j.cfg.supervisor, &jobDone{id: j.rec.ID, worker: worker, life: j.life(), lease: j.rec.Lease, busySince: j.slot.busySince})
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
	j.endFetch()
	j.trace.stop(&j.rec)
	touched := j.view.closeTouches()
	if touched > j.rec.Lease && j.rec.Settled && len(j.retrying) == 0 {
		if _, err := j.cfg.Store.Touch(j.rec.ID, touched); err != nil {
			j.cfg.Log.Warn("store job", slog.String(keyJobID, j.rec.ID), slog.String("what", "touch"), slog.String(keyErr, storeErrText(err)))
		}
	}
	if len(j.retrying) == 0 {
		j.cfg.Views.remove(j.rec.ID)
	}
}

// warn logs a store failure at Warn, once what it changed is published:
// whoever reads the log line and then the job sees the change.
func (j *job) warn(msg string, attrs ...any) {
	j.publish()
	j.cfg.Log.Warn(msg, attrs...)
}

// running is the idx of the target in flight, -1 for none.
func (j *job) running() int {
	if j.inFlight() {
		return j.rec.TargetsDone // storing: rec is not the next one yet
	}
	return -1
}

// publish publishes the job's state to readers if it has changed since
// the last time. The outcomes being retried are copied: the actor's slice
// changes.
func (j *job) publish() {
	p := j.view.Load()
	running := j.running()
	unsaved := 0
	for i := range j.retrying {
		if j.retrying[i].Idx >= 0 {
			unsaved++
		}
	}
	if p.Job == j.rec && p.Running == running && len(p.Unsaved) == unsaved {
		return
	}
	s := &Snapshot{Job: j.rec, Running: running}
	if unsaved > 0 {
		s.Unsaved = make([]persistence.TargetRecord, 0, unsaved)
		for _, t := range j.retrying {
			if t.Idx >= 0 {
				s.Unsaved = append(s.Unsaved, t)
			}
		}
	}
	j.view.publish(s)
}

func (j *job) terminal() bool { return !persistence.IsLive(j.rec.Status) }

func (j *job) now() int64 { return j.cfg.Now().UnixNano() }

// since is now, but never before the job started: a clock stepped back
// while the job runs never makes it end, nor a target be stored, before it
// started.
func (j *job) since() int64 { return max(j.now(), j.rec.Started) }

// save writes the job's row, with the latest Touch. A write that fails is
// the store's writer's to retry (it waits in retrying); one the store
// refuses for good (it is closed) waits there too, for nobody: the job's
// view keeps the truth.
func (j *job) save(what string) {
	j.rec.Lease = max(j.rec.Lease, j.view.Touched())
	if err := j.cfg.Store.SaveJobRetried(&j.rec, j.onWritten); err != nil {
		j.retrying = append(j.retrying, persistence.TargetRecord{Idx: -1})
		j.warn("store job", slog.String(keyJobID, j.rec.ID), slog.String(keyStatus, j.rec.Status),
			slog.String("what", what), slog.String(keyErr, storeErrText(err)))
	}
}

// lateWritten takes the store writer's late answer to the oldest write it
// was retrying: written, or given up (the store closed, or the runner
// stopped). A job that has ended settles once nothing is left.
func (j *job) lateWritten(ctx actor.Context, err error) {
	if len(j.retrying) == 0 {
		return
	}
	if err != nil {
		// Given up: what it held is not stored. It stays in retrying (the
		// view keeps it), as every write after it (given up too).
		j.cfg.Log.Warn("store job", slog.String(keyJobID, j.rec.ID), slog.String("what", "retry"), slog.String(keyErr, storeErrText(err)))
		return
	}
	j.retrying[0] = persistence.TargetRecord{}
	j.retrying = j.retrying[1:]
	if len(j.retrying) > 0 {
		return
	}
	j.retrying = nil
	if j.phase == phaseUnsaved {
		j.to(phaseSettled)
		j.publish() // readers see it written before the supervisor stops the actor
		j.report(ctx, nil)
		j.cfg.evictSoon(ctx)
	}
}

// settle ends a job that is terminal with nothing in flight: its row is
// settled (written now, unless the write that settled it carried it), and
// the job is settled, or unsaved until the store's writer has written
// what it is retrying.
func (j *job) settle() {
	if !j.rec.Settled {
		j.rec.Settled = true
		j.save("settle")
	}
	if len(j.retrying) == 0 {
		j.to(phaseSettled)
		return
	}
	j.to(phaseUnsaved)
}

// storeErrText is a store error for a log line: the store's own sentinels by
// name, anything else as "write failed" (Badger's texts may carry keys).
func storeErrText(err error) string {
	for _, e := range []error{persistence.ErrClosed, persistence.ErrTooLarge, persistence.ErrNotFound, persistence.ErrCorrupt, persistence.ErrDiskFull, persistence.ErrNotSynced} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "write failed"
}

// dispatch starts the next target on the worker: idle → fetching.
func (j *job) dispatch(ctx actor.Context, m *dispatch) {
	j.to(phaseFetching)
	j.slot.busySince = m.busySince
	queued := j.rec.Status == persistence.StatusQueued
	if queued && j.cfg.Store.Durable() {
		// A durable job shows running, and fetches, only once its running
		// row is on stable storage. That write is never held: held, it
		// would keep the actor (and a Cancel, a Status) waiting for the
		// disk. When it fails (the disk full or failing a sync) the job
		// is not started: it stays queued and waits RetryWait out of the
		// rotation, as for a busy target.
		next := j.rec
		next.Status, next.Started = persistence.StatusRunning, j.now()
		next.Lease = max(next.Lease, j.view.Touched())
		if err := j.cfg.Store.SaveJobNow(&next); err != nil {
			j.cfg.Log.Debug("job not started: its running row is not stored", slog.String(keyJobID, j.rec.ID),
				slog.String(keyErr, storeErrText(err)))
			j.putBack(ctx, m.worker, phaseWaiting)
			return
		}
		j.setStatus(persistence.StatusRunning)
		j.rec.Started, j.rec.Lease = next.Started, next.Lease
		queued = false
	} else if queued {
		j.setStatus(persistence.StatusRunning)
		j.rec.Started = j.now()
	}
	j.publish() // readers see the target running before it starts
	parent := j.cfg.FetchContext
	if parent == nil {
		parent = context.Background()
	}
	fctx, stop := context.WithCancelCause(j.trace.fetching(parent))
	j.endFetch()
	j.slot.stop = stop
	ctx.Send(m.worker, &fetch{job: ctx.Self(), jobID: j.rec.ID, idx: j.rec.TargetsDone, payload: j.payload, ctx: fctx})
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
		j.settle()
	} else {
		j.to(p)
	}
	j.report(ctx, worker)
	if j.rec.Settled {
		j.cfg.evictSoon(ctx)
	}
}

// fetched takes a target's outcome: fetching → storing (the common case),
// or idle, waiting, or the end.
func (j *job) fetched(ctx actor.Context, m *fetched) {
	j.endFetch()
	if m.idx != j.rec.TargetsDone || m.abandoned {
		// Not the target in flight (cannot happen): never store it twice,
		// but give the worker back. Or the runner gave up on the fetch at
		// shutdown: the target stays pending, and the drain fails the job.
		j.putBack(ctx, m.worker, phaseIdle)
		return
	}
	now := j.since()
	out := m.outcome
	j.trace.fetched(m.took, out.Err != nil && !out.Busy)
	if out.Busy {
		if j.slot.busySince == 0 {
			j.slot.busySince = now
		}
		if now-j.slot.busySince <= int64(j.cfg.RetryFor) {
			j.trace.busy(time.Duration(now-j.slot.busySince), j.cfg.RetryWait)
			j.putBack(ctx, m.worker, phaseWaiting)
			return
		}
		out.Busy = false // busy for longer than RetryFor: store it failed
	}

	// The worker goes on while the target is stored (in a group commit
	// with other jobs' targets); the job keeps its place in the rotation
	// and hears from the store (written). Only the outcome is written,
	// unless this settles the job: the outcome rows are the store's record
	// of a live job's progress (SaveOutcomeRetried).
	p := &j.slot // one write at a time: reused
	*p = inFlight{next: j.rec, err: out.Err, took: m.took, prevStatus: j.rec.Status}
	// A stored outcome's time is known: at least 1 ns, since 0 reads as
	// unknown (a fetch that took no time by an injected clock).
	took := max(m.clocked, time.Nanosecond)
	p.t = persistence.TargetRecord{Idx: m.idx, Status: persistence.TargetDone, Result: out.Result, Stored: now, Took: took}
	if out.Err != nil {
		p.t = persistence.TargetRecord{Idx: m.idx, Status: persistence.TargetFailed, Error: out.Msg, Hint: out.Hint, Stored: now, Took: took}
	}
	next := &p.next
	next.CountOutcome(p.t.Status, int64(len(p.t.Result)), now)
	next.Lease = max(next.Lease, j.view.Touched())
	if persistence.IsLive(next.Status) {
		if st := next.TerminalStatus(); st != "" {
			next.Status, next.Ended = st, now
		}
	}
	if !persistence.IsLive(next.Status) {
		next.Settled = true
	}
	j.to(phaseStoring)
	j.trace.storing()
	p.withRow = next.Settled
	j.report(ctx, m.worker)
	j.write(p)
}

// written takes the store's first answer to the storing target's write,
// then the messages that waited for it: storing → idle, or the end. A
// write the store's writer retries counts as stored for the job's work
// (it waits in retrying, and readers see it there).
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
		j.retrying = append(j.retrying, p.t)
		j.warn("store target", slog.String(keyJobID, j.rec.ID), slog.Int(keyIdx, p.t.Idx),
			slog.String(keyErr, storeErrText(m.err)))
	}
	j.stored(ctx, p)
	j.unstash(ctx)
}

// refuseStashedCancels answers the cancels that wait for the write in
// flight, which the store holds (slot.held), with its error: nothing
// changed (see cancel).
func (j *job) refuseStashedCancels(ctx actor.Context) {
	kept := j.stash[:0]
	for _, d := range j.stash {
		if _, ok := d.msg.(*CancelJob); ok {
			reply(ctx, d.sender, fmt.Errorf("cancel: %w", j.slot.held))
			continue
		}
		kept = append(kept, d)
	}
	clear(j.stash[len(kept):])
	j.stash = kept
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
func (j *job) write(p *inFlight) {
	if p.withRow {
		j.cfg.Store.SaveTargetRetried(&p.next, &p.t, j.onWritten)
	} else {
		j.cfg.Store.SaveOutcomeRetried(j.rec.ID, &p.t, j.onWritten)
	}
}

// stored goes on once a target is stored (or its write is being retried):
// the job goes idle or ends, tells the supervisor, then the hooks, then
// the maintainer if the store is past MaxBytes.
func (j *job) stored(ctx actor.Context, p *inFlight) {
	if j.terminal() {
		j.settle()
	} else {
		j.to(phaseIdle)
	}
	j.report(ctx, nil)
	j.trace.stored(p.t.Status, len(p.t.Result), &j.rec)

	j.cfg.hook(ctx, hookEvent{hook: hookTarget, jobID: j.rec.ID, err: p.err, d: p.took, n: len(p.t.Result)})
	if persistence.IsLive(p.prevStatus) && j.terminal() {
		j.ended(ctx)
	}
	j.cfg.evictSoon(ctx)
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
	*t = persistence.TargetRecord{Idx: t.Idx, Status: persistence.TargetFailed, Error: errTooLarge.Error(), Stored: t.Stored, Took: t.Took}
}

// ended reports a job that has just become terminal to the hooks.
func (j *job) ended(ctx actor.Context) {
	j.cfg.Log.Debug("job ended", slog.String(keyJobID, j.rec.ID), slog.String(keyStatus, j.rec.Status),
		slog.Int("targets_done", j.rec.TargetsDone), slog.Int("targets_failed", j.rec.TargetsFailed))
	j.trace.ended(&j.rec, j.inFlight())
	j.cfg.hookJob(ctx, j.rec.ID, j.rec.Status)
	j.cfg.hook(ctx, hookEvent{hook: hookJobSeconds, jobID: j.rec.ID, d: time.Duration(max(j.now()-j.rec.Created, 0))})
}

// endFetch releases the context of the fetch in flight, if any.
func (j *job) endFetch() {
	if j.slot.stop != nil {
		j.slot.stop(nil)
		j.slot.stop = nil
	}
}

// cancel cancels a live job: idle or waiting → the end; fetching stays
// fetching, its context cancelled (cause ErrCancelled), and the target's
// outcome then settles it.
//
// On a durable store the cancel is stored first, never held
// (Store.SaveJobNow), and made only once it is synced: while the disk has
// no room for a write (full to its last byte: below the reserve a cancel
// goes into it) it returns the store's error at once and nothing changes,
// so that the canceller is answered now, not once there is room. A failed
// sync is written again and synced (save waits for it, as before): a
// disk that fails a sync now and then still cancels. On a store that is
// not durable a cancel is made at once and its write, if it fails, is held
// and written once it can be (as every write there).
func (j *job) cancel(ctx actor.Context) (bool, error) {
	if j.terminal() {
		return false, nil
	}
	next := j.rec
	next.Status, next.Ended, next.Settled = persistence.StatusCancelled, j.since(), !j.inFlight()
	saved := false
	if j.cfg.Store.Durable() {
		next.Lease = max(next.Lease, j.view.Touched())
		if err := j.cfg.Store.SaveJobNow(&next); err != nil {
			// The canceller hears it (a full disk: ErrDiskFull; a failed
			// sync: ErrNotSynced, the row perhaps stored by the reopen that
			// follows, and overwritten by the job's next write), and the
			// job goes on as it was. Waiting for the store's writer to
			// write it again instead held the actor, and the cancel's
			// answer, for as long as the disk failed. The disk is logged
			// by the store's watch, once a minute: a cancel tried again
			// and again while it lasts is no Warn each time.
			j.cfg.Log.Debug("cancel refused: not stored", slog.String(keyJobID, j.rec.ID))
			return false, fmt.Errorf("cancel: %w", err)
		}
		saved = true
	}
	j.setStatus(persistence.StatusCancelled)
	j.trace.cancelled(j.inFlight())
	j.rec.Ended, j.rec.Settled, j.rec.Lease = next.Ended, next.Settled, next.Lease
	if j.slot.stop != nil { // the fetch in flight stops; its outcome settles the job
		j.slot.stop(batchtype.ErrCancelled)
	}
	if !saved {
		j.save("cancelled")
	}
	if j.rec.Settled {
		j.settle()
	}
	// The supervisor hears before the canceller does, so a Submit that
	// follows the Cancel sees the caps already freed.
	j.report(ctx, nil)
	j.ended(ctx)
	return true, nil
}

// shutdown fails a live job with "shutdown"; the runner is closing and
// nothing of it is in flight any more (the drain waits for that), so it
// goes to the end: the actor stops with the runner. What the store's writer
// is still retrying is given up when the runner has stopped
// (Store.AbandonRetries): the next runner reaps the job.
func (j *job) shutdown(ctx actor.Context) {
	if j.terminal() {
		if !j.rec.Settled {
			j.rec.Settled = true
			j.save("settle")
		}
		return
	}
	j.setStatus(persistence.StatusFailed)
	j.rec.Error, j.rec.Ended = "shutdown", j.since()
	j.rec.Settled = !j.inFlight()
	j.save("shutdown")
	if j.rec.Settled {
		j.settle()
	}
	j.ended(ctx)
}
