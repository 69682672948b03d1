package persistence

import (
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// requireCounted checks that the byte total is what a count of every row
// gives (CountBytes), and returns it.
func requireCounted(tb testing.TB, s *Store) int64 {
	tb.Helper()
	n, err := s.CountBytes()
	require.NoError(tb, err)
	require.Equal(tb, n, s.Bytes(), "the byte total is the count of the rows")
	return n
}

// jobBytes is what job id's rows count in the byte total.
func jobBytes(tb testing.TB, s *Store, id string) int64 {
	tb.Helper()
	raw, ok := parseID(id)
	require.True(tb, ok)
	var d doomed
	require.NoError(tb, s.view("test", func(txn *badger.Txn) error {
		var err error
		d, err = doom(txn, raw)
		return err
	}))
	return d.size
}
