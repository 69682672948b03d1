package persistence

import (
	"os"
	"path/filepath"
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

// TestStore_OpenOnFullDiskAfterCrash: the store a crash left (its files as
// a SIGKILL leaves them: a memtable log holding the last writes, not
// flushed, and an unfinished value-log file) opens on a full disk too,
// read-only: upstream Badger refuses such a log read-only, so the node
// served nothing after a crash on a full disk. The writes only the log
// holds read back, a result in the value log too; writes fail with
// ErrDiskFull; once there is room a write opens it for writing, and
// nothing is lost. Root only.
func TestStore_OpenOnFullDiskAfterCrash(t *testing.T) {
	testkit.Long(t)
	mnt := testkit.MountTmpfs(t, 96<<20)
	src := t.TempDir()
	s := mustOpen(t, src)
	j := putJobRecord(t, s, 1, 1, 1, false)
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: result(3000, 1), Stored: 2}))
	dir := filepath.Join(mnt, "store")
	copyCrashImage(t, src, dir) // the store as a crash leaves it: Badger has it open
	require.NoError(t, s.Close())
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	require.NoError(t, err)
	require.NotEmpty(t, mems, "a crash leaves a memtable log")
	filler := testkit.FillDisk(t, mnt, 0)

	s, err = Open(dir)
	require.NoError(t, err, "a full disk opens the store a crash left, for reads")
	t.Cleanup(func() { _ = s.Close() })
	require.True(t, s.OpenedFull())
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 1}))
	got, ts, err := s.JobWithTargets(j.ID)
	require.NoError(t, err, "the rows only the memtable log holds read")
	require.Equal(t, StatusQueued, got.Status)
	require.Equal(t, TargetDone, ts[0].Status)
	require.Equal(t, result(3000, 1), ts[0].Result, "a result in the value log, its pointer in the log")
	err = s.SaveOutcome(j.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: result(3000, 2), Stored: 3})
	require.ErrorIs(t, err, ErrDiskFull)

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
	require.Equal(t, result(3000, 1), ts[0].Result)
	require.Equal(t, result(3000, 2), ts[1].Result)
	counted, err := s2.CountBytes()
	require.NoError(t, err)
	require.Equal(t, counted, s2.Bytes())
	require.NoError(t, s2.Close())
}

// copyCrashImage copies the files of the store in src, which a Store has
// open, to dst: what a crash of its process would leave (every write it
// made is in the page cache, so in what a read sees).
func copyCrashImage(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	es, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
}
