package persistence

// The writes that go straight to Badger, serialised by the store's lock:
// a job's creation, a Touch, and the byte total (m stored, stored.go) each
// write moves.
// The owner writes (a job's row and its targets' outcomes) go through the
// group-commit writer (writer.go); SaveJob and SaveTarget are its waiting
// forms.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/dgraph-io/badger/v4"
)

// update runs fn in one serialised write. fn returns the change to the byte
// total (stored.go), written in the same transaction and applied in memory
// once the write has committed.
func (s *Store) update(op string, fn func(txn *badger.Txn) (int64, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(op, fn)
}

func (s *Store) updateLocked(op string, fn func(txn *badger.Txn) (int64, error)) error {
	return s.counted(s.updateUncounted(op, fn))
}

func (s *Store) updateUncounted(op string, fn func(txn *badger.Txn) (int64, error)) error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if s.readOnly {
		return errReadOnly(op)
	}
	if err := s.openLocked(op); err != nil {
		return err
	}
	if err := s.checkFault(op); err != nil {
		return err
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	delta, err := fn(txn)
	if err != nil {
		return convert(op, err)
	}
	return s.commit(op, txn, delta)
}

// commit commits txn with the byte total moved by delta. s.mu is held.
func (s *Store) commit(op string, txn *badger.Txn, delta int64) error {
	if delta != 0 {
		if err := txn.Set(keyStored, binary.BigEndian.AppendUint64(nil, uint64(s.bytes.Load()+delta))); err != nil {
			return convert(op, err)
		}
	}
	if err := txn.Commit(); err != nil {
		err = convert(op, err)
		s.diskFailed(err)
		return err
	}
	s.bytes.Add(delta)
	s.diskWritten(delta)
	return nil
}

// CreateJob stores a new job and its targets' specs (URL and options) in
// one write, with its idempotency entry (which from now on names this job),
// its entries in its caller's index ([Store.CallerJobs]) and in the index
// of every job ([Store.AllJobs]), and its unsettled
// entry. j.ID must be 32 hex characters; targets are in
// idx order (targets[i] is target i, whatever its Idx), at most 0xffff.
// On a durable store ([Store.SetDurable]) the write is synced before
// CreateJob returns; if that sync fails, the error wraps [ErrNotSynced]
// and the job is taken back (deleted) before the store's next write: it
// is never read, and never comes back after a restart or a power cut.
func (s *Store) CreateJob(j *JobRecord, targets []TargetRecord) error {
	id, ok := parseID(j.ID)
	if !ok {
		return fmt.Errorf("store job: %w: bad id", ErrNotFound)
	}
	if len(targets) > 0xffff {
		return fmt.Errorf("store job: %w: %d targets", ErrTooLarge, len(targets))
	}
	durable := s.durable.Load()
	if durable {
		s.unsynced.add(id)
	}
	var size int64
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.updateLocked("store job", func(txn *badger.Txn) (int64, error) {
		row := encodeJob(j)
		if err := txn.Set(jobKey(id), row); err != nil {
			return 0, err
		}
		size = int64(len(row))
		if len(targets) > 0 {
			specs := encodeSpecs(targets)
			if err := txn.Set(specsKey(id), specs); err != nil {
				return 0, err
			}
			size += int64(len(specs))
		}
		if err := txn.Set(idemKey(j.Key), id[:]); err != nil {
			return 0, err
		}
		if err := txn.Set(callerKey(j.Caller, j.Created, id), nil); err != nil {
			return 0, err
		}
		if err := txn.Set(everyKey(j.Created, id), nil); err != nil {
			return 0, err
		}
		if j.Settled {
			s.indexed(j.Lease, j.Created, id)
			return size, setSettledIndexes(txn, id, j.Lease, j.Created)
		}
		return size, txn.Set(liveKey(id), nil)
	})
	committed := err == nil
	if committed {
		err = s.counted(s.syncLocked("store job"))
	}
	if committed && err != nil && s.undoCreateLocked(id, j, len(targets) > 0, size) != nil {
		// Stored, not synced, and not taken back: the job stays hidden
		// from readers and from reuse until a write of its own is synced
		// (commitSynced): its creation was never acknowledged.
		return err
	}
	if durable {
		s.unsynced.remove(id) // synced, or not stored
	}
	return err
}

// undoCreateLocked takes back a job's creation whose sync failed: it
// deletes the rows CreateJob wrote (size bytes of them), in the memtable
// the creation went to, before the store reopens Badger (reopen.go): the
// flush as Badger closes stores the deletion with the rows, so that the
// job never comes back, whatever the disk kept of the failed write. s.mu
// is held.
func (s *Store) undoCreateLocked(id [idLen]byte, j *JobRecord, specs bool, size int64) error {
	if f := s.fault.Load(); f != nil { // SetWriteFault's disk (not the reserve's gate: tombstones only)
		if err := (*f)(); err != nil {
			return err
		}
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	keys := [][]byte{jobKey(id), idemKey(j.Key), callerKey(j.Caller, j.Created, id), everyKey(j.Created, id)}
	if specs {
		keys = append(keys, specsKey(id))
	}
	if j.Settled {
		keys = append(keys, indexKey(prefixLease, j.Lease, id), indexKey(prefixAge, j.Created, id))
	} else {
		keys = append(keys, liveKey(id))
	}
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return s.commit("take back job", txn, -size)
}

// indexed notes x and a keys about to be written (s.mu is held): a sweep or
// an eviction that would start past one starts at it instead.
func (s *Store) indexed(lease, created int64, id [idLen]byte) {
	s.indexGen++
	if k := indexKey(prefixLease, lease, id); s.sweepFrom != nil && bytes.Compare(k, s.sweepFrom) < 0 {
		s.sweepFrom = k
	}
	k := indexKey(prefixAge, created, id)
	if s.evictFrom != nil && bytes.Compare(k, s.evictFrom) < 0 {
		s.evictFrom = k
	}
	if s.evictLow == nil || bytes.Compare(k, s.evictLow) < 0 {
		s.evictLow = k
	}
}

func setSettledIndexes(txn *badger.Txn, id [idLen]byte, lease, created int64) error {
	if err := txn.Set(indexKey(prefixLease, lease, id), nil); err != nil {
		return err
	}
	return txn.Set(indexKey(prefixAge, created, id), nil)
}

// SaveJob writes the new row of an unsettled job: it is for the job's owner
// only (its actor, or New reaping), which holds the row in memory. A settled
// j settles the job: from then on it may be swept or evicted, and only
// [Store.Touch] writes it. It waits for the group commit that takes it (see
// writer.go).
func (s *Store) SaveJob(j *JobRecord) error {
	return s.wait("save job", j.ID, j, nil)
}

// SaveTarget writes a target's outcome (its Status, Result, Error and Hint)
// and its unsettled job's new row in one write; like [Store.SaveJob] it is
// for the job's owner. j.ResultBytes must already count t.Result. A result
// over [MaxResultSize] is refused with an error wrapping [ErrTooLarge];
// one over 512 bytes is written in chunks first (see writer.go), and the
// outcome and the row commit once they are all written.
func (s *Store) SaveTarget(j *JobRecord, t *TargetRecord) error {
	return s.wait("save target", j.ID, j, t)
}

// Touch moves a settled job's lease to lease if that is later; it reports
// false for an unknown id. An unsettled job's row belongs to its actor,
// which takes Touches itself; Touch on one only sets its lease. Touch
// brings back a settled job past its expiry that the sweep has not deleted
// yet: [Store.TouchUnexpired] does not.
func (s *Store) Touch(idHex string, lease int64) (bool, error) {
	return s.TouchUnexpired(idHex, lease, math.MinInt64)
}

// TouchUnexpired is [Store.Touch], except that a settled job whose stored
// lease is at or before minLease (expired: the caller passes now − TTL) is
// left as it is, for the sweep, and reported false like an unknown one.
// The check and the write are one transaction: no sweep, Touch or
// settling write comes between them. An unsettled job never expires.
func (s *Store) TouchUnexpired(idHex string, lease, minLease int64) (bool, error) {
	id, ok := parseID(idHex)
	if !ok {
		return false, nil
	}
	found := true
	err := s.update("touch job", func(txn *badger.Txn) (int64, error) {
		j, before, err := getJobSized(txn, id)
		if errors.Is(err, badger.ErrKeyNotFound) || (err == nil && j.Settled && j.Lease <= minLease) {
			found = false
			return 0, nil
		}
		if err != nil || j.Lease >= lease {
			return 0, err
		}
		if j.Settled {
			s.indexed(lease, j.Created, id)
			if err := txn.Delete(indexKey(prefixLease, j.Lease, id)); err != nil {
				return 0, err
			}
			if err := txn.Set(indexKey(prefixLease, lease, id), nil); err != nil {
				return 0, err
			}
		}
		j.Lease = lease
		row := encodeJob(&j)
		return int64(len(row)) - before, txn.Set(jobKey(id), row)
	})
	return found && err == nil, err
}
