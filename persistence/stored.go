package persistence

// The byte total (key m stored, keys.go): what MaxBytes bounds. It is the
// value bytes of every row of every job:
//
//   - the job row (j), however often it is written again: a write adds the
//     change in its length (an error text set, say);
//   - the specs row (t): every target's URL and options;
//   - each outcome row (r): status, time, error text, hint, and an inline
//     result;
//   - each result's chunk rows (b), counted as the size its outcome row
//     names, once that row commits (chunks a crash or a failed write left
//     without one are not the job's yet: not counted, deleted with it).
//
// Index entries (i, l, x, a, c) and node tags are not counted: their values
// are empty, or an id.
//
// Every write moves the total in the transaction that writes the rows it
// counts (commit, in writes.go), so the total is exact after a crash as
// after a Close: CreateJob adds the row and the specs; an owner write adds
// its outcome row and its chunks, and its job row's change in length (a
// point read of the row it replaces, in the same transaction); Touch its
// row's change in length; the deletion of a job what a read of its rows
// counts (jobRows), in the write that deletes them. An outcome row is
// written once (a target is stored once, by its job's owner): its write
// adds it whole.
//
// A store written before this total (format 3 with key m bytes, which
// counted results only) has no m stored: Open counts every row once
// (countBytes), writes m stored and deletes m bytes, in one write.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// outcomeBytes is what an outcome row v counts: its own length, and its
// result's chunks when the result is not inline. A row that does not parse
// (never written by the store) counts its length only, the same whenever
// it is counted.
func outcomeBytes(v []byte) int64 {
	n := int64(len(v))
	if o, err := parseOutcome(v); err == nil && o.chunked {
		n += o.size
	}
	return n
}

// valueLen is the length of item's value (read whole: a value in the value
// log has only an estimate of its length without it).
func valueLen(item *badger.Item) (int64, error) {
	var n int64
	err := item.Value(func(v []byte) error {
		n = int64(len(v))
		return nil
	})
	return n, err
}

// rowLen is the length of the value at key k, 0 when there is none.
func rowLen(txn *badger.Txn, k []byte) (int64, error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return valueLen(item)
}

// doomed is a settled job about to be deleted: its record, what its rows
// count in the byte total, and the keys of its outcome and chunk rows.
type doomed struct {
	rec  JobRecord
	size int64
	rows [][]byte
}

// jobRows reads what deleting job id (whose row is rowBytes long) takes
// away: its rows' bytes (see the top of this file) and the keys of its
// outcome and chunk rows, those that are there, found by a walk of each
// job's r and b prefixes (a walk per prefix, so that it never steps over
// other jobs' tombstones), chunks left by a crash or a failed write
// included. Deleting only these, not every outcome key a job might have,
// writes no tombstone for a target never stored (a cancelled job's, a
// failed one's, a reaped one's). They are read apart from the write that
// deletes them (an iterator in a write transaction copies and sorts every
// pending write); s.mu is held from the read to the write, and a settled
// job's rows are written by nothing else, so none comes between.
func jobRows(txn *badger.Txn, id [idLen]byte, rowBytes int64) (int64, [][]byte, error) {
	size := rowBytes
	n, err := rowLen(txn, specsKey(id))
	if err != nil {
		return 0, nil, err
	}
	size += n
	var rows [][]byte
	it := txn.NewIterator(badger.IteratorOptions{Prefix: outcomesPrefix(id)})
	for it.Rewind(); it.Valid(); it.Next() {
		rows = append(rows, it.Item().KeyCopy(nil))
		if err := it.Item().Value(func(v []byte) error {
			size += outcomeBytes(v)
			return nil
		}); err != nil {
			it.Close()
			return 0, nil, err
		}
	}
	it.Close()
	it = txn.NewIterator(badger.IteratorOptions{Prefix: resultsPrefix(id)})
	for it.Rewind(); it.Valid(); it.Next() {
		rows = append(rows, it.Item().KeyCopy(nil))
	}
	it.Close()
	return size, rows, nil
}

// doom reads what deleting the settled job id takes: see jobRows.
func doom(txn *badger.Txn, id [idLen]byte) (doomed, error) {
	j, n, err := getJobSized(txn, id)
	if err != nil {
		return doomed{}, err
	}
	size, rows, err := jobRows(txn, id, n)
	return doomed{rec: j, size: size, rows: rows}, err
}

// countBytes counts the byte total from the rows: every job, specs and
// outcome row, in one snapshot.
func countBytes(txn *badger.Txn) (int64, error) {
	var total int64
	for _, p := range []byte{prefixJob, prefixSpecs, prefixOutcome} {
		o := badger.DefaultIteratorOptions
		o.Prefix = []byte{p}
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		for it.Rewind(); it.Valid(); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				if p == prefixOutcome {
					total += outcomeBytes(v)
				} else {
					total += int64(len(v))
				}
				return nil
			})
			if err != nil {
				it.Close()
				return 0, err
			}
		}
		it.Close()
	}
	return total, nil
}

// CountBytes counts the stored bytes from the rows themselves, as
// [Store.Bytes] keeps them: a walk of every job's row, specs and outcome
// rows (O(all rows); their values are read). It is for checks and tests:
// the two agree whenever no write is in flight. Safe for concurrent use.
func (s *Store) CountBytes() (int64, error) {
	var n int64
	err := s.view("count bytes", func(txn *badger.Txn) error {
		var err error
		n, err = countBytes(txn)
		return err
	})
	return n, err
}

// loadBytes reads the byte total at Open. A store without one (written
// before it) is counted, and the count written with m bytes deleted, in
// one write, so that it is counted once; a read-only store is counted
// each time it is opened, and not written.
func (s *Store) loadBytes() error {
	found := false
	err := s.view("load byte total", func(txn *badger.Txn) error {
		item, err := txn.Get(keyStored)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("byte total: %w", ErrCorrupt)
			}
			s.bytes.Store(int64(binary.BigEndian.Uint64(v)))
			return nil
		})
	})
	if err != nil || found {
		return err
	}
	n, err := s.CountBytes()
	if err != nil {
		return err
	}
	s.bytes.Store(n)
	if n != 0 { // a new store has no total yet, and nothing to count
		s.noteRecovery(func(r *Recovery) { r.BytesCounted = true })
	}
	if s.readOnly {
		return nil
	}
	return s.update("count bytes", func(txn *badger.Txn) (int64, error) {
		if err := txn.Delete(keyResultBytes); err != nil {
			return 0, err
		}
		return 0, txn.Set(keyStored, binary.BigEndian.AppendUint64(nil, uint64(n)))
	})
}

// Bytes returns the stored bytes in all: the value bytes of every row of
// every job (see the top of stored.go), what [Store.Evict] bounds. Safe
// for concurrent use.
func (s *Store) Bytes() int64 {
	return s.bytes.Load()
}
