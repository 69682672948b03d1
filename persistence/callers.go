package persistence

// The caller index (c keys, keys.go): each caller's jobs, newest first, for
// listing them a page at a time. CreateJob writes a job's entry and
// deleting the job deletes it, in the same writes as the job's own rows;
// Open writes the entries of jobs stored before the index (once).

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
	if after != nil && len(after) != callerCursorLen {
		return nil, nil, fmt.Errorf("list jobs: %w", ErrBadCursor)
	}
	limit = max(limit, 1)
	prefix := callerPrefix(caller)
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
			id, ok := callerKeyID(k)
			if !ok {
				return fmt.Errorf("caller key: %w", ErrCorrupt)
			}
			j, err := getJob(txn, id)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue // cannot happen: a job and its entry go in one write
			}
			if err != nil {
				return err
			}
			if j.Caller != caller {
				continue // another caller whose name hashes to the same 8 bytes
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
	done := false
	var keys [][]byte
	err := s.view("index callers", func(txn *badger.Txn) error {
		if _, err := txn.Get(keyCallers); err == nil {
			done = true
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
					keys = append(keys, callerKey(j.Caller, j.Created, id))
				}
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || done {
		return err
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), deleteBudget)]
		keys = keys[len(batch):]
		if err := s.update("index callers", func(txn *badger.Txn) (int64, error) {
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
	return s.update("index callers", func(txn *badger.Txn) (int64, error) { return 0, txn.Set(keyCallers, nil) })
}
