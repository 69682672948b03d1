package persistence

// Retention: the sweep of expired jobs (lease order), eviction (age
// order, while the byte total is over its cap), and the deletion of a job
// with every row and index entry of its, results included.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// deleteBudget is how many keys one write deletes at most before the sweep or
// eviction commits and starts another; it keeps each write far below Badger's
// largest transaction. A job's keys are always deleted in one write.
const deleteBudget = 4096

// Sweep deletes, oldest lease first, up to limit settled jobs whose lease is
// at or before before, with their targets. It returns how many it deleted,
// and whether more may be due: a call after one that said more goes on
// where that one stopped, past the tombstones it left, so a long sweep
// stays linear; any other call starts at the oldest lease.
func (s *Store) Sweep(before int64, limit int) (int, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := s.sweepCursor
	if start == nil {
		start, s.sweepGen = s.sweepFrom, s.indexGen // a new run
	}
	s.sweepCursor = nil
	var due []doomed
	var stale [][]byte
	var last, stop []byte
	err := s.view("sweep", func(txn *badger.Txn) error {
		return walkIndex(txn, prefixLease, start, func(k []byte, nanos int64, id [idLen]byte) (bool, error) {
			if nanos > before || len(due)+len(stale) >= limit {
				stop = bytes.Clone(k)
				return false, nil
			}
			d, err := doom(txn, id)
			switch {
			case errors.Is(err, badger.ErrKeyNotFound) || (err == nil && d.rec.Lease != nanos):
				// An entry left behind by a row written again with a
				// later lease, or by its job's deletion: not the job's.
				stale = append(stale, bytes.Clone(k))
			case err != nil:
				return false, err
			default:
				due = append(due, d)
			}
			last = append(last[:0], k...)
			return true, nil
		})
	})
	if err != nil {
		return 0, false, err
	}
	if len(stale) > 0 {
		err := s.updateLocked("sweep", func(txn *badger.Txn) (int64, error) {
			for _, k := range stale {
				if err := txn.Delete(k); err != nil {
					return 0, err
				}
			}
			return 0, nil
		})
		if err != nil {
			return 0, false, err
		}
	}
	n, err := s.deleteLocked("sweep", due)
	more := err == nil && len(due)+len(stale) == limit
	switch {
	case more:
		s.sweepCursor = append(last, 0) // the next key after the last one deleted
	case err != nil || s.sweepGen != s.indexGen:
		// A key may have been written behind the run: start where it did.
	case stop != nil:
		s.sweepFrom = stop // the first key not due: every one before it is deleted
	case last != nil:
		s.sweepFrom = append(last, 0) // the index ended
	}
	return n, more, err
}

// evictBatch is how many jobs eviction deletes under one hold of the write
// lock: other writes (targets being stored) wait for one batch at most.
const evictBatch = 64

// Evict deletes settled jobs, oldest first, while the stored bytes
// ([Store.Bytes]: every row of every job) exceed max. It returns how many it
// deleted. Unsettled jobs are never evicted, so the total may stay above
// max: by the bytes of the unsettled jobs at most, when it returns. It works in batches, letting
// other writes through between them; one Evict runs at a time (a call
// waits for the one running, then finds less to do).
//
// A job that settles while an eviction runs may be older than the jobs
// it has reached (a cancelled job settles with the creation time it had):
// each batch starts where the one before it ended, or at the oldest age
// key written since, if that is before it (evictLow). So the oldest job is
// always the next to go.
func (s *Store) Evict(max int64) (int, error) {
	if s.bytes.Load() <= max {
		return 0, nil // the common case, without waiting for a lock
	}
	s.evictMu.Lock()
	defer s.evictMu.Unlock()
	total := 0
	var from []byte
	for first := true; ; first = false {
		if s.evictGap != nil {
			s.evictGap()
		}
		n, next, err := s.evictSome(max, from, first)
		total += n
		if err != nil || next == nil {
			return total, err
		}
		from = next
	}
}

