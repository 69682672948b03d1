package persistence

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Row returns a job's row as it is stored: one point read, whatever the
// job. An unsettled job's progress and lease in it are not recounted from
// its outcomes (see [Store.Job]): its owner knows better. An unknown or
// malformed id is an error wrapping [ErrNotFound], after the same one
// read, so that no id answers faster than another.
func (s *Store) Row(idHex string) (JobRecord, error) {
	id, ok := parseID(idHex) // a malformed id reads the all-zero id: never stored
	var j JobRecord
	err := s.view("read job", func(txn *badger.Txn) error {
		var err error
		j, err = getJob(txn, id)
		return err
	})
	if err == nil && !ok {
		return JobRecord{}, fmt.Errorf("read job: %w", ErrNotFound)
	}
	return j, err
}
