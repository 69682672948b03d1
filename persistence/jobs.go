package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// deleteBudget is how many keys one write deletes at most before the sweep or
// eviction commits and starts another; it keeps each write far below Badger's
// largest transaction. A job's keys are always deleted in one write.
const deleteBudget = 4096

// convert turns Badger's errors into the store's own.
func convert(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt), errors.Is(err, ErrClosed), errors.Is(err, ErrTooLarge):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, badger.ErrKeyNotFound):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case errors.Is(err, badger.ErrTxnTooBig), errors.Is(err, badger.ErrValueLogSize),
		strings.Contains(err.Error(), "exceeded") && strings.Contains(err.Error(), "limit"):
		return fmt.Errorf("%s: %w", op, ErrTooLarge)
	case errors.Is(err, badger.ErrDBClosed), errors.Is(err, badger.ErrBlockedWrites):
		return fmt.Errorf("%s: %w", op, ErrClosed)
	default:
		// Keep the first line of the text, not the type: Badger's texts
		// can go on with keys and values.
		return fmt.Errorf("%s: %s", op, firstLine(err.Error()))
	}
}

// update runs fn in one serialised write. fn returns the change to the byte
// total, applied once the write has committed.
func (s *Store) update(op string, fn func(txn *badger.Txn) (int64, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(op, fn)
}

func (s *Store) updateLocked(op string, fn func(txn *badger.Txn) (int64, error)) error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
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

func (s *Store) view(op string, fn func(txn *badger.Txn) error) error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	return convert(op, s.db.View(fn))
}

func (s *Store) loadBytes() error {
	return s.view("load byte total", func(txn *badger.Txn) error {
		item, err := txn.Get(keyBytes)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return ErrCorrupt
			}
			s.bytes.Store(int64(binary.BigEndian.Uint64(v)))
			return nil
		})
	})
}

// Bytes returns the stored result bytes in all.
func (s *Store) Bytes() int64 {
	return s.bytes.Load()
}

// CreateJob stores a new job and its targets' specs (URL and options) in
// one write, with its idempotency entry (which from now on names this job)
// and its unsettled entry. j.ID must be 32 hex characters; targets are in
// idx order (targets[i] is target i, whatever its Idx), at most 0xffff.
func (s *Store) CreateJob(j *JobRecord, targets []TargetRecord) error {
	id, ok := parseID(j.ID)
	if !ok {
		return fmt.Errorf("store job: %w: bad id", ErrNotFound)
	}
	if len(targets) > 0xffff {
		return fmt.Errorf("store job: %w: %d targets", ErrTooLarge, len(targets))
	}
	return s.update("store job", func(txn *badger.Txn) (int64, error) {
		if err := txn.Set(jobKey(id), encodeJob(j)); err != nil {
			return 0, err
		}
		if len(targets) > 0 {
			if err := txn.Set(specsKey(id), encodeSpecs(targets)); err != nil {
				return 0, err
			}
		}
		if err := txn.Set(idemKey(j.Key), id[:]); err != nil {
			return 0, err
		}
		if j.Settled {
			s.indexed(j.Lease, j.Created, id)
			return j.ResultBytes, setSettledIndexes(txn, id, j.Lease, j.Created)
		}
		return j.ResultBytes, txn.Set(liveKey(id), nil)
	})
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

func getJob(txn *badger.Txn, id [idLen]byte) (JobRecord, error) {
	item, err := txn.Get(jobKey(id))
	if err != nil {
		return JobRecord{}, err
	}
	var j JobRecord
	err = item.Value(func(v []byte) error {
		j, err = decodeJob(id, v)
		return err
	})
	return j, err
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
		j, err := getJob(txn, id)
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
		return 0, txn.Set(jobKey(id), encodeJob(&j))
	})
	return found && err == nil, err
}

// Job returns a stored job, or an error wrapping [ErrNotFound]. It is
// cheap whatever the job holds: a settled job is one point read of its row;
// an unsettled one's progress is counted from its outcome rows, which hold
// each result's length, never the result (a result of a version 2 row
// excepted).
func (s *Store) Job(idHex string) (JobRecord, error) {
	id, ok := parseID(idHex)
	if !ok {
		return JobRecord{}, fmt.Errorf("read job: %w", ErrNotFound)
	}
	var j JobRecord
	err := s.view("read job", func(txn *badger.Txn) error {
		var err error
		if j, err = getJob(txn, id); err != nil {
			return err
		}
		return recount(txn, id, &j)
	})
	return j, err
}

