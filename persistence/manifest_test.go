package persistence

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// A MANIFEST whose last change set a failed sync lost: zeros where it was
// (Badger's Open refuses the store: a checksum mismatch), or nothing (it
// forgets the table that set listed, and deletes its file). relistTables,
// run as the store closes or reopens (manifest.go), lists it again (anew,
// or appended); the store's rows read back. A whole MANIFEST is left as
// it is.
func TestStore_RelistTablesAfterManifestHole(t *testing.T) {
	t.Parallel()
	for _, zeros := range []bool{true, false} {
		t.Run(fmt.Sprintf("zeros=%v", zeros), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir)
			j := putJobRecord(t, s, 1, 1, 1, false)
			require.NoError(t, s.Close()) // the memtable flushed to a table, listed last
			n, err := relistTables(dir, nil)
			require.NoError(t, err)
			require.Zero(t, n, "a whole MANIFEST needs nothing")

			path := filepath.Join(dir, badger.ManifestFilename)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			replay := func() (badger.Manifest, int64, error) {
				_, err := f.Seek(0, 0)
				require.NoError(t, err)
				return replayManifest(f, dir)
			}
			m, off, err := replay()
			require.NoError(t, err)
			require.NotEmpty(t, m.Tables)
			buf, err := os.ReadFile(path)
			require.NoError(t, err)
			last := int64(0) // where the change set that lists the last table starts
			for cut := int64(8); cut < off; cut++ {
				require.NoError(t, f.Truncate(cut))
				if mm, o, err := replay(); err == nil && o == cut && len(mm.Tables) < len(m.Tables) {
					last = cut
				}
			}
			require.NotZero(t, last, "no change set lists the last table")
			require.NoError(t, f.Truncate(last))
			if zeros {
				_, err = f.WriteAt(buf[:last], 0)
				require.NoError(t, err)
				_, err = f.WriteAt(make([]byte, off-last), last)
				require.NoError(t, err)
			}
			hole, _, err := replay()
			require.True(t, err != nil || len(hole.Tables) < len(m.Tables), "the hole hides a table")
			require.NoError(t, f.Close())

			n, err = relistTables(dir, nil)
			require.NoError(t, err)
			require.Positive(t, n)
			s2 := mustOpen(t, dir)
			got, err := s2.Job(j.ID)
			require.NoError(t, err, "the table the hole hid is listed again")
			require.Equal(t, j.ID, got.ID)
		})
	}
}

// TestOpen_ListsTablesAManifestHoleHides: a power cut after a failed sync
// of the MANIFEST, before Badger closed, leaves zeros where the change
// sets the sync lost were: at the end (Badger's Open reads them as empty
// sets, forgets the table they listed and deletes its file), or with a
// synced set after them (Badger refuses the store: the next set's bytes
// read out of step). Open lists the tables again (repairManifestHole)
// and every row reads back.
func TestOpen_ListsTablesAManifestHoleHides(t *testing.T) {
	t.Parallel()
	for _, middle := range []bool{false, true} {
		t.Run(fmt.Sprintf("middle=%v", middle), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, badger.ManifestFilename)
			size := func() int64 {
				info, err := os.Stat(path)
				require.NoError(t, err)
				return info.Size()
			}
			s := mustOpen(t, dir)
			j1 := putJobRecord(t, s, 1, 1, 1, false)
			before1 := size()
			require.NoError(t, s.Close()) // j1's memtable flushed to a table, listed in [before1, after1)
			after1 := size()
			s = mustOpen(t, dir)
			j2 := putJobRecord(t, s, 2, 2, 2, false)
			before2 := size()
			require.NoError(t, s.Close())
			after2 := size()
			require.Greater(t, after1, before1)
			require.Greater(t, after2, before2)

			from, to := before2, after2 // the last set lost
			if middle {
				from, to = before1, after1 // j1's set lost, j2's synced after it
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, to-from), from)
			require.NoError(t, err)
			m, _, err := replayManifest(f, dir)
			require.NoError(t, f.Close())
			tables, err2 := tableFiles(dir)
			require.NoError(t, err2)
			require.True(t, err != nil || len(m.Tables) < len(tables), "the hole hides a table from Badger")

			s = mustOpen(t, dir)
			require.Positive(t, s.Recovery().RelistedTables)
			for _, j := range []JobRecord{j1, j2} {
				got, err := s.Job(j.ID)
				require.NoError(t, err, "a table the hole hid is listed again")
				require.Equal(t, j.ID, got.ID)
			}
			require.NoError(t, s.Close())
			s = mustOpen(t, dir) // the MANIFEST written anew reads whole
			require.Zero(t, s.Recovery())
		})
	}
}
