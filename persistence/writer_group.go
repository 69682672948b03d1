package persistence

import (
	"fmt"
	"time"
)

// The group commit: the writer commits queued owner writes in groups, a
// result's chunks first, then one transaction of outcome rows (see the
// top of writer.go); on a durable store each group is synced (durable.go).

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
func groupSize(ws []*ownerWrite, valueThreshold int, b groupBounds) int {
	n, size := 0, 0
	for n < len(ws) && n < b.writes {
		size += ws[n].size(valueThreshold)
		if n > 0 && size > b.bytes {
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
		if w.try && len(s.held[w.id]) > 0 {
			w.release(fmt.Errorf("%s: %w", w.op, errHeldBehind))
			continue
		}
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
	if err := s.openLocked(w.op); err != nil {
		return err
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
	err := convert(w.op, txn.Commit())
	s.diskFailed(err)
	return err
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
	if err := s.openLocked(op); err != nil {
		return err
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
