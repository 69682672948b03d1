package persistence

import (
	"bytes"
	"errors"
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
		w.release(err)
		return
	}
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
	}
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
				w.release(fmt.Errorf("%w: %w", err, errGivenUp))
				progress = true
			default:
				failed = append(failed, w)
			}
		}
		for _, w := range failed {
			if giveUp {
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
			n := groupSize(batch, s.valueThreshold)
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

// DefaultCommitDelay is how long a durable store's writer waits, at most,
// before it commits a group while other jobs are writing too
// ([Store.SetCommitDelay]).
const DefaultCommitDelay = 200 * time.Microsecond

// SetCommitDelay sets how long a durable store's writer waits for more
// writes before it commits a group (PostgreSQL's commit_delay): only when
// the recent groups held more than one write (several jobs writing), and
// only until as many writes are queued as the recent groups' peak. The
// jobs answered by the last group's sync then join the next group
// instead of making a group of their own: fewer syncs, more writes each.
// d <= 0 turns it off; the default is [DefaultCommitDelay]. A store that
// is not durable never waits. Safe to call at any time.
func (s *Store) SetCommitDelay(d time.Duration) {
	s.commitDelayNs.Store(int64(max(d, 0)) + 1)
}

// commitDelay waits, on a durable store whose recent groups held more than
// one write, until groupPeak writes are queued, or the commit delay has
// passed, or the store is closing. Writer goroutine only; t is its timer.
func (s *Store) commitDelay(t *time.Timer) {
	d := time.Duration(s.commitDelayNs.Load() - 1)
	if d < 0 {
		d = DefaultCommitDelay
	}
	if d == 0 || s.groupPeak < 2 || !s.durable.Load() {
		return
	}
	s.q.mu.Lock()
	if n := len(s.q.writes); n == 0 || n >= s.groupPeak { // nothing to wait with, or all in
		s.q.mu.Unlock()
		return
	}
	s.q.want = s.groupPeak
	select {
	case <-s.q.full: // a signal left from before
	default:
	}
	s.q.mu.Unlock()
	t.Reset(d)
	select {
	case <-s.q.full:
	case <-t.C:
	case <-s.stop:
	}
	t.Stop()
	s.q.mu.Lock()
	s.q.want = 0
	s.q.mu.Unlock()
}

// groupSize is how many writes from the front of ws go in one transaction.
func groupSize(ws []*ownerWrite, valueThreshold int) int {
	n, size := 0, 0
	for n < len(ws) && n < groupWrites {
		size += ws[n].size(valueThreshold)
		if n > 0 && size > groupBytes {
			break
		}
		n++
	}
	return n
}

// writeGroup writes ws: their results' chunks, then one transaction (see
// commitGroup), synced on a durable store, then answers each. A durable
// store's writer holds the write lock from the first chunk to the sync
// (durable.go), and takes the next group only once this one is synced.
func (s *Store) writeGroup(ws []*ownerWrite) {
	s.beginGroup()
	group := s.writeResults(ws)
	var errs []error
	if len(group) > 0 {
		errs = s.commitSynced(group)
	}
	s.endGroup()
	s.answer(group, errs)
}

// beginGroup takes the write lock for a whole group on a durable store:
// until endGroup, lockWrite and unlockWrite do nothing. Writer goroutine
// only.
func (s *Store) beginGroup() {
	if s.durable.Load() {
		s.mu.Lock()
		s.inGroup = true
	}
}

// endGroup releases what beginGroup took.
func (s *Store) endGroup() {
	if s.inGroup {
		s.inGroup = false
		s.mu.Unlock()
	}
}

// lockWrite takes the write lock for one transaction, unless the writer
// holds it for the group (beginGroup). Writer goroutine only.
func (s *Store) lockWrite() {
	if !s.inGroup {
		s.mu.Lock()
	}
}

func (s *Store) unlockWrite() {
	if !s.inGroup {
		s.mu.Unlock()
	}
}

// writeResults writes the chunks of every result in ws that is not inline,
// before the group that holds their outcome rows is committed. A write
// whose chunks fail is answered (or held: see fail) and left out, and so
// is a retried write whose job has a write held (it is held behind it,
// untried): it returns the others, in order, in ws's own array.
func (s *Store) writeResults(ws []*ownerWrite) []*ownerWrite {
	kept := ws[:0]
	for _, w := range ws {
		if w.retry && len(s.held[w.id]) > 0 {
			s.hold(w, fmt.Errorf("%s: %w", w.op, errHeldBehind))
			continue
		}
		if w.result != nil {
			if err := s.writeChunks(w); err != nil {
				s.fail(w, err)
				continue
			}
		}
		kept = append(kept, w)
	}
	return kept
}

// writeResultsInto writes the chunks of ws's results, as writeResults,
// with failed for a write whose chunks failed (no write of ws is held).
func (s *Store) writeResultsInto(ws []*ownerWrite, failed func(*ownerWrite, error)) []*ownerWrite {
	kept := ws[:0]
	for _, w := range ws {
		if w.result != nil {
			if err := s.writeChunks(w); err != nil {
				failed(w, err)
				continue
			}
		}
		kept = append(kept, w)
	}
	return kept
}

// writeChunks writes w's result in chunk rows, chunkTxnBytes to a
// transaction, taking the write lock for each transaction so that other
// writes go between them (not on a durable store: see writeGroup).
func (s *Store) writeChunks(w *ownerWrite) error {
	res, chunk := w.result, 0
	for len(res) > 0 {
		n := min(len(res), chunkTxnBytes)
		s.lockWrite()
		err := s.chunkTxn(w, chunk, res[:n])
		s.unlockWrite()
		if err != nil {
			return err
		}
		res, chunk = res[n:], chunk+(n+resultChunkSize-1)/resultChunkSize
	}
	return nil
}

// chunkTxn writes res, a run of w's result starting at chunk, in one
// transaction. s.mu is held.
func (s *Store) chunkTxn(w *ownerWrite, chunk int, res []byte) error {
	if s.db.IsClosed() {
		return fmt.Errorf("%s: %w", w.op, ErrClosed)
	}
	if err := s.checkFault(w.op); err != nil {
		return err
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	for ; len(res) > 0; chunk++ {
		n := min(len(res), resultChunkSize)
		if err := txn.Set(chunkKey(w.id, w.idx, chunk), res[:n]); err != nil {
			return convert(w.op, err)
		}
		res = res[n:]
	}
	return convert(w.op, txn.Commit())
}

// commitSynced commits ws (commitLocked) and, on a durable store, syncs
// what committed before any other commit: it returns nil when all were
// committed and synced, or each one's error. A write whose commit
// succeeded but whose sync failed is marked committed, and fails with an
// error wrapping ErrNotSynced (retried writes are held, written and synced
// again).
func (s *Store) commitSynced(ws []*ownerWrite) []error {
	s.lockWrite()
	defer s.unlockWrite()
	errs := s.commitLocked(ws)
	if !s.durable.Load() {
		return errs
	}
	some := errs == nil
	for _, err := range errs {
		some = some || err == nil
	}
	if !some {
		return errs
	}
	serr := s.syncLocked(ws[0].op)
	if serr == nil {
		for i, w := range ws {
			if errs == nil || errs[i] == nil {
				s.unsynced.remove(w.id)
			}
		}
		return errs
	}
	if errs == nil {
		errs = make([]error, len(ws))
	}
	for i, w := range ws {
		if errs[i] == nil {
			w.committed = true
			errs[i] = serr
		}
	}
	return errs
}

// answer tells each write of a committed group how it went (a retried
// write that failed is held: see fail); errs as commitSynced returns.
func (s *Store) answer(ws []*ownerWrite, errs []error) {
	for i, w := range ws {
		if errs != nil && errs[i] != nil {
			s.fail(w, errs[i])
			continue
		}
		w.release(nil)
	}
}

// commitLocked commits ws in one transaction; it returns nil when all were
// committed, or each one's error. If the group fails, each write is tried
// again in a transaction of its own, so that one write's failure (a row
// too large, say) is its alone. A retried write whose job's earlier write in ws failed is
// not tried: it fails with errHeldBehind, so that a job's writes never
// commit out of order. s.mu is held.
func (s *Store) commitLocked(ws []*ownerWrite) []error {
	if err := s.commitTxn(ws); err == nil {
		return nil
	} else if len(ws) == 1 {
		return []error{err}
	}
	errs := make([]error, len(ws))
	var failed map[[idLen]byte]bool
	for i, w := range ws {
		if w.retry && failed[w.id] {
			errs[i] = fmt.Errorf("%s: %w", w.op, errHeldBehind)
			continue
		}
		if errs[i] = s.commitTxn(ws[i : i+1]); errs[i] != nil && w.retry {
			if failed == nil {
				failed = map[[idLen]byte]bool{}
			}
			failed[w.id] = true
		}
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
		d, err := s.apply(txn, w)
		if err != nil {
			return convert(w.op, err)
		}
		delta += d
	}
	return s.commit(op, txn, delta)
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
