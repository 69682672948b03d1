package persistence

import (
	"os"
	"testing"

	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

// TestStore_OpenOnFullDisk: a store closed cleanly, its disk then filled by
// another process (a real tmpfs), opens: Badger cannot create its new
// files, so it is open read-only. Every read works, a write fails with
// ErrDiskFull; once the filler is removed and the watch has measured the
// room, the next write opens Badger for writing and is stored, and a
// reopened store reads it. Root only.
func TestStore_OpenOnFullDisk(t *testing.T) {
	testkit.Long(t)
	mnt := testkit.MountTmpfs(t, 96<<20)
	dir := mnt + "/store"
	s := mustOpen(t, dir)
	j := putJobRecord(t, s, 1, 1, 1, false)
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: result(3000, 1), Stored: 2}))
	require.NoError(t, s.Close())
	filler := testkit.FillDisk(t, mnt, 0)

	s, err := Open(dir)
	require.NoError(t, err, "a full disk opens the store for reads")
	t.Cleanup(func() { _ = s.Close() })
	require.True(t, s.OpenedFull())
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 1}))
	_, ts, err := s.JobWithTargets(j.ID)
	require.NoError(t, err, "reads work")
	require.Equal(t, result(3000, 1), ts[0].Result)
	err = s.SaveOutcome(j.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: result(3000, 2), Stored: 3})
	require.ErrorIs(t, err, ErrDiskFull)
	k := JobRecord{ID: testID(2), Caller: "bob", Status: StatusQueued, TargetsTotal: 1, Created: 2, Lease: 2}
	require.ErrorIs(t, s.CreateJob(&k, nil), ErrDiskFull)

	require.NoError(t, os.Remove(filler))
	_, err = s.MeasureDisk()
	require.NoError(t, err)
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: result(3000, 2), Stored: 3}),
		"room again: the write opens the store for writing")
	require.False(t, s.OpenedFull())
	require.NoError(t, s.Close())

	s2 := mustOpen(t, dir)
	_, ts, err = s2.JobWithTargets(j.ID)
	require.NoError(t, err)
	require.Equal(t, result(3000, 2), ts[1].Result)
	counted, err := s2.CountBytes()
	require.NoError(t, err)
	require.Equal(t, counted, s2.Bytes())
}
