package persistence

// The caller index (c keys, keys.go): each caller's jobs, newest first, for
// listing them a page at a time; and the index of every job (e keys), for
// listing across callers. CreateJob writes a job's entries and deleting
// the job deletes them, in the same writes as the job's own rows; Open
// writes the entries of jobs stored before an index (once).

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// CallerJobs returns up to limit of caller's jobs, newest first (by
// creation time, then by id, both descending), that keep accepts (a nil
// keep accepts all), from one snapshot, as [Store.Job] returns them. after
// is nil for the first page, or the next of the page before; next is nil
// when no job is left after the page, or a cursor for the next one (the
// page after it may be empty when keep refuses the rest). A page goes on
// after the last job the one before looked at: a job created since then
// that is newer is not on it. A cursor is
// opaque; one that is not from CallerJobs gives an error wrapping
// [ErrBadCursor]. limit below 1 is 1.
//
// It costs a seek and, per job looked at, a point read of its row (and for
// an unsettled job a walk of its outcome rows): keep sees every job of the
// caller until the page is full.
func (s *Store) CallerJobs(caller string, after []byte, limit int, keep func(*JobRecord) bool) (jobs []JobRecord, next []byte, err error) {
	return s.listIndex(callerPrefix(caller), callerKeyLen, after, limit, func(j *JobRecord) bool {
		// another caller whose name hashes to the same 8 bytes is not listed
		return j.Caller == caller && (keep == nil || keep(j))
	})
}

// AllJobs is [Store.CallerJobs] over every caller's jobs, newest first (by
// creation time, then by id, both descending), from the index of every
// job (e keys, keys.go). Its cursors are the same as CallerJobs's: the
// position of a job ([CallerCursor]), so they sort, as bytes, in the order
// AllJobs lists. It costs a seek and, per job looked at, a point read of
// its row (and for an unsettled job a walk of its outcome rows): the cost
// of a page does not depend on how many jobs are stored, but keep sees
// every job until the page is full. Safe for concurrent use.
func (s *Store) AllJobs(after []byte, limit int, keep func(*JobRecord) bool) (jobs []JobRecord, next []byte, err error) {
	return s.listIndex([]byte{prefixEvery}, everyKeyLen, after, limit, keep)
}

