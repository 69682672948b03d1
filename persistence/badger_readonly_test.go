package persistence

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// TestBadger_ReadOnlyOpenRemovesNothing: Badger opened read-only leaves a
// table file its MANIFEST does not list where it is, and reads every row.
// Upstream removed such files and synced the directory even read-only: on
// a disk whose every fsync fails, the read-only open a reopen falls back
// to (fullopen.go) then failed, and the store's reads with it (the
// adversary's TestAdv36c_EveryFsyncFailsOnAFullDisk). PATCH.md, sixth.
func TestBadger_ReadOnlyOpenRemovesNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "db")
	opts := badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(1 << 20).WithValueThreshold(1 << 10)
	db, err := badger.Open(opts)
	require.NoError(t, err)
	const rows = 100
	for i := range rows {
		require.NoError(t, db.Update(func(txn *badger.Txn) error {
			return txn.Set(fmt.Appendf(nil, "key-%03d", i), []byte("v"))
		}))
	}
	require.NoError(t, db.Close()) // flushes the memtable to a table
	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	table, err := os.ReadFile(tables[0])
	require.NoError(t, err)
	stray := filepath.Join(dir, "000999.sst") // listed nowhere
	require.NoError(t, os.WriteFile(stray, table, 0o600))

	ro, err := badger.Open(opts.WithReadOnly(true))
	require.NoError(t, err)
	n := 0
	require.NoError(t, ro.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	require.NoError(t, ro.Close())
	require.Equal(t, rows, n, "every row reads read-only")
	require.FileExists(t, stray, "read-only, nothing is removed")

	rw, err := badger.Open(opts) // a writable Open still judges it
	require.NoError(t, err)
	require.NoError(t, rw.Close())
	require.NoFileExists(t, stray)
}
