package persistence

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// The owner writes (a job's row, with at most one target outcome) go through
// one writer goroutine that commits whatever has queued up since its last
// commit in one Badger transaction: a group commit. One transaction costs
// Badger about as much for one row as for a hundred (the write request, the
// hand-off to its writer goroutine, the commit marker, the byte total), so
// under load each target pays a fraction of it. A job actor has at most one
// write queued at a time and writes are committed in the order they were
// queued, so a job's rows are never written out of order.

// Batch bounds: a group commit takes at most groupWrites writes and about
// groupBytes of rows, far below Badger's largest transaction (15% of a
// memtable: 2.4 MiB on disk).
const (
	groupWrites = 256
	groupBytes  = 1 << 20
)

// ownerWrite is one queued owner write: a job's encoded row (nil: not
// written) and, when idx ≥ 0, one target's encoded outcome.
type ownerWrite struct {
	op      string
	id      [idLen]byte
	row     []byte
	settled bool // the row settles the job: move it to the x and a indexes
	lease   int64
	created int64
	idx     int // the outcome's target, -1 for none
	outcome []byte
	delta   int64 // result bytes the outcome adds
	done    func(error)
}

// size is what the write adds to a transaction, roughly (Badger's own
// estimate adds a few bytes per entry; values past the value threshold
// count only a pointer).
func (w *ownerWrite) size() int {
	n := 0
	if w.row != nil {
		n += 2*(jobKeyLen+16) + len(w.row)
	}
	if w.idx >= 0 {
		if len(w.outcome) > valueThreshold {
			n += targetKeyLen + 32
		} else {
			n += targetKeyLen + 16 + len(w.outcome)
		}
	}
	return n
}

// apply puts the write's entries in txn: the outcome, the row, and for a
// row that settles the job its move from the l index to x and a (only the
// owner writes an unsettled job's row, so nothing needs reading first).
// s.mu is held.
func (s *Store) apply(txn *badger.Txn, w *ownerWrite) error {
	if w.idx >= 0 {
		if err := txn.Set(targetKey(prefixOutcome, w.id, w.idx), w.outcome); err != nil {
			return err
		}
	}
	if w.row == nil {
		return nil
	}
	if err := txn.Set(jobKey(w.id), w.row); err != nil {
		return err
	}
	if !w.settled {
		return nil
	}
	s.indexed(w.lease, w.created, w.id)
	if err := txn.Delete(liveKey(w.id)); err != nil {
		return err
	}
	return setSettledIndexes(txn, w.id, w.lease, w.created)
}