// listIndex lists the jobs of a newest-first index (c or e keys of length
// keyLen under prefix) that keep accepts, as CallerJobs documents.
func (s *Store) listIndex(prefix []byte, keyLen int, after []byte, limit int, keep func(*JobRecord) bool) (jobs []JobRecord, next []byte, err error) {
	if after != nil && len(after) != callerCursorLen {
		return nil, nil, fmt.Errorf("list jobs: %w", ErrBadCursor)
	}
	limit = max(limit, 1)
	err = s.view("list jobs", func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		start := append(bytes.Clone(prefix), after...)
		var last []byte // the key looked at last, past the prefix
		for it.Seek(start); it.Valid(); it.Next() {
			k := it.Item().Key()
			if after != nil && bytes.Equal(k, start) {
				continue // the last job the page before looked at
			}
			if len(jobs) == limit {
				next = last // there is a job after the page: go on after it
				return nil
			}
			last = append(last[:0], k[len(prefix):]...)
			id, ok := newestFirstID(k, keyLen)
			if !ok {
				return fmt.Errorf("index key: %w", ErrCorrupt)
			}
			if s.unsynced.has(id) {
				continue // not acknowledged yet (durable.go)
			}
			j, err := getJob(txn, id)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue // cannot happen: a job and its entry go in one write
			}
			if err != nil {
				return err
			}
			if err := recount(txn, id, &j); err != nil {
				return err
			}
			if keep == nil || keep(&j) {
				jobs = append(jobs, j)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return jobs, next, nil
}

// CallerCursorLen is the length of a cursor of [Store.CallerJobs], such
// as [CallerCursor] returns.
const CallerCursorLen = callerCursorLen

// CallerCursor is the cursor of [Store.CallerJobs] that goes on after the
// job id created at created (nanoseconds): the position of its entry in its
// caller's index. Cursors of one caller's jobs sort, as bytes, in the order
// CallerJobs lists them (newest first), in every store: so pages of several
// stores merge. An id that is not 32 hex digits is an error wrapping
// [ErrBadCursor].
func CallerCursor(created int64, id string) ([]byte, error) {
	raw, ok := parseID(id)
	if !ok {
		return nil, fmt.Errorf("caller cursor: %w", ErrBadCursor)
	}
	return callerKey("", created, raw)[1+callerHashLen:], nil
}

// indexCallers writes the caller entry of every job (jobs stored before
// the index have none; writing one again is harmless), then the key that
// says it is done, so that it runs once per store: at the first Open after
// an upgrade, a walk of every job row (their keys held in memory, 41 bytes
// a job), then writes of deleteBudget entries each. A store opened with
// OpenReadOnly is not indexed: CallerJobs there lists only the jobs
// created since.
func (s *Store) indexCallers() error {
	return s.backfill("index callers", keyCallers, func(j *JobRecord, id [idLen]byte) []byte {
		return callerKey(j.Caller, j.Created, id)
	})
}

// indexEvery writes the e key of every job (jobs stored before format 4
// have none), then the key that says it is done: once per store, as
// indexCallers (33 bytes a job in memory). A store opened with
// OpenReadOnly is not indexed: AllJobs there lists only the jobs created
// since.
func (s *Store) indexEvery() error {
	return s.backfill("index jobs", keyEvery, func(j *JobRecord, id [idLen]byte) []byte {
		return everyKey(j.Created, id)
	})
}

// backfill writes keyOf's key for every stored job, unless done is
// stored, then done.
func (s *Store) backfill(op string, done []byte, keyOf func(*JobRecord, [idLen]byte) []byte) error {
	finished := false
	var keys [][]byte
	err := s.view(op, func(txn *badger.Txn) error {
		if _, err := txn.Get(done); err == nil {
			finished = true
			return nil
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		o := badger.DefaultIteratorOptions
		o.Prefix = []byte{prefixJob}
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != jobKeyLen {
				return fmt.Errorf("job key: %w", ErrCorrupt)
			}
			var id [idLen]byte
			copy(id[:], k[1:])
			if err := it.Item().Value(func(v []byte) error {
				j, err := decodeJob(id, v)
				if err == nil {
					keys = append(keys, keyOf(&j, id))
				}
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || finished {
		return err
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), deleteBudget)]
		keys = keys[len(batch):]
		if err := s.update(op, func(txn *badger.Txn) (int64, error) {
			for _, k := range batch {
				if err := txn.Set(k, nil); err != nil {
					return 0, err
				}
			}
			return 0, nil
		}); err != nil {
			return err
		}
	}
	return s.update(op, func(txn *badger.Txn) (int64, error) { return 0, txn.Set(done, nil) })
}

// JobsByIDPrefix returns the jobs whose raw id (16 bytes) starts with
// prefix, and that keep accepts (a nil keep accepts all), in id order, from
// one snapshot, as [Store.Job] returns them: a seek among the job rows,
// then a point read per job looked at. It looks at most scan jobs (scan
// below 1 is 1): truncated reports that it stopped there with jobs left.
// A prefix longer than an id is an error wrapping [ErrBadCursor]. Safe for
// concurrent use.
func (s *Store) JobsByIDPrefix(prefix []byte, scan int, keep func(*JobRecord) bool) (jobs []JobRecord, truncated bool, err error) {
	if len(prefix) > idLen {
		return nil, false, fmt.Errorf("find jobs: %w", ErrBadCursor)
	}
	scan = max(scan, 1)
	start := append([]byte{prefixJob}, prefix...)
	err = s.view("find jobs", func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: start})
		defer it.Close()
		looked := 0
		for it.Seek(start); it.Valid(); it.Next() {
			if looked == scan {
				truncated = true
				return nil
			}
			looked++
			k := it.Item().Key()
			if len(k) != jobKeyLen {
				return fmt.Errorf("job key: %w", ErrCorrupt)
			}
			var id [idLen]byte
			copy(id[:], k[1:])
			if s.unsynced.has(id) {
				continue // not acknowledged yet (durable.go)
			}
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
			if keep == nil || keep(&j) {
				jobs = append(jobs, j)
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return jobs, truncated, nil
}
