package persistence

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// A durable store syncs its directory when made durable, and then only
// when a sync finds a log file Badger created since (here a value-log
// file, as Badger names its next one): writes into the logs it has
// already synced the entries of cost no directory sync. A store that is
// not durable never syncs its directory.
func TestStore_DurableSyncsTheDirectoryOfANewLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	putJobRecord(t, s, 1, 1, 1, false)
	require.Zero(t, s.DirSyncs(), "not durable")
	require.NoError(t, s.SetDurable(true))
	require.Equal(t, int64(1), s.DirSyncs(), "SetDurable syncs the entries of the logs Open created")
	j := putJobRecord(t, s, 2, 1, 1, false)
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: make([]byte, 3000), Stored: 2}))
	require.Equal(t, int64(1), s.DirSyncs(), "no new file, no directory sync")
	f, err := newestLogs(dir)
	require.NoError(t, err)
	next := vlogPath(dir, f.vlog+1)
	require.NoError(t, os.WriteFile(next, nil, 0o644))
	t.Cleanup(func() { _ = os.Remove(next) })
	putJobRecord(t, s, 3, 1, 1, false)
	require.Equal(t, int64(2), s.DirSyncs(), "the sync that found a new value-log file synced the directory")
	putJobRecord(t, s, 4, 1, 1, false)
	require.Equal(t, int64(2), s.DirSyncs())
}

// syncDir fails on a directory that is not there.
func TestSyncDir_Missing(t *testing.T) {
	t.Parallel()
	require.Error(t, syncDir(t.TempDir()+"/gone"))
	require.NoError(t, syncDir(t.TempDir()))
}
