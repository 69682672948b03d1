package persistence

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// The held writes: a retried owner write that fails for a reason that may
// pass is held by the writer and tried again (see the top of writer.go).

// retryable reports whether a write that failed with err may commit if
// tried again: not once the store is closing, nor for a row too large or a
// bad id.
func retryable(err error) bool {
	for _, e := range []error{ErrClosed, ErrTooLarge, ErrNotFound, ErrCorrupt, ErrReadOnly} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// fail answers a write that failed with err, or holds it to be retried
// (see the top of this file). Writer goroutine only.
func (s *Store) fail(w *ownerWrite, err error) {
	if !w.retry || s.stopping || !retryable(err) {
		w.release(s.counted(err))
		return
	}
	s.writeRetries.Add(1)
	s.hold(w, err)
}

// hold keeps w behind the job's held writes (or first, if there are
// none) and answers it ErrRetrying unless it was answered already. On a
// durable store it is not answered until it has been written and synced
// (or given up): a write is acknowledged only once it is on stable
// storage, and a job must not go on (its next target, a Cancel's answer)
// past a write that is not; except once AbandonRetries has been called
// (its runner is stopping). Writer goroutine only.
func (s *Store) hold(w *ownerWrite, err error) {
	if s.held == nil {
		s.held = make(map[[idLen]byte][]*ownerWrite)
	}
	s.held[w.id] = append(s.held[w.id], w)
	if !w.late && (!s.durable.Load() || s.abandoned.Load()) {
		w.late = true
		w.doneR(fmt.Errorf("%w: %w", err, ErrRetrying), false)
		return
	}
	if f := s.heldHook.Load(); f != nil && !w.late {
		(*f)(hex.EncodeToString(w.id[:]), err)
	}
}

// SetHeldHook makes the store's writer call f with the job's id and the
// error each time it holds a write of a durable store that it does not
// answer until it is written and synced (its owner waits for it: hold),
// so that the owner may answer what it cannot do meanwhile (a cancel) at
// once, not once the disk has room. f runs on the writer goroutine and
// must not block nor write to the store. nil: none. Safe to call at any
// time.
func (s *Store) SetHeldHook(f func(jobID string, err error)) {
	if f == nil {
		s.heldHook.Store(nil)
		return
	}
	s.heldHook.Store(&f)
}

// errGivenUp is the late answer of a held write the writer gave up on.
var errGivenUp = fmt.Errorf("%w: its retries given up", ErrClosed)

// errHeldBehind is why a retried write waits that was never tried: an
// earlier write of its job is being retried.
var errHeldBehind = errors.New("held behind a failed write of its job")

// retryHeld tries the held writes again, each job's in order, until each
// job's first one fails again or none is left. When it gives up (the store
// is closing, or AbandonRetries), a write that fails is answered with its
// error and the next one of its job is tried. Writer goroutine only.
func (s *Store) retryHeld(giveUp bool) {
	giveUp = giveUp || s.stopping
	for progress := true; progress && len(s.held) > 0; {
		progress = false
		heads := make([]*ownerWrite, 0, len(s.held))
		for id, q := range s.held {
			heads = append(heads, q[0])
			if len(q) == 1 {
				delete(s.held, id)
			} else {
				s.held[id] = q[1:]
			}
		}
		// The heads are tried as new writes; those that fail again go back
		// to the front of their job's queue.
		var failed []*ownerWrite
		s.beginGroup()
		group := s.writeResultsInto(heads, func(w *ownerWrite, _ error) { failed = append(failed, w) })
		var errs []error
		if len(group) > 0 {
			errs = s.commitSynced(group)
		}
		s.endGroup()
		for i, w := range group {
			var err error
			if errs != nil {
				err = errs[i]
			}
			switch {
			case err == nil || !retryable(err):
				w.release(err)
				progress = true
			case giveUp:
				s.writeErrors.Add(1)
				w.release(fmt.Errorf("%w: %w", err, errGivenUp))
				progress = true
			default:
				failed = append(failed, w)
			}
		}
		for _, w := range failed {
			if giveUp {
				s.writeErrors.Add(1)
				w.release(fmt.Errorf("%s: %w", w.op, errGivenUp))
				progress = true
				continue
			}
			if s.held == nil {
				s.held = make(map[[idLen]byte][]*ownerWrite)
			}
			s.held[w.id] = append([]*ownerWrite{w}, s.held[w.id]...)
		}
	}
}

// AbandonRetries tries every held write once more, each job's in order,
// and gives up those that fail: each is answered, late, with an error
// wrapping [ErrClosed]. A runner calls it as it stops, so that no write of
// a job it no longer owns commits later (the next runner reaps the job).
// Safe for concurrent use; it returns once they are all answered. On a
// durable store it also ends the wait for a held write's answer: from then
// until the next [Store.SetDurable], a write that fails is answered at
// once (an error wrapping [ErrRetrying]) as on a store that is not
// durable, so that a stopping runner's jobs do not wait for the disk.
func (s *Store) AbandonRetries() {
	s.abandoned.Store(true)
	done := make(chan struct{})
	select {
	case s.q.abandon <- done:
		<-done
	case <-s.stop:
	}
}

// SetRetryWait sets how long the writer waits before it tries the held
// writes again (default [DefaultRetryWait]). Safe to call at any time; it
// applies from the next wait.
func (s *Store) SetRetryWait(d time.Duration) {
	if d > 0 {
		s.retryWait.Store(int64(d))
	}
}

// DefaultRetryWait is how long the writer waits, by default, before it
// tries a failed retried write again.
const DefaultRetryWait = 2 * time.Second

func (s *Store) retryEvery() time.Duration {
	if d := s.retryWait.Load(); d > 0 {
		return time.Duration(d)
	}
	return DefaultRetryWait
}

// SaveTargetRetried is [Store.SaveTargetAsync], retried: a write that
// fails for a reason that may pass is held and tried again, the job's
// later retried writes behind it (see the top of writer.go); done is
// answered as [WriteDone] says. For the job's owner only.
func (s *Store) SaveTargetRetried(j *JobRecord, t *TargetRecord, done WriteDone) {
	s.write("save target", j.ID, j, t, nil, done)
}

// SaveOutcomeRetried is [Store.SaveOutcomeAsync], retried as
// [Store.SaveTargetRetried].
func (s *Store) SaveOutcomeRetried(jobID string, t *TargetRecord, done WriteDone) {
	s.write("save outcome", jobID, nil, t, nil, done)
}

// SaveJobRetried is [Store.SaveJob], retried as [Store.SaveTargetRetried]:
// it waits for the first answer and returns it; late is called only if
// that wraps [ErrRetrying], with the late answer.
func (s *Store) SaveJobRetried(j *JobRecord, late WriteDone) error {
	ch := make(chan error, 1)
	s.write("save job", j.ID, j, nil, nil, func(err error, isLate bool) {
		if isLate {
			late(err, true)
			return
		}
		ch <- err
	})
	return <-ch
}

// SaveJobNow is [Store.SaveJob] for the job's owner, in order with its
// retried writes, and never held: a write that fails (the disk full, a
// failed sync) returns its error at once, and so does one made while an
// earlier write of the job is held. An owner whose answer must not wait
// for the disk (a cancel on a durable store: answered at once, written or
// not) makes it so. On a durable store it returns once the write is
// synced; an error wrapping [ErrNotSynced] says the sync failed (the row
// may still be stored by the reopen that follows: reopen.go).
func (s *Store) SaveJobNow(j *JobRecord) error {
	id, ok := parseID(j.ID)
	switch {
	case !ok:
		return fmt.Errorf("save job: %w", ErrNotFound)
	case s.readOnly:
		return errReadOnly("save job")
	}
	ch := make(chan error, 1)
	w := newWrite("save job", id, j, nil, func(err error) { ch <- err }, nil)
	w.try = true
	s.queue(w)
	return <-ch
}

// Writable reports whether a write would reach Badger now: nil, or an
// error wrapping [ErrDiskFull] while the disk has no room for one (a write
// found it full and no measure has found room since, or Badger is open
// read-only on a full disk until there is room for its next files:
// fullopen.go), or the down error ([ErrUnavailable]) while Badger is not
// open (reopen.go). Below the reserve writes still go, into the reserve:
// nil. A write may still fail after a nil (another process fills the
// disk). Lock-free; safe for concurrent use.
func (s *Store) Writable() error {
	free := s.disk.free.Load()
	switch {
	case s.readOnly:
		return errReadOnly("write")
	case s.downNow.Load():
		return s.downErr()
	case free < s.disk.floor.Load():
		return fmt.Errorf("%w: no room for a write", ErrDiskFull)
	case s.fullRO.Load() && free < rotateSize:
		return fmt.Errorf("%w: the store is open read-only on a full disk", ErrDiskFull)
	}
	return nil
}
