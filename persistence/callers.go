package persistence

// The caller index (c keys, keys.go): each caller's jobs, newest first, for
// listing them a page at a time; and the index of every job (e keys), for
// listing across callers. CreateJob writes a job's entries and deleting
// the job deletes them, in the same writes as the job's own rows; Open
// checks each index and repairs it (backfill).

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// ListScan bounds the index entries one page of [Store.CallerJobs] or
// [Store.AllJobs] looks at: a page whose keep refuses many jobs stops
// there, with fewer jobs than its limit (maybe none) and a next cursor that
// goes on after the last job looked at. So a page's cost does not depend on
// how many jobs are stored, whatever the filter.
const ListScan = 1_000

// CallerJobs returns up to limit of caller's jobs, newest first (by
// creation time, then by id, both descending), that keep accepts (a nil
// keep accepts all), from one snapshot, as [Store.Job] returns them. after
// is nil for the first page, or the next of the page before; next is nil
// when no job is left after the page, or a cursor for the next one. A page
// looks at most at ListScan jobs: when keep refuses many, it may hold
// fewer than limit jobs, or none, with a next cursor (and the page after
// the last may be empty when keep refuses the rest). A page goes on after
// the last job the one before looked at: a job created since then that is
// newer is not on it. A cursor is opaque; one that is not from CallerJobs
// gives an error wrapping [ErrBadCursor]. limit below 1 is 1.
//
// It costs a seek and, per job looked at (at most ListScan), a point read
// of its row (and for an unsettled job a walk of its outcome rows).
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
// AllJobs lists. It costs a seek and, per job looked at (at most
// ListScan, as for CallerJobs), a point read of its row (and for an
// unsettled job a walk of its outcome rows): the cost of a page does not
// depend on how many jobs are stored, whatever keep refuses. Safe for
// concurrent use.
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
		looked := 0     // index keys looked at
		for it.Seek(start); it.Valid(); it.Next() {
			k := it.Item().Key()
			if after != nil && bytes.Equal(k, start) {
				continue // the last job the page before looked at
			}
			if len(jobs) == limit || looked == ListScan {
				// There is a job after the page: go on after the last one
				// looked at (with a page cut short by ListScan, a page of
				// fewer jobs than limit, maybe none).
				next = last
				return nil
			}
			looked++
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

// indexes checks the caller index (c keys) and the index of every job (e
// keys) against the job rows, and repairs them (backfill): each job has
// its entry in each, and no entry names a job that is gone. Jobs stored
// before an index have none; so do jobs written, after its marker, by an
// older version (a rollback), which also leaves the entries of the jobs it
// deletes. It runs at every Open: a key-only walk of the job rows and of
// each index (docs/PERFORMANCE.md has its cost). A store opened with
// OpenReadOnly is not checked: its lists there lack what is missing.
func (s *Store) indexes() error {
	var jobs idPrint
	if err := s.view("index check", func(txn *badger.Txn) error {
		jobs = fingerprint(txn, []byte{prefixJob}, jobKeyLen, false)
		return nil
	}); err != nil {
		return err
	}
	if err := s.backfill("index callers", keyCallers, []byte{prefixCaller}, callerKeyLen, jobs, func(j *JobRecord, id [idLen]byte) []byte {
		return callerKey(j.Caller, j.Created, id)
	}); err != nil {
		return err
	}
	return s.backfill("index jobs", keyEvery, []byte{prefixEvery}, everyKeyLen, jobs, func(j *JobRecord, id [idLen]byte) []byte {
		return everyKey(j.Created, id)
	})
}

// idPrint sums up a set of job ids: how many, and the XOR of the ids. ok
// is false when a key was malformed.
type idPrint struct {
	count int
	sum   [idLen]byte
	ok    bool
}

// fingerprint sums up the job ids of the keys under prefix, reading keys
// only: the last 16 bytes of a key of length n, bit-inverted when
// inverted. A key of another length spoils it (ok false).
func fingerprint(txn *badger.Txn, prefix []byte, n int, inverted bool) idPrint {
	p := idPrint{ok: true}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != n {
			return idPrint{}
		}
		for i, c := range k[n-idLen:] {
			if inverted {
				c = ^c
			}
			p.sum[i] ^= c
		}
		p.count++
	}
	return p
}

// backfill makes the index under prefix hold keyOf's key for every stored
// job and no other, then stores done. With done stored (the index was
// built), it first compares jobs (the job rows' fingerprint) with the
// index keys', reading keys only: as many, with the same XOR of their ids,
// is taken for a whole index, since every write keeps a job and its index
// key together; else (a version before the index wrote or deleted jobs
// since: a rollback) it is rebuilt. A rebuild walks every job row (its key
// held in memory, up to 41 bytes a job) and every index key, then writes
// what is missing and deletes what names no job, deleteBudget keys a
// transaction.
func (s *Store) backfill(op string, done, prefix []byte, keyLen int, jobs idPrint, keyOf func(*JobRecord, [idLen]byte) []byte) error {
	whole := false
	want := make(map[string]struct{})
	var stale [][]byte
	err := s.view(op, func(txn *badger.Txn) error {
		if _, err := txn.Get(done); err == nil {
			if keys := fingerprint(txn, prefix, keyLen, true); jobs.ok && keys == jobs {
				whole = true
				return nil
			}
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
					want[string(keyOf(&j, id))] = struct{}{}
				}
				return err
			}); err != nil {
				return err
			}
		}
		ix := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer ix.Close()
		for ix.Rewind(); ix.Valid(); ix.Next() {
			k := ix.Item().Key()
			if _, ok := want[string(k)]; ok {
				delete(want, string(k)) // there already
			} else {
				stale = append(stale, ix.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil || whole {
		return err
	}
	if len(want) > 0 || len(stale) > 0 {
		s.log.Infof("%s: repaired at open: %d keys written, %d deleted", op, len(want), len(stale))
		s.noteRecovery(func(r *Recovery) { r.IndexKeys += len(want) + len(stale) })
	}
	keys := make([][]byte, 0, len(want))
	for k := range want {
		keys = append(keys, []byte(k))
	}
	for len(keys) > 0 || len(stale) > 0 {
		set := keys[:min(len(keys), deleteBudget)]
		keys = keys[len(set):]
		del := stale[:min(len(stale), deleteBudget-len(set))]
		stale = stale[len(del):]
		if err := s.update(op, func(txn *badger.Txn) (int64, error) {
			for _, k := range set {
				if err := txn.Set(k, nil); err != nil {
					return 0, err
				}
			}
			for _, k := range del {
				if err := txn.Delete(k); err != nil {
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
