package persistence

import (
	"bytes"
	"fmt"
	"sync"
	"time"

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
//
// A result too long to be inline in its outcome row (records.go) is
// written first, in chunk rows, in transactions of their own (chunkTxnBytes
// at most each: a 16 MiB result does not fit one transaction in memory),
// then its outcome row goes in the group commit: the outcome row is the
// commit point. The chunks of each write in a group are written before the
// group is committed, by the same goroutine, so the order holds.
//
// A job's owner makes its writes retried ([Store.SaveTargetRetried],
// [Store.SaveOutcomeRetried], [Store.SaveJobRetried]): one that fails for a
// reason that may pass (the disk: anything but the store closing, a row too
// large, a bad id) is held by the writer and tried again every retry wait
// ([Store.SetRetryWait]) until it commits, and every later retried write of
// the same job is held behind it, so a job's writes still commit in the
// order they were made. The owner is answered at once that its write is
// being retried (an error wrapping [ErrRetrying]) and goes on; it hears
// again, late, once the write has committed, or has been given up (the
// store closing, [Store.AbandonRetries]). The held writes are the writer's
// alone: no lock.
//
// On a durable store ([Store.SetDurable]) each group is synced to stable
// storage after its commit and before its writes are answered, and the
// writer takes the next group only then: see durable.go.

// Batch bounds: a group commit takes at most groupWrites writes and about
// groupBytes of rows, far below Badger's largest transaction (15% of a
// memtable: 2.4 MiB on disk).
const (
	groupWrites = 256
	groupBytes  = 1 << 20
	// chunkTxnBytes is the most result bytes one chunk transaction
	// writes: 8 chunks, under half of the in-memory store's transaction
	// cap (15% of its 64 MiB memtable). On disk chunks go to the value
	// log and count only a pointer there.
	chunkTxnBytes = 4 << 20
)

// ownerWrite is one queued owner write: a job's encoded row (nil: not
// written) and, when hasOutcome, one target's encoded outcome. Its keys and
// values are slices of buf; writes are pooled with their buffers, as Badger
// keeps no reference to a key or value once its commit has returned.
type ownerWrite struct {
	op          string
	id          [idLen]byte
	buf         []byte
	rowKey, row []byte // row nil: the row is not written
	outKey      []byte
	outcome     []byte
	hasOutcome  bool
	idx         int    // the outcome's target
	result      []byte // a result that is not inline: its chunks are written first
	settled     bool   // the row settles the job: move it to the x and a indexes
	lease       int64
	created     int64
	delta       int64 // bytes the outcome adds to the byte total: its row, and its chunks
	done        func(error)
	// A retried write is answered through doneR instead (done is nil): at
	// once if it is held (late false), then when it commits or is given up
	// (late true); late says the first answer was ErrRetrying.
	doneR WriteDone
	retry bool
	late  bool
	// try: an owner write that is never held (SaveJobNow): answered with
	// its error, and refused while an earlier write of its job is held.
	try bool
	// committed: a group committed the write but its sync failed
	// (durable.go); the byte total counts its outcome already.
	committed bool
}

// WriteDone is how a retried owner write answers: err is nil once it has
// committed; on its first answer (late false) an error wrapping
// [ErrRetrying] says the writer holds it and will answer again (late true)
// with nil, or with the error that made it give up. Any other error is
// final. On a durable store a held write has no first answer of its own:
// it is answered once (late false), when it has been written and synced,
// or given up. It is called from the store's writer goroutine (or the caller's,
// for a write refused before it is queued) and must not block, nor write
// to the store (on a durable store it may be called with the store's
// write lock held).
type WriteDone func(err error, late bool)

var writePool = sync.Pool{New: func() any { return new(ownerWrite) }}

// maxPooledBuf: a write whose buffer grew past this (a large result) is not
// kept for reuse.
const maxPooledBuf = 16 << 10

// newWrite encodes j's row (nil: none) and t's outcome (nil: none) for the
// queue, and copies a result that goes in chunks: j and t may change as
// soon as it returns.
func newWrite(op string, id [idLen]byte, j *JobRecord, t *TargetRecord, done func(error), doneR WriteDone) *ownerWrite {
	w := writePool.Get().(*ownerWrite)
	w.op, w.id, w.done, w.doneR, w.retry = op, id, done, doneR, doneR != nil
	size := 0
	if t != nil {
		size += targetKeyLen + outcomeSize(t)
	}
	if j != nil {
		size += jobKeyLen + jobSize(j)
	}
	b := w.buf[:0]
	if cap(b) < size {
		b = make([]byte, 0, size)
	}
	var outKeyEnd, outEnd, rowKeyEnd int
	if t != nil {
		b = appendOutcomeKey(b, id, t.Idx)
		outKeyEnd = len(b)
		b = appendOutcome(b, t)
		outEnd = len(b)
		w.hasOutcome, w.delta, w.idx = true, int64(outEnd-outKeyEnd), t.Idx
		if size := int64(len(t.Result)); chunkCount(size) > 0 {
			w.result = bytes.Clone(t.Result) // t may change once newWrite returns
			w.delta += size
		}
	}
	if j != nil {
		b = appendJobKey(b, id)
		rowKeyEnd = len(b)
		b = appendJob(b, j)
		w.settled, w.lease, w.created = j.Settled, j.Lease, j.Created
	}
	w.buf = b
	if t != nil {
		w.outKey, w.outcome = b[:outKeyEnd:outKeyEnd], b[outKeyEnd:outEnd:outEnd]
	}
	if j != nil {
		w.rowKey, w.row = b[outEnd:rowKeyEnd:rowKeyEnd], b[rowKeyEnd:]
	}
	return w
}

// release tells the write's maker how it went and pools it.
func (w *ownerWrite) release(err error) {
	done, doneR, late := w.done, w.doneR, w.late
	buf := w.buf
	*w = ownerWrite{}
	if cap(buf) <= maxPooledBuf {
		w.buf = buf[:0]
		writePool.Put(w)
	}
	if doneR != nil {
		doneR(err, late)
		return
	}
	done(err)
}

// size is what the write adds to a transaction, roughly (Badger's own
// estimate adds a few bytes per entry; values past the value threshold
// count only a pointer).
func (w *ownerWrite) size(valueThreshold int) int {
	n := 0
	if w.row != nil {
		n += 2*(jobKeyLen+16) + len(w.row)
	}
	if w.hasOutcome {
		if len(w.outcome) >= valueThreshold {
			n += targetKeyLen + 32
		} else {
			n += targetKeyLen + 16 + len(w.outcome)
		}
	}
	return n
}

// apply puts the write's entries in txn: the outcome, the row, and for a
// row that settles the job its move from the l index to x and a (only the
// owner writes an unsettled job's row, so no index needs reading first).
// It returns the change to the byte total: the outcome's bytes, and the
// row's change in length, from a point read of the row it replaces (in
// txn, so a row written earlier in the same group counts). s.mu is held.
func (s *Store) apply(txn *badger.Txn, w *ownerWrite) (int64, error) {
	delta := int64(0)
	if w.hasOutcome {
		if err := txn.Set(w.outKey, w.outcome); err != nil {
			return 0, err
		}
		if !w.committed {
			delta = w.delta
		}
	}
	if w.row == nil {
		return delta, nil
	}
	before, err := rowLen(txn, w.rowKey)
	if err != nil {
		return 0, err
	}
	delta += int64(len(w.row)) - before
	if err := txn.Set(w.rowKey, w.row); err != nil {
		return 0, err
	}
	if !w.settled {
		return delta, nil
	}
	s.indexed(w.lease, w.created, w.id)
	if err := txn.Delete(liveKey(w.id)); err != nil {
		return 0, err
	}
	return delta, setSettledIndexes(txn, w.id, w.lease, w.created)
}

// queue hands w to the writer goroutine; w.done is called once, from that
// goroutine, when w is committed or has failed. After Close it is called at
// once with ErrClosed.
func (s *Store) queue(w *ownerWrite) {
	s.q.mu.Lock()
	if s.q.closed {
		s.q.mu.Unlock()
		w.release(fmt.Errorf("%s: %w", w.op, ErrClosed))
		return
	}
	s.q.writes = append(s.q.writes, w)
	if s.q.want > 0 && len(s.q.writes) >= s.q.want {
		s.q.want = 0
		select {
		case s.q.full <- struct{}{}:
		default:
		}
	}
	s.q.mu.Unlock()
	select {
	case s.q.wake <- struct{}{}:
	default:
	}
}

// writeLoop is the writer goroutine: it commits the queued owner writes in
// groups until Close, tries the held ones again every retry wait, then
// commits what is left (the held writes tried once more) and refuses the
// rest.
func (s *Store) writeLoop() {
	defer s.wg.Done()
	var spare []*ownerWrite
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	armed := false
	for {
		select {
		case <-s.q.wake:
			s.commitDelay(delay)
		case <-retry.C:
			armed = false
			s.retryHeld(false)
		case done := <-s.q.abandon:
			s.retryHeld(true)
			close(done)
		case <-s.stop:
			s.stopping = true
		}
		s.q.mu.Lock()
		batch := s.q.writes
		s.q.writes = spare[:0]
		s.q.closed = s.stopping
		s.q.mu.Unlock()
		if len(batch) > 0 {
			// The groups' recent peak, decaying by an eighth a group.
			s.groupPeak = max(len(batch), s.groupPeak-(s.groupPeak+7)/8)
		}
		for len(batch) > 0 {
			n := groupSize(batch, s.valueThreshold, s.group)
			s.writeGroup(batch[:n])
			clear(batch[:n])
			batch = batch[n:]
		}
		spare = batch[:0:cap(batch)]
		if s.stopping {
			s.retryHeld(true) // once more; what fails is answered ErrClosed
			retry.Stop()
			return
		}
		if len(s.held) > 0 && !armed {
			retry.Reset(s.retryEvery())
			armed = true
		}
	}
}

// SaveTargetAsync is [Store.SaveTarget] without the wait: j and t are
// encoded before it returns, and done is called once with the write's
// outcome, from the store's writer goroutine (it must not block). Writes
// are committed in the order they were made.
func (s *Store) SaveTargetAsync(j *JobRecord, t *TargetRecord, done func(error)) {
	s.write("save target", j.ID, j, t, done, nil)
}

// SaveOutcomeAsync writes one target's outcome of the unsettled job jobID,
// and not the job's row; otherwise as [Store.SaveTargetAsync]. While a job
// is unsettled its outcome rows are the truth for its progress: the readers
// of its row ([Store.Job], [Store.JobWithTargets], [Store.Unsettled], [Store.Jobs])
// count TargetsDone, TargetsFailed and ResultBytes from them, and take the
// latest t.Stored as its lease if that is later. The write that settles the
// job writes its row ([Store.SaveTargetAsync] or [Store.SaveJob]).
func (s *Store) SaveOutcomeAsync(jobID string, t *TargetRecord, done func(error)) {
	s.write("save outcome", jobID, nil, t, done, nil)
}

// write queues an owner write of job jobID's row j and outcome t (either
// may be nil), answered through done, or through doneR (retried) if it is
// not nil.
func (s *Store) write(op, jobID string, j *JobRecord, t *TargetRecord, done func(error), doneR WriteDone) {
	var err error
	id, ok := parseID(jobID)
	switch {
	case !ok:
		err = fmt.Errorf("%s: %w", op, ErrNotFound)
	case t != nil && len(t.Result) > MaxResultSize:
		err = fmt.Errorf("%s: %w: a result of %d bytes", op, ErrTooLarge, len(t.Result))
	case s.readOnly: // no writer goroutine runs
		err = errReadOnly(op)
	default:
		s.queue(newWrite(op, id, j, t, done, doneR))
		return
	}
	if doneR != nil {
		doneR(err, false)
		return
	}
	done(err)
}

// SaveOutcome is [Store.SaveOutcomeAsync] with the wait.
func (s *Store) SaveOutcome(jobID string, t *TargetRecord) error {
	return s.wait("save outcome", jobID, nil, t)
}

// wait makes an owner write and waits for it.
func (s *Store) wait(op, jobID string, j *JobRecord, t *TargetRecord) error {
	ch := make(chan error, 1)
	s.write(op, jobID, j, t, func(err error) { ch <- err }, nil)
	return <-ch
}

// writeQueue is where owner writes wait for the writer goroutine.
type writeQueue struct {
	mu      sync.Mutex
	writes  []*ownerWrite
	closed  bool               // the writer has stopped: refuse new writes
	wake    chan struct{}      // capacity 1: there are writes
	abandon chan chan struct{} // AbandonRetries
	// want, when not 0, is how many queued writes end the writer's commit
	// delay (commitDelay): queue signals full (capacity 1) on reaching it.
	want int
	full chan struct{}
}
