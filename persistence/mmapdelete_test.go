package persistence

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/ristretto/v2/z"
	"github.com/stretchr/testify/require"
)

// Badger deletes a flushed memtable's log with (*z.MmapFile).Delete and
// syncs no directory: a power cut can undo the delete, and the log must
// then come back with its rows (the table flushed from it is undone
// too). Upstream ristretto truncates the file to 0 before it removes it,
// so that an fsync in between (a durable store syncs the logs Badger set
// aside) made the log come back empty (the power-cut test, seed 3511);
// persistence/internal/ristretto removes it whole. A second link to the
// file shows what a cut that undoes the remove would find.
func TestMmapFileDelete_LeavesTheContent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "00002.mem")
	m, err := z.OpenMmapFile(path, os.O_CREATE|os.O_RDWR, 1<<16)
	if err != nil && err != z.NewFile {
		t.Fatal(err)
	}
	rows := bytes.Repeat([]byte("acknowledged row "), 1000)
	copy(m.Data, rows)
	require.NoError(t, m.Sync())
	undone := path + ".undone"
	require.NoError(t, os.Link(path, undone)) // the name a cut would bring back
	f, err := os.Open(path)                   // a durable store's sync of the log
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, m.Delete())
	require.NoError(t, f.Sync())
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "deleted")
	got, err := os.ReadFile(undone)
	require.NoError(t, err)
	require.Equal(t, int64(1<<16), int64(len(got)), "not truncated")
	require.Equal(t, rows, got[:len(rows)])
}
