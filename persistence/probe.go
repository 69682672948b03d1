package persistence

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// prefixProbe keys are written by [Store.WriteProbe] and nothing else.
const prefixProbe = 'z'

// WriteProbe writes value under key (in a key space of its own, apart from
// every job row) in one Badger transaction, through the same serialised
// writer as every other write. It is the reference cost of one write on
// this store's options, for benchmarks, and a health check for a service:
// it fails as the runner's writes would.
func (s *Store) WriteProbe(key, value []byte) error {
	k := append([]byte{prefixProbe}, key...)
	return s.update("write probe", func(txn *badger.Txn) (int64, error) {
		return 0, txn.Set(k, value)
	})
}

// SetWriteFault makes every write fail, before it reaches Badger, with an
// error wrapping the one fault returns, while fault is set and returns
// non-nil; a nil fault clears it. It stands in for disk trouble in tests
// (a full or read-only disk) where the real thing cannot be arranged.
// Safe to call at any time.
func (s *Store) SetWriteFault(fault func() error) {
	if fault == nil {
		s.fault.Store(nil)
		return
	}
	s.fault.Store(&fault)
}

func (s *Store) checkFault(op string) error {
	if err := s.gate(op); err != nil { // a full disk (diskspace.go)
		return err
	}
	if f := s.fault.Load(); f != nil {
		if err := (*f)(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return nil
}
