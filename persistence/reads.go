package persistence

// The reads. Each is one Badger read transaction: a consistent snapshot,
// that waits for no write. The reads of statuses (Job, TargetStatuses)
// read outcome rows, never a result; JobWithTargets, Targets, Target and
// ResultJSON read results too, from their rows (keys.go, records.go).

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// view runs fn in a Badger read transaction; op names the read in errors.
// Every read goes through view: Close waits for the reads in flight
// (readGate) before it closes Badger, and a read after Close is an error
// wrapping ErrClosed, never a Badger panic or a read of a closed DB.
//
// While the store reopens Badger after a failed sync (reopen.go) a read
// waits for it, at most reopenReadWait; while Badger is down (it did not
// open again) a read tries to open it (no closer than the writes' backoff)
// and waits for it as long, then fails with an error wrapping ErrNotSynced.
func (s *Store) view(op string, fn func(txn *badger.Txn) error) error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	switch s.reads.enter() {
	case gateClosed:
		return fmt.Errorf("%s: %w", op, ErrClosed)
	case gateDown: // Badger not open (reopen.go): try, and wait a while
		for end := time.Now().Add(reopenReadWait); ; time.Sleep(reopenReadPoll) {
			s.openForRead()
			if g := s.reads.enter(); g == gateOpen {
				break
			} else if g == gateClosed || time.Now().After(end) {
				return fmt.Errorf("%s: %w", op, s.downErr())
			}
		}
	}
	defer s.reads.exit()
	return convert(op, s.db.View(fn))
}

// readGate counts the reads in flight, so that Store.Close and a reopen
// (reopen.go) can wait for them: enter before a read (gateOpen: read, then
// exit; otherwise do not read). Reads nest freely (a read inside another's
// callback enters again; while a reopen waits, it waits reopenReadWait and
// fails). The zero value is open.
type readGate struct {
	mu     sync.Mutex
	n      int
	closed bool
	down   bool          // Badger is not open: refuse at once
	paused chan struct{} // non-nil while a reopen waits: closed by resume
	idle   sync.Cond     // signalled when n falls to 0 after close or pause; L is mu
}

// What readGate.enter answers.
const (
	gateOpen = iota
	gateClosed
	gateDown
)

func (g *readGate) enter() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.paused; p != nil && !g.closed && !g.down {
		g.mu.Unlock()
		t := time.NewTimer(reopenReadWait)
		select {
		case <-p:
		case <-t.C:
		}
		t.Stop()
		g.mu.Lock()
	}
	switch {
	case g.closed:
		return gateClosed
	case g.down || g.paused != nil:
		return gateDown
	}
	g.n++
	return gateOpen
}

func (g *readGate) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && (g.closed || g.paused != nil) {
		g.idle.Broadcast()
	}
}

// close refuses every read from now on and waits for those in flight.
func (g *readGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.waitIdle()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
}

// waitIdle waits for the reads in flight to end. g.mu is held.
func (g *readGate) waitIdle() {
	g.idle.L = &g.mu
	for g.n > 0 {
		g.idle.Wait()
	}
}

// pause makes new reads wait (resume) and waits for those in flight.
func (g *readGate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = make(chan struct{})
	}
	g.waitIdle()
}

// setDown makes new reads fail at once (on) or wait again (off).
func (g *readGate) setDown(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = on
}

// resume lets the reads paused by pause go on.
func (g *readGate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
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