// evictSome deletes up to evictBatch of the oldest settled jobs, while the
// byte total exceeds max: from the age-index key from on, or, for the
// first batch of a run, from evictFrom; and from the oldest age key
// written since the last batch if that is before. next is where to go on,
// nil when done. When done, the next run starts where this one stopped.
func (s *Store) evictSome(max int64, from []byte, first bool) (int, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case first:
		from = s.evictFrom // every key before it is deleted; indexed moves it back
	case s.evictLow != nil && bytes.Compare(s.evictLow, from) < 0:
		from = s.evictLow
	}
	s.evictLow = nil
	if s.bytes.Load() <= max {
		return 0, nil, nil
	}
	var victims []doomed
	var last, stop []byte
	over := s.bytes.Load() - max
	err := s.view("evict", func(txn *badger.Txn) error {
		return walkIndex(txn, prefixAge, from, func(k []byte, _ int64, id [idLen]byte) (bool, error) {
			if over <= 0 || len(victims) >= evictBatch {
				stop = bytes.Clone(k)
				return false, nil
			}
			d, err := doom(txn, id)
			if err != nil {
				return false, err
			}
			victims = append(victims, d)
			last = append(last[:0], k...)
			over -= d.size
			return true, nil
		})
	})
	if err != nil {
		return 0, nil, err
	}
	n, err := s.deleteLocked("evict", victims)
	if err != nil || over <= 0 || len(victims) < evictBatch {
		if err == nil {
			// Every age key before this one is deleted: those written
			// during the run below where it stood were gone back for.
			switch {
			case stop != nil:
				s.evictFrom = stop
			case last != nil:
				s.evictFrom = append(last, 0)
			}
		}
		return n, nil, err
	}
	return n, append(last, 0), nil
}

// walkIndex calls fn for the keys of an x or a index in order, from the
// key start on (nil: the first), until fn returns false.
func walkIndex(txn *badger.Txn, prefix byte, start []byte, fn func(k []byte, nanos int64, id [idLen]byte) (bool, error)) error {
	o := badger.DefaultIteratorOptions
	o.Prefix = []byte{prefix}
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	if start == nil {
		start = o.Prefix
	}
	for it.Seek(start); it.ValidForPrefix(o.Prefix); it.Next() {
		k := it.Item().Key()
		id, ok := indexID(k)
		if !ok {
			return fmt.Errorf("index key: %w", ErrCorrupt)
		}
		more, err := fn(k, int64(binary.BigEndian.Uint64(k[1:9])), id)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// deleteLocked deletes settled jobs and every row and index entry of theirs
// (read by doom, under the same hold of s.mu), a job's keys always in one
// write, with the byte total less their bytes. s.mu is held.
func (s *Store) deleteLocked(op string, jobs []doomed) (int, error) {
	done := 0
	for len(jobs) > 0 {
		n, keys := 0, 0
		for n < len(jobs) && (n == 0 || keys+deleteKeys(&jobs[n]) <= deleteBudget) {
			keys += deleteKeys(&jobs[n])
			n++
		}
		batch := jobs[:n]
		err := s.updateLocked(op, func(txn *badger.Txn) (int64, error) {
			var freed int64
			for i := range batch {
				if err := deleteJob(txn, &batch[i].rec); err != nil {
					return 0, err
				}
				for _, k := range batch[i].rows {
					if err := txn.Delete(k); err != nil {
						return 0, err
					}
				}
				freed += batch[i].size
			}
			return -freed, nil
		})
		if err != nil {
			return done, err
		}
		done += n
		jobs = jobs[n:]
	}
	return done, nil
}

// deleteKeys is how many keys deleting d writes: its outcome and chunk rows,
// the specs, job, live, lease, age, caller, every-job and idempotency
// keys, plus one for the write's byte total, counted with each job.
func deleteKeys(d *doomed) int {
	return len(d.rows) + 9
}

// deleteJob deletes j's own keys (its row, specs, index entries, caller
// and every-job entries, and its idempotency entry if it still names j); its outcome and chunk rows are
// deleted by key (rowKeys).
func deleteJob(txn *badger.Txn, j *JobRecord) error {
	id, ok := parseID(j.ID)
	if !ok {
		return ErrCorrupt
	}
	for _, k := range [][]byte{specsKey(id), jobKey(id), liveKey(id), indexKey(prefixLease, j.Lease, id), indexKey(prefixAge, j.Created, id),
		callerKey(j.Caller, j.Created, id), everyKey(j.Created, id)} {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	// The idempotency entry goes only if it still names this job.
	item, err := txn.Get(idemKey(j.Key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return item.Value(func(v []byte) error {
		if bytes.Equal(v, id[:]) {
			return txn.Delete(idemKey(j.Key))
		}
		return nil
	})
}
