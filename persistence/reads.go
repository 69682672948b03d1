package persistence

// The reads. Each is one Badger read transaction: a consistent snapshot,
// that waits for no write. The reads of statuses (Job, TargetStatuses)
// read outcome rows, never a result; JobWithTargets, Targets, Target and
// ResultJSON read results too, from their rows (keys.go, records.go).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// view runs fn in a Badger read transaction; op names the read in errors.
// Every read goes through view: Close waits for the reads in flight
// (readGate) before it closes Badger, and a read after Close is an error
// wrapping ErrClosed, never a Badger panic or a read of a closed DB.
func (s *Store) view(op string, fn func(txn *badger.Txn) error) error {
	if s.closed.Load() || !s.reads.enter() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	defer s.reads.exit()
	return convert(op, s.db.View(fn))
}

// readGate counts the reads in flight, so that Store.Close can wait for
// them: enter before a read (false once closed: do not read), exit after.
// Reads nest freely (a read inside another's callback enters again). The
// zero value is open.
type readGate struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   sync.Cond // signalled when n falls to 0 after close; L is mu
}

func (g *readGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

func (g *readGate) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.closed {
		g.idle.Broadcast()
	}
}

// close refuses every read from now on and waits for those in flight.
func (g *readGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.idle.L = &g.mu
	for g.n > 0 {
		g.idle.Wait()
	}
}

func getJob(txn *badger.Txn, id [idLen]byte) (JobRecord, error) {
	j, _, err := getJobSized(txn, id)
	return j, err
}

// getJobSized is getJob, and the length of the job's row.
func getJobSized(txn *badger.Txn, id [idLen]byte) (JobRecord, int64, error) {
	item, err := txn.Get(jobKey(id))
	if err != nil {
		return JobRecord{}, 0, err
	}
	var j JobRecord
	var n int64
	err = item.Value(func(v []byte) error {
		n = int64(len(v))
		j, err = decodeJob(id, v)
		return err
	})
	return j, n, err
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
	if s.unsynced.has(id) {
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
	if s.unsynced.has(id) {
		return JobRecord{}, nil, fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	var j JobRecord
	var ts []TargetRecord
	err := s.view(op, func(txn *badger.Txn) error {
		var err error
		if j, err = getJob(txn, id); err != nil {
			return err
		}
		if ts, err = s.readTargets(txn, id, withResults, j.Settled); err != nil {
			return err
		}
		if !j.Settled {
			j.Recount(ts)
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
		j.CountOutcome(o.status, o.size, o.stored)
		return nil
	})
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
		ts, err = s.readTargets(txn, id, true, false)
		if err == nil && len(ts) == 0 {
			err = ErrNotFound
		}
		return err
	})
	return ts, err
}

// readTargets reads a job's targets: its specs row, then its outcome rows,
// then, withResults, the chunks of the results that are not inline. A job
// without a specs row has no targets. The specs row is decoded once, and
// the statuses of a job that txn has settled are read once (specs.go).
func (s *Store) readTargets(txn *badger.Txn, id [idLen]byte, withResults, settled bool) ([]TargetRecord, error) {
	e, err := s.readSpecs(txn, id)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return readOutcomes(txn, id, nil, withResults)
	}
	if err != nil {
		return nil, err
	}
	statuses := settled && !withResults
	if st := e.settled.Load(); statuses && st != nil {
		return copyRecords(*st), nil
	}
	ts, err := readOutcomes(txn, id, copyRecords(e.targets), withResults)
	if err != nil {
		return nil, err
	}
	if statuses {
		s.specs.settle(id, e, copyRecords(ts))
	}
	return ts, nil
}

// readOutcomes fills ts, a job's targets as its specs row has them, from
// its outcome rows, and, withResults, the chunks of the results that are
// not inline.
func readOutcomes(txn *badger.Txn, id [idLen]byte, ts []TargetRecord, withResults bool) ([]TargetRecord, error) {
	var chunked []int // the targets whose result is in chunks
	err := walkOutcomes(txn, id, func(idx int, v []byte) error {
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
		if s.unsynced.has(id) {
			return nil // its creation is not acknowledged: never reused
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
