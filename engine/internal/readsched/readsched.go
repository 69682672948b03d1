// Package readsched shares a few places of work among callers, fairly:
// the read scheduler every read of serve goes through (the API's reads and
// long-polls, the MCP tools, which call the API, and the dashboard's views
// and searches).
//
// A [Scheduler] has a fixed number of places (the reads whose work runs at
// once). A read that finds a place free, and no one waiting, takes it at
// once. Otherwise it waits in its caller's queue, and the places that
// free up go round the callers that wait, one read each in turn
// (round-robin, as the runner's rotation goes round its live jobs), each
// caller's own reads in the order they came. So a caller that floods
// reads waits behind its own: another caller's read waits for at most one
// read of each caller ahead of it in the rotation, however many the
// flooder has queued. Each caller's queue is bounded: past the bound a
// read is refused at once ([ErrQueueFull]; the API answers 429 with
// Retry-After), never queued without end.
package readsched

import (
	"container/list"
	"context"
	"errors"
	"sync"
)

// ErrQueueFull is returned by [Scheduler.Acquire] when the caller already
// has its queue's bound of reads waiting.
var ErrQueueFull = errors.New("reads queued: too many reads of this caller wait already")

// Scheduler shares its places among callers (see the package doc). The
// zero value is not usable: make one with [New]. It is safe for
// concurrent use, and starts no goroutine.
type Scheduler struct {
	places    int
	maxQueued int

	mu     sync.Mutex
	queued int64                   // reads that waited for a place (Counts)
	full   int64                   // reads refused, their caller's queue full (Counts)
	busy   int                     // places taken
	queues map[string]*callerQueue // callers with reads waiting; an entry is deleted once empty
	ring   list.List               // of *callerQueue: the callers that wait, the next to be served first
}

// callerQueue is one caller's reads waiting, in the order they came.
type callerQueue struct {
	caller  string
	waiting list.List // of *waiter
	at      *list.Element
}

// waiter is one read waiting for a place.
type waiter struct {
	ready   chan struct{} // closed once granted
	granted bool          // under mu
	q       *callerQueue
	at      *list.Element
}

// New returns a scheduler of places places (at least 1), whose callers
// may each have at most maxQueued reads waiting (at least 1).
func New(places, maxQueued int) *Scheduler {
	return &Scheduler{places: max(places, 1), maxQueued: max(maxQueued, 1), queues: make(map[string]*callerQueue)}
}

// Acquire takes a place for one read of caller's, waiting its turn if
// none is free or others wait; release it with [Scheduler.Release]. It
// returns [ErrQueueFull] at once, having taken nothing, if caller already
// has its bound of reads waiting, unless must is set: a read already
// admitted that takes its place again (after a long-poll, or between the
// parts of its answer) waits whatever the bound, in its caller's queue.
// If ctx ends first, it returns ctx's error having taken nothing, and its
// place in the queue is given up.
func (s *Scheduler) Acquire(ctx context.Context, caller string, must bool) error {
	s.mu.Lock()
	if s.busy < s.places && s.ring.Len() == 0 {
		s.busy++
		s.mu.Unlock()
		return nil
	}
	q := s.queues[caller]
	if q != nil && !must && q.waiting.Len() >= s.maxQueued {
		s.full++
		s.mu.Unlock()
		return ErrQueueFull
	}
	s.queued++
	if q == nil {
		q = &callerQueue{caller: caller}
		s.queues[caller] = q
		q.at = s.ring.PushBack(q)
	}
	w := &waiter{ready: make(chan struct{}), q: q}
	w.at = q.waiting.PushBack(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		// Granted as ctx ended: the place goes on to the next.
		s.busy--
		s.dispatch()
		return ctx.Err()
	}
	q.waiting.Remove(w.at)
	if q.waiting.Len() == 0 {
		s.drop(q)
	}
	return ctx.Err()
}

// TryAcquire takes a place only if one is free and no
// read waits; it reports whether it did. Release it as Acquire's.
func (s *Scheduler) TryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy < s.places && s.ring.Len() == 0 {
		s.busy++
		return true
	}
	return false
}

// Release gives back a place taken by [Scheduler.Acquire]: the next read
// in the rotation takes it.
func (s *Scheduler) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy > 0 {
		s.busy--
	}
	s.dispatch()
}

// Do runs fn in a place of caller's, as Acquire (without must) and
// Release around it; Acquire's error, fn not run.
func (s *Scheduler) Do(ctx context.Context, caller string, fn func()) error {
	if err := s.Acquire(ctx, caller, false); err != nil {
		return err
	}
	defer s.Release()
	fn()
	return nil
}

// Waiting is the number of reads of caller's waiting for a place.
func (s *Scheduler) Waiting(caller string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[caller]; q != nil {
		return q.waiting.Len()
	}
	return 0
}

// Counts returns how many reads had to wait for a place (queued), how
// many were refused with [ErrQueueFull] (refused), both since New, and
// how many wait now (waiting).
func (s *Scheduler) Counts() (queued, refused int64, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := s.ring.Front(); e != nil; e = e.Next() {
		waiting += e.Value.(*callerQueue).waiting.Len()
	}
	return s.queued, s.full, waiting
}

// dispatch gives free places to the reads waiting, one per caller in
// turn. Called with mu held.
func (s *Scheduler) dispatch() {
	for s.busy < s.places && s.ring.Len() > 0 {
		q := s.ring.Front().Value.(*callerQueue)
		w := q.waiting.Remove(q.waiting.Front()).(*waiter)
		w.granted = true
		s.busy++
		close(w.ready)
		if q.waiting.Len() == 0 {
			s.drop(q)
		} else {
			s.ring.MoveToBack(q.at) // its next read after every other caller's
		}
	}
}

// drop forgets q, empty. Called with mu held.
func (s *Scheduler) drop(q *callerQueue) {
	s.ring.Remove(q.at)
	delete(s.queues, q.caller)
}
