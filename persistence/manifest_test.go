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
