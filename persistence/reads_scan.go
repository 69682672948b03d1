package persistence

// The reads that scan: by idempotency key, the unsettled jobs, every job.

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

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