// newOwnerWrite encodes j's row (and t's outcome, if t is not nil) for the
// queue: j and t may change as soon as it returns.
func newOwnerWrite(op string, j *JobRecord, t *TargetRecord, done func(error)) (*ownerWrite, error) {
	id, ok := parseID(j.ID)
	if !ok {
		return nil, fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	w := &ownerWrite{op: op, id: id, row: encodeJob(j), settled: j.Settled, lease: j.Lease, created: j.Created, idx: -1, done: done}
	if t != nil {
		w.idx, w.outcome, w.delta = t.Idx, encodeOutcome(t), int64(len(t.Result))
	}
	return w, nil
}

// queue hands w to the writer goroutine; w.done is called once, from that
// goroutine, when w is committed or has failed. After Close it is called at
// once with ErrClosed.
func (s *Store) queue(w *ownerWrite) {
	s.q.mu.Lock()
	if s.q.closed {
		s.q.mu.Unlock()
		w.done(fmt.Errorf("%s: %w", w.op, ErrClosed))
		return
	}
	s.q.writes = append(s.q.writes, w)
	s.q.mu.Unlock()
	select {
	case s.q.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the writer goroutine: it commits the queued owner writes in
// groups until Close, then commits what is left and refuses the rest.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	var spare []*ownerWrite
	for {
		stopping := false
		select {
		case <-s.q.wake:
		case <-s.stop:
			stopping = true
		}
		s.q.mu.Lock()
		batch := s.q.writes
		s.q.writes = spare[:0]
		s.q.closed = stopping
		s.q.mu.Unlock()
		for len(batch) > 0 {
			n := groupSize(batch)
			s.commitGroup(batch[:n])
			clear(batch[:n])
			batch = batch[n:]
		}
		spare = batch[:0:cap(batch)]
		if stopping {
			return
		}
	}
}

// groupSize is how many writes from the front of ws go in one transaction.
func groupSize(ws []*ownerWrite) int {
	n, size := 0, 0
	for n < len(ws) && n < groupWrites {
		size += ws[n].size()
		if n > 0 && size > groupBytes {
			break
		}
		n++
	}
	return n
}

// commitGroup commits ws in one transaction and tells each how it went. If
// the group fails, each write is tried again in a transaction of its own,
// so that one write's failure (a row too large, say) is its alone.
func (s *Store) commitGroup(ws []*ownerWrite) {
	s.mu.Lock()
	errs := s.commitLocked(ws)
	s.mu.Unlock()
	for i, w := range ws {
		var err error
		if errs != nil {
			err = errs[i]
		}
		w.done(err)
	}
}

// commitLocked commits ws; it returns nil when all were committed, or each
// one's error. s.mu is held.
func (s *Store) commitLocked(ws []*ownerWrite) []error {
	if err := s.commitTxn(ws); err == nil {
		return nil
	} else if len(ws) == 1 {
		return []error{err}
	}
	errs := make([]error, len(ws))
	for i := range ws {
		errs[i] = s.commitTxn(ws[i : i+1])
	}
	return errs
}

// commitTxn commits ws in one transaction, with the new byte total.
func (s *Store) commitTxn(ws []*ownerWrite) error {
	op := ws[0].op
	if s.db.IsClosed() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	for _, w := range ws {
		if err := s.checkFault(w.op); err != nil {
			return err
		}
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	var delta int64
	for _, w := range ws {
		if err := s.apply(txn, w); err != nil {
			return convert(w.op, err)
		}
		delta += w.delta
	}
	if delta != 0 {
		if err := txn.Set(keyBytes, binary.BigEndian.AppendUint64(nil, uint64(s.bytes.Load()+delta))); err != nil {
			return convert(op, err)
		}
	}
	if err := txn.Commit(); err != nil {
		return convert(op, err)
	}
	s.bytes.Add(delta)
	return nil
}

// SaveJobAsync is [Store.SaveJob] without the wait: j is encoded before it
// returns, and done is called once with the write's outcome, from the
// store's writer goroutine (it must not block). Writes are committed in the
// order they were made.
func (s *Store) SaveJobAsync(j *JobRecord, done func(error)) {
	w, err := newOwnerWrite("save job", j, nil, done)
	if err != nil {
		done(err)
		return
	}
	s.queue(w)
}

// SaveTargetAsync is [Store.SaveTarget] without the wait, as
// [Store.SaveJobAsync].
func (s *Store) SaveTargetAsync(j *JobRecord, t *TargetRecord, done func(error)) {
	w, err := newOwnerWrite("save target", j, t, done)
	if err != nil {
		done(err)
		return
	}
	s.queue(w)
}

// wait queues w and waits for it.
func (s *Store) wait(op string, j *JobRecord, t *TargetRecord) error {
	ch := make(chan error, 1)
	w, err := newOwnerWrite(op, j, t, func(err error) { ch <- err })
	if err != nil {
		return err
	}
	s.queue(w)
	return <-ch
}

// writeQueue is where owner writes wait for the writer goroutine.
type writeQueue struct {
	mu     sync.Mutex
	writes []*ownerWrite
	closed bool          // the writer has stopped: refuse new writes
	wake   chan struct{} // capacity 1: there are writes
}

// SaveOutcomeAsync writes one target's outcome of the unsettled job jobID,
// and not the job's row; otherwise as [Store.SaveTargetAsync]. While a job
// is unsettled its outcome rows are the truth for its progress: the readers
// of its row ([Store.Job], [Store.JobWithTargets], [Store.Unsettled], [Store.Jobs])
// count TargetsDone, TargetsFailed and ResultBytes from them, and take the
// latest t.Stored as its lease if that is later. The write that settles the
// job writes its row (SaveTargetAsync or SaveJobAsync).
func (s *Store) SaveOutcomeAsync(jobID string, t *TargetRecord, done func(error)) {
	id, ok := parseID(jobID)
	if !ok {
		done(fmt.Errorf("save outcome: %w", ErrNotFound))
		return
	}
	s.queue(&ownerWrite{op: "save outcome", id: id, idx: t.Idx, outcome: encodeOutcome(t), delta: int64(len(t.Result)), done: done})
}