// JobWithTargets returns a stored job and its targets in idx order, with
// their results, read from one snapshot, or an error wrapping
// [ErrNotFound].
func (s *Store) JobWithTargets(idHex string) (JobRecord, []TargetRecord, error) {
	return s.jobWithTargets("read job", idHex, true)
}

// TargetStatuses returns a stored job and its targets in idx order, read
// from one snapshot as [Store.JobWithTargets] does, but without their
// results: each target's Result is nil and its ResultSize says how long
// the result is. It reads no result, however long: it is for polling. An
// unknown job gives an error wrapping [ErrNotFound].
func (s *Store) TargetStatuses(idHex string) (JobRecord, []TargetRecord, error) {
	return s.jobWithTargets("read target statuses", idHex, false)
}

func (s *Store) jobWithTargets(op, idHex string, withResults bool) (JobRecord, []TargetRecord, error) {
	id, ok := parseID(idHex)
	if !ok {
		return JobRecord{}, nil, fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	var j JobRecord
	var ts []TargetRecord
	err := s.view(op, func(txn *badger.Txn) error {
		var err error
		if j, err = getJob(txn, id); err != nil {
			return err
		}
		if ts, err = readTargets(txn, id, withResults); err != nil {
			return err
		}
		if !j.Settled {
			j.TargetsDone, j.TargetsFailed, j.ResultBytes = 0, 0, 0
			for i := range ts {
				if ts[i].Status != TargetPending {
					countOutcome(&j, ts[i].Status, ts[i].ResultSize, ts[i].Stored)
				}
			}
		}
		return nil
	})
	return j, ts, err
}

// recount sets an unsettled job's progress from its outcome rows (see
// [Store.SaveOutcomeAsync]); a settled job's row is complete. It reads no
// result.
func recount(txn *badger.Txn, id [idLen]byte, j *JobRecord) error {
	if j.Settled {
		return nil
	}
	j.TargetsDone, j.TargetsFailed, j.ResultBytes = 0, 0, 0
	return walkOutcomes(txn, id, func(_ int, v []byte) error {
		o, err := parseOutcome(v)
		if err != nil {
			return err
		}
		countOutcome(j, o.status, o.size, o.stored)
		return nil
	})
}

// countOutcome counts one stored outcome in its unsettled job's progress.
func countOutcome(j *JobRecord, status string, size, stored int64) {
	j.TargetsDone++
	if status == TargetFailed {
		j.TargetsFailed++
	}
	j.ResultBytes += size
	j.Lease = max(j.Lease, stored)
}

// Targets returns a job's targets in idx order, with their results, or an
// error wrapping [ErrNotFound] when it has none.
func (s *Store) Targets(idHex string) ([]TargetRecord, error) {
	id, ok := parseID(idHex)
	if !ok {
		return nil, fmt.Errorf("read targets: %w", ErrNotFound)
	}
	var ts []TargetRecord
	err := s.view("read targets", func(txn *badger.Txn) error {
		var err error
		ts, err = readTargets(txn, id, true)
		if err == nil && len(ts) == 0 {
			err = ErrNotFound
		}
		return err
	})
	return ts, err
}

// readTargets reads a job's targets: its specs row, then its outcome rows,
// then, withResults, the chunks of the results that are not inline. A job
// without a specs row has no targets.
func readTargets(txn *badger.Txn, id [idLen]byte, withResults bool) ([]TargetRecord, error) {
	ts, err := getSpecs(txn, id)
	if errors.Is(err, badger.ErrKeyNotFound) {
		ts, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	var chunked []int // the targets whose result is in chunks
	err = walkOutcomes(txn, id, func(idx int, v []byte) error {
		if idx >= len(ts) {
			return fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
		o, err := parseOutcome(v)
		if err != nil {
			return err
		}
		o.fill(&ts[idx], withResults)
		if o.chunked && withResults {
			chunked = append(chunked, idx)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(chunked) == 0 {
		return ts, nil
	}
	if err := readResults(txn, id, ts, chunked); err != nil {
		return nil, err
	}
	return ts, nil
}

// readResults reads the chunked results of targets chunked (in idx order)
// of a job in one walk of its b keys, each into one slice allocated at its
// size: one iterator, not a point read per chunk. Chunks no outcome needs
// (left by a failed write) are passed over.
func readResults(txn *badger.Txn, id [idLen]byte, ts []TargetRecord, chunked []int) error {
	for _, idx := range chunked {
		ts[idx].Result = make([]byte, ts[idx].ResultSize)
	}
	o := badger.IteratorOptions{Prefix: resultsPrefix(id)}
	it := txn.NewIterator(o)
	defer it.Close()
	k := chunkKey(id, 0, 0)
	for _, idx := range chunked {
		res := ts[idx].Result
		n := chunkCount(int64(len(res)))
		binary.BigEndian.PutUint16(k[1+idLen:], uint16(idx))
		binary.BigEndian.PutUint16(k[1+idLen+2:], 0)
		if !it.Valid() || !bytes.Equal(it.Item().Key(), k) {
			it.Seek(k) // the first target, or chunks left by a failed write between
		}
		for chunk := 0; chunk < n; chunk++ {
			binary.BigEndian.PutUint16(k[1+idLen+2:], uint16(chunk))
			if !it.Valid() || !bytes.Equal(it.Item().Key(), k) {
				return fmt.Errorf("result chunk: %w", ErrCorrupt)
			}
			off := chunk * resultChunkSize
			want := min(len(res)-off, resultChunkSize)
			if err := it.Item().Value(func(v []byte) error {
				if len(v) != want {
					return fmt.Errorf("result chunk: %w", ErrCorrupt)
				}
				copy(res[off:], v)
				return nil
			}); err != nil {
				return err
			}
			it.Next()
		}
	}
	return nil
}

// readResult reads a chunked result of size bytes, target idx's, into one
// slice allocated at its size. A chunk that is missing or of the wrong
// length is ErrCorrupt: chunks are committed before their outcome row.
func readResult(txn *badger.Txn, id [idLen]byte, idx int, size int64) ([]byte, error) {
	res := make([]byte, size)
	for chunk, off := 0, int64(0); off < size; chunk++ {
		item, err := txn.Get(chunkKey(id, idx, chunk))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("result chunk: %w", ErrCorrupt)
		}
		if err != nil {
			return nil, err
		}
		want := min(size-off, resultChunkSize)
		if err := item.Value(func(v []byte) error {
			if int64(len(v)) != want {
				return fmt.Errorf("result chunk: %w", ErrCorrupt)
			}
			copy(res[off:], v)
			return nil
		}); err != nil {
			return nil, err
		}
		off += want
	}
	return res, nil
}

// getSpecs reads a job's specs row: its targets, pending.
func getSpecs(txn *badger.Txn, id [idLen]byte) ([]TargetRecord, error) {
	item, err := txn.Get(specsKey(id))
	if err != nil {
		return nil, err
	}
	var ts []TargetRecord
	err = item.Value(func(v []byte) error {
		ts, err = decodeSpecs(v)
		return err
	})
	return ts, err
}

// walkOutcomes calls fn for each r row of a job, in idx order.
func walkOutcomes(txn *badger.Txn, id [idLen]byte, fn func(idx int, v []byte) error) error {
	p := outcomesPrefix(id)
	o := badger.DefaultIteratorOptions
	o.Prefix = p
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	for it.Seek(p); it.ValidForPrefix(p); it.Next() {
		item := it.Item()
		k := item.Key()
		if len(k) != targetKeyLen {
			return fmt.Errorf("target key: %w", ErrCorrupt)
		}
		idx := int(binary.BigEndian.Uint16(k[1+idLen:]))
		if err := item.Value(func(v []byte) error { return fn(idx, v) }); err != nil {
			return err
		}
	}
	return nil
}

// Target returns one stored target with its result, or an error wrapping
// [ErrNotFound].
func (s *Store) Target(idHex string, idx int) (TargetRecord, error) {
	id, ok := parseID(idHex)
	if !ok || idx < 0 || idx > 0xffff {
		return TargetRecord{}, fmt.Errorf("read target: %w", ErrNotFound)
	}
	var t TargetRecord
	err := s.view("read target", func(txn *badger.Txn) error {
		item, err := txn.Get(specsKey(id))
		if err != nil {
			return err
		}
		found := false
		if err := item.Value(func(v []byte) error {
			t, found, err = decodeSpecAt(v, idx)
			return err
		}); err != nil {
			return err
		}
		if !found {
			return ErrNotFound
		}
		o, found, err := getOutcome(txn, id, idx)
		if err != nil || !found {
			return err
		}
		o.fill(&t, true)
		if o.chunked {
			t.Result, err = readResult(txn, id, idx, o.size)
		}
		return err
	})
	return t, err
}

// ResultJSON returns the result (its JSON) of target idx of a job, which
// must be stored done; otherwise (an unknown job, an idx out of range, a
// target pending or failed) an error wrapping [ErrNotFound]. It reads the
// target's outcome row and its result, nothing else.
func (s *Store) ResultJSON(idHex string, idx int) ([]byte, error) {
	id, ok := parseID(idHex)
	if !ok || idx < 0 || idx > 0xffff {
		return nil, fmt.Errorf("read result: %w", ErrNotFound)
	}
	var res []byte
	err := s.view("read result", func(txn *badger.Txn) error {
		o, found, err := getOutcome(txn, id, idx)
		switch {
		case err != nil:
			return err
		case !found || o.status != TargetDone:
			return ErrNotFound
		case o.chunked:
			res, err = readResult(txn, id, idx, o.size)
			return err
		default:
			res = bytes.Clone(o.inline)
			return nil
		}
	})
	return res, err
}

// getOutcome reads target idx's outcome row; false if it has none
// (pending, or no such target). The outcome's slices are copies.
func getOutcome(txn *badger.Txn, id [idLen]byte, idx int) (outcome, bool, error) {
	item, err := txn.Get(outcomeKey(id, idx))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return outcome{}, false, nil
	}
	if err != nil {
		return outcome{}, false, err
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return outcome{}, false, err
	}
	o, err := parseOutcome(v)
	return o, err == nil, err
}

// JobByKey returns the newest job stored under an idempotency key; false if
// there is none.
func (s *Store) JobByKey(key [32]byte) (JobRecord, bool, error) {
	var j JobRecord
	found := false
	err := s.view("read idempotency key", func(txn *badger.Txn) error {
		item, err := txn.Get(idemKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var id [idLen]byte
		if err := item.Value(func(v []byte) error {
			if len(v) != idLen {
				return ErrCorrupt
			}
			copy(id[:], v)
			return nil
		}); err != nil {
			return err
		}
		j, err = getJob(txn, id)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	return j, found, err
}

// Unsettled returns every job that is not settled: live, or left with a
// target in flight. After a crash these are the jobs to reap.
func (s *Store) Unsettled() ([]JobRecord, error) {
	var js []JobRecord
	err := s.view("read unsettled jobs", func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = []byte{prefixLive}
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.ValidForPrefix(o.Prefix); it.Next() {
			var id [idLen]byte
			if len(it.Item().Key()) != jobKeyLen {
				return fmt.Errorf("unsettled key: %w", ErrCorrupt)
			}
			copy(id[:], it.Item().Key()[1:])
			j, err := getJob(txn, id)
			if err != nil {
				return err
			}
			if err := recount(txn, id, &j); err != nil {
				return err
			}
			js = append(js, j)
		}
		return nil
	})
	return js, err
}

// Jobs calls fn for every stored job, in id order, until fn returns false.
// It reads every job: it is for inspection, not for the runner.
func (s *Store) Jobs(fn func(JobRecord) bool) error {
	return s.view("list jobs", func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = []byte{prefixJob}
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.ValidForPrefix(o.Prefix); it.Next() {
			k := it.Item().Key()
			if len(k) != jobKeyLen {
				return fmt.Errorf("job key: %w", ErrCorrupt)
			}
			var id [idLen]byte
			copy(id[:], k[1:])
			var j JobRecord
			if err := it.Item().Value(func(v []byte) error {
				var err error
				j, err = decodeJob(id, v)
				return err
			}); err != nil {
				return err
			}
			if err := recount(txn, id, &j); err != nil {
				return err
			}
			if !fn(j) {
				return nil
			}
		}
		return nil
	})
}

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
	var due []JobRecord
	var stale [][]byte
	var last, stop []byte
	err := s.view("sweep", func(txn *badger.Txn) error {
		return walkIndex(txn, prefixLease, start, func(k []byte, nanos int64, id [idLen]byte) (bool, error) {
			if nanos > before || len(due)+len(stale) >= limit {
				stop = bytes.Clone(k)
				return false, nil
			}
			j, err := getJob(txn, id)
			switch {
			case errors.Is(err, badger.ErrKeyNotFound) || (err == nil && j.Lease != nanos):
				// An entry left behind by a row written again with a
				// later lease, or by its job's deletion: not the job's.
				stale = append(stale, bytes.Clone(k))
			case err != nil:
				return false, err
			default:
				due = append(due, j)
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

// Evict deletes settled jobs, oldest first, while the stored result bytes
// exceed max. It returns how many it deleted. Unsettled jobs are never
// evicted, so the total may stay above max. It works in batches, letting
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
	var victims []JobRecord
	var last, stop []byte
	over := s.bytes.Load() - max
	err := s.view("evict", func(txn *badger.Txn) error {
		return walkIndex(txn, prefixAge, from, func(k []byte, _ int64, id [idLen]byte) (bool, error) {
			if over <= 0 || len(victims) >= evictBatch {
				stop = bytes.Clone(k)
				return false, nil
			}
			j, err := getJob(txn, id)
			if err != nil {
				return false, err
			}
			victims = append(victims, j)
			last = append(last[:0], k...)
			over -= j.ResultBytes
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

// deleteLocked deletes settled jobs and every row and index entry of theirs,
// a job's keys always in one write. s.mu is held.
func (s *Store) deleteLocked(op string, jobs []JobRecord) (int, error) {
	done := 0
	for len(jobs) > 0 {
		n, keys := 0, 0
		for n < len(jobs) && (n == 0 || keys+deleteKeys(&jobs[n]) <= deleteBudget) {
			keys += deleteKeys(&jobs[n])
			n++
		}
		batch := jobs[:n]
		chunks, err := s.chunkKeys(op, batch)
		if err != nil {
			return done, err
		}
		err = s.updateLocked(op, func(txn *badger.Txn) (int64, error) {
			var freed int64
			for i := range batch {
				if err := deleteJob(txn, &batch[i]); err != nil {
					return 0, err
				}
				freed += batch[i].ResultBytes
			}
			for _, k := range chunks {
				if err := txn.Delete(k); err != nil {
					return 0, err
				}
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

// deleteKeys is about how many keys deleting j writes: deleteJob's (an
// outcome per target; the specs, job, live, lease, age and idempotency
// keys), its result chunks (at most one short chunk per target, and maybe
// as many left by a failed write), plus one for the write's byte total,
// counted with each job.
func deleteKeys(j *JobRecord) int {
	return j.TargetsTotal + 7 + int(j.ResultBytes/resultChunkSize) + 2*j.TargetsTotal
}

// chunkKeys returns the keys of the result chunks of jobs: every b key
// under each one's id, those of its outcomes and those a crash or a failed
// write left without one. A prefix walk, one per job, so that it never
// steps over the tombstones of other jobs' chunks. It is read apart from the
// write that deletes them (an iterator in a write transaction copies and
// sorts every pending write); s.mu is held, so nothing writes them between.
func (s *Store) chunkKeys(op string, jobs []JobRecord) ([][]byte, error) {
	var keys [][]byte
	err := s.view(op, func(txn *badger.Txn) error {
		for i := range jobs {
			id, ok := parseID(jobs[i].ID)
			if !ok {
				return ErrCorrupt
			}
			o := badger.IteratorOptions{Prefix: resultsPrefix(id)}
			it := txn.NewIterator(o)
			for it.Rewind(); it.Valid(); it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			it.Close()
		}
		return nil
	})
	return keys, err
}

func deleteJob(txn *badger.Txn, j *JobRecord) error {
	id, ok := parseID(j.ID)
	if !ok {
		return ErrCorrupt
	}
	for idx := 0; idx < j.TargetsTotal; idx++ {
		if err := txn.Delete(outcomeKey(id, idx)); err != nil {
			return err
		}
	}
	for _, k := range [][]byte{specsKey(id), jobKey(id), liveKey(id), indexKey(prefixLease, j.Lease, id), indexKey(prefixAge, j.Created, id)} {
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
