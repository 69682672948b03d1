package persistence

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4/skl"
	"github.com/stretchr/testify/require"
)

// OpenWith refuses a size out of its range, naming it, and creates
// nothing.
func TestOpenWith_SizesOutOfRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"memtable below the least", Options{MemTableSize: MinMemTableSize - 1}, "MemTableSize"},
		{"memtable negative", Options{MemTableSize: -1}, "MemTableSize"},
		{"value log below 1 MiB", Options{ValueLogFileSize: 1<<20 - 1}, "ValueLogFileSize"},
		{"value log of 2 GiB", Options{ValueLogFileSize: 2 << 30}, "ValueLogFileSize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			s, err := OpenWith(dir, tc.o)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, s)
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing created")
		})
	}
}

// A durable store opened with the least sizes starts new memtables (and
// flushes the old ones to tables) and new value-log files after a few
// writes, syncs the directory for each, and reads every write back after
// it is reopened with the same sizes (and with Open's larger ones).
func TestOpenWith_SmallFilesRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := Options{MemTableSize: MinMemTableSize, ValueLogFileSize: 1 << 20}
	s, err := OpenWith(dir, o)
	require.NoError(t, err)
	require.NoError(t, s.SetDurable(true))
	first, err := newestLogs(dir)
	require.NoError(t, err)
	syncs := s.DirSyncs()
	const jobs, results = 200, 2 // putJobRecord's jobs have 2 targets
	for n := range jobs {
		j := putJobRecord(t, s, n, 1, 1, false)
		for i := range results {
			size := 200 // inline: the memtable
			if i == 0 {
				size = 12 << 10 // the value log
			}
			require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: i, Status: TargetDone, Result: filled(n, i, size), Stored: 2}))
		}
	}
	last, err := newestLogs(dir)
	require.NoError(t, err)
	require.Greater(t, last.mem, first.mem, "a memtable filled")
	require.Greater(t, last.vlog, first.vlog+1, "value-log files filled")
	require.GreaterOrEqual(t, s.DirSyncs()-syncs, int64(2), "the directory synced for the new files")
	require.NoError(t, s.Close())
	for _, reopen := range []Options{o, {}} {
		s, err := OpenWith(dir, reopen)
		require.NoError(t, err)
		for n := range jobs {
			for i := range results {
				tg, err := s.Target(testID(n), i)
				require.NoError(t, err)
				size := 200
				if i == 0 {
					size = 12 << 10
				}
				require.Equal(t, filled(n, i, size), tg.Result, "job %d result %d", n, i)
			}
		}
		require.NoError(t, s.Close())
	}
}

// filled is a result of size bytes that only n, i and size determine.
func filled(n, i, size int) []byte {
	b := make([]byte, size)
	for k := range b {
		b[k] = byte(n*31 + i*7 + k)
	}
	return b
}

// groupBoundsFor keeps Open's bounds for its memtables and fits a group
// commit in Badger's largest transaction (15% of the memtable, in bytes
// and in skiplist nodes of up to 5 entries a write) for small ones.
func TestGroupBoundsFor(t *testing.T) {
	t.Parallel()
	require.Equal(t, groupBounds{writes: groupWrites, bytes: groupBytes}, groupBoundsFor(memTableSize))
	for _, mem := range []int64{MinMemTableSize, 1 << 20, 4 << 20} {
		b := groupBoundsFor(mem)
		maxBatch := 15 * mem / 100
		require.LessOrEqual(t, int64(b.bytes), maxBatch/2, "memtable %d", mem)
		require.LessOrEqual(t, int64(5*b.writes), maxBatch/int64(skl.MaxNodeSize), "memtable %d", mem)
		require.Positive(t, b.writes)
	}
}
