package persistence

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestBadger_MemtableRotationOnFullDisk: a write that fills the memtable
// while the disk has no room for the next memtable's log fails as an
// error; reads go on; once there is room, writes go on. Upstream Badger
// handed the full memtable to the flusher before it made the new one and,
// when that failed, left the DB with no memtable: the next write died in
// an assertion (log.Fatal) and every read dereferenced nil (a serve killed
// by a full disk, the adversary's TestAdv36_NoSpaceAtMemtableRotation).
// persistence/internal/badger makes the new memtable first (PATCH.md).
func TestBadger_MemtableRotationOnFullDisk(t *testing.T) {
	t.Parallel()
	dir := testkit.MountTmpfs(t, 8<<20)
	const memtable = 256 << 10
	opts := badger.DefaultOptions(filepath.Join(dir, "db")).WithLogger(nil).
		WithMemTableSize(memtable).WithValueLogFileSize(1 << 20).WithValueThreshold(1 << 10).
		WithNumMemtables(4).WithNumLevelZeroTables(4).WithNumLevelZeroTablesStall(8)
	db, err := badger.Open(opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()

	// Fill the disk but for less than a memtable's log (2 × its size).
	free := testkit.FreeBytes(t, dir)
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, free-memtable/2), 0o600))

	val := bytes.Repeat([]byte("v"), 200) // inline: the memtable fills, the value log does not grow
	var failed error
	written := 0
	for i := 0; i < 100_000 && failed == nil; i++ {
		failed = db.Update(func(txn *badger.Txn) error {
			return txn.Set(fmt.Appendf(nil, "key-%06d", i), val)
		})
		if failed == nil {
			written++
		}
	}
	require.Error(t, failed, "no write failed on a full disk")
	t.Logf("%d writes, then: %v", written, failed)

	// Reads go on, and every written row reads back.
	require.NoError(t, db.View(func(txn *badger.Txn) error {
		for i := range written {
			if _, err := txn.Get(fmt.Appendf(nil, "key-%06d", i)); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
		}
		return nil
	}))
	// A write tried again while full fails again, as an error.
	require.Error(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("again"), val) }))

	// Room back: writes go on.
	require.NoError(t, os.Remove(filler))
	require.NoError(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("after"), val) }))
}

// TestBadger_CloseOnFullDiskKeepsTheMemtable: Close on a disk with no room
// for the table its memtable flushes to returns (with the power on,
// nothing is lost): the flush is given up as the DB closes and the
// memtable's log kept, and the next Open, with room, replays it. Upstream
// Badger retried the flush every second for as long as the disk stayed
// full, and Close (serve's SIGTERM, the store's reopen after a failed
// sync) waited with it: the adversary's TestAdv36c_SIGTERMWhileFull.
func TestBadger_CloseOnFullDiskKeepsTheMemtable(t *testing.T) {
	t.Parallel()
	dir := testkit.MountTmpfs(t, 16<<20)
	opts := badger.DefaultOptions(filepath.Join(dir, "db")).WithLogger(nil).
		WithMemTableSize(1 << 20).WithValueLogFileSize(1 << 20).WithValueThreshold(1 << 10)
	db, err := badger.Open(opts)
	require.NoError(t, err)
	val := bytes.Repeat([]byte("v"), 200) // inline: in the memtable and its log
	const rows = 2000
	for i := range rows {
		require.NoError(t, db.Update(func(txn *badger.Txn) error {
			return txn.Set(fmt.Appendf(nil, "key-%06d", i), val)
		}))
	}
	filler := testkit.FillDisk(t, dir, 0) // no room for the table the close flushes to
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	require.NoError(t, testkit.Recv(t, closed), "Close returns on a full disk")
	logs, err := filepath.Glob(filepath.Join(dir, "db", "*.mem"))
	require.NoError(t, err)
	require.NotEmpty(t, logs, "the memtable's log is kept")

	require.NoError(t, os.Remove(filler))
	db, err = badger.Open(opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.View(func(txn *badger.Txn) error {
		for i := range rows {
			if _, err := txn.Get(fmt.Appendf(nil, "key-%06d", i)); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
		}
		return nil
	}), "every row the memtable held reads back")
}
