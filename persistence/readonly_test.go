package persistence

import (
	"bytes"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fileState is what a test compares of a file: enough that any write to
// it shows.
type fileState struct {
	size  int64
	mtime time.Time
	mode  fs.FileMode
	sum   [32]byte
}

// snapshot returns the state of every file and directory under dir.
func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	files := map[string]fileState{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{size: info.Size(), mtime: info.ModTime(), mode: info.Mode()}
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st.sum = sha256.Sum256(b)
		}
		files[p] = st
		return nil
	}))
	return files
}

// fillForReading writes, through a store that then closes, a settled job
// with a small and a chunked result and a failure, and a live job with one
// target stored.
func fillForReading(t *testing.T, dir string) (settled, live JobRecord, long []byte) {
	t.Helper()
	s, err := Open(dir)
	require.NoError(t, err)
	settled = putJobRecord(t, s, 1, 10, 10, false)
	long = result(resultChunkSize+10, 1)
	require.NoError(t, s.SaveOutcome(settled.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: long, Stored: 11}))
	settled.Status, settled.Settled, settled.TargetsDone, settled.TargetsFailed, settled.ResultBytes, settled.Lease = StatusPartial, true, 2, 1, int64(len(long)), 12
	require.NoError(t, s.SaveTarget(&settled, &TargetRecord{Idx: 1, Status: TargetFailed, Error: "e", Stored: 12}))
	live = putJobRecord(t, s, 2, 20, 20, false)
	require.NoError(t, s.SaveOutcome(live.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`{"c":1}`), Stored: 21}))
	require.NoError(t, s.Close())
	return settled, live, long
}

// TestStore_OpenReadOnly opens a store a Store wrote and closed, reads it
// every way, tries every write, and closes it: no file of the directory
// changes (names, sizes, modes, mtimes, contents), and no file is added,
// not even a lock file.
func TestStore_OpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	settled, live, long := fillForReading(t, dir)
	before := snapshot(t, dir)

	s, err := OpenReadOnly(dir)
	require.NoError(t, err)
	require.Greater(t, requireCounted(t, s), int64(len(long)+7), "every row counted, the results too")

	// Reads.
	j, ts, err := s.JobWithTargets(settled.ID)
	require.NoError(t, err)
	require.Equal(t, settled, j)
	require.True(t, bytes.Equal(long, ts[0].Result))
	_, statuses, err := s.TargetStatuses(settled.ID)
	require.NoError(t, err)
	require.Equal(t, int64(len(long)), statuses[0].ResultSize)
	res, err := s.ResultJSON(settled.ID, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(long, res))
	lj, err := s.Job(live.ID)
	require.NoError(t, err)
	require.Equal(t, 1, lj.TargetsDone)
	left, err := s.Unsettled()
	require.NoError(t, err)
	require.Len(t, left, 1)
	n := 0
	require.NoError(t, s.Jobs(func(JobRecord) bool { n++; return true }))
	require.Equal(t, 2, n)
	_, found, err := s.JobByKey(settled.Key)
	require.NoError(t, err)
	require.True(t, found)

	// Another reader shares the directory; a writer does not get in.
	s2, err := OpenReadOnly(dir)
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	_, err = Open(dir)
	require.ErrorIs(t, err, ErrInUse)

	// Writes: an error, never a panic, nothing written.
	next := settled
	next.ID = testID(3)
	require.ErrorIs(t, s.CreateJob(&next, nil), ErrReadOnly)
	require.ErrorIs(t, s.SaveJob(&lj), ErrReadOnly)
	require.ErrorIs(t, s.SaveTarget(&lj, &TargetRecord{Idx: 1, Status: TargetDone, Result: long}), ErrReadOnly)
	require.ErrorIs(t, s.SaveOutcome(live.ID, &TargetRecord{Idx: 1, Status: TargetFailed}), ErrReadOnly)
	done := make(chan error, 1)
	s.SaveOutcomeAsync(live.ID, &TargetRecord{Idx: 1, Status: TargetFailed}, func(err error) { done <- err })
	require.ErrorIs(t, <-done, ErrReadOnly)
	_, err = s.Touch(settled.ID, 100)
	require.ErrorIs(t, err, ErrReadOnly)
	_, _, err = s.Sweep(1<<62, 10)
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = s.Evict(0)
	require.ErrorIs(t, err, ErrReadOnly)
	require.ErrorIs(t, s.WriteProbe([]byte("k"), []byte("v")), ErrReadOnly)
	require.NoError(t, s.Close())

	require.Equal(t, before, snapshot(t, dir), "no byte changed")

	// And a writer opens it after: it was left as it was.
	w := mustOpen(t, dir)
	got, err := w.Job(settled.ID)
	require.NoError(t, err)
	require.Equal(t, settled, got)
}

// A store a writer holds is refused with ErrInUse, not taken for one a
// crash left (its memtable log is there while it runs).
func TestStore_OpenReadOnlyInUse(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir)
	putJobRecord(t, w, 1, 1, 1, false)
	_, err := OpenReadOnly(dir)
	require.ErrorIs(t, err, ErrInUse)
}

// A directory that is not a store is refused with ErrNoStore, and left as
// it was: nothing is created.
func TestStore_OpenReadOnlyNoStore(t *testing.T) {
	base := t.TempDir()
	missing := filepath.Join(base, "missing")
	empty := filepath.Join(base, "empty")
	other := filepath.Join(base, "other")
	file := filepath.Join(base, "file")
	require.NoError(t, os.Mkdir(empty, 0o755))
	require.NoError(t, os.Mkdir(other, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes.txt"), []byte("not a store"), 0o644))
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	before := snapshot(t, base)
	for _, dir := range []string{missing, empty, other, file, ""} {
		_, err := OpenReadOnly(dir)
		require.ErrorIs(t, err, ErrNoStore, "%q", dir)
	}
	require.Equal(t, before, snapshot(t, base))
}

// A store a crash left to recover is refused with ErrUnclean, and left as
// it was; Open recovers it, and then it opens read-only.
func TestStore_OpenReadOnlyUnclean(t *testing.T) {
	base := t.TempDir()
	closed := filepath.Join(base, "closed")
	settled, _, _ := fillForReading(t, closed)

	cases := map[string]func(t *testing.T, dir string){
		// The directory of a store still open (in this process): as a
		// process killed now would leave it, memtable log and all.
		"killed": func(t *testing.T, dir string) {
			live, err := Open(closed)
			require.NoError(t, err)
			j := putJobRecord(t, live, 9, 1, 1, false)
			require.NoError(t, live.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: result(resultChunkSize+1, 2)}))
			require.NoError(t, os.CopyFS(dir, os.DirFS(closed)))
			require.NoError(t, live.Close())
			require.NoError(t, os.Remove(filepath.Join(dir, "LOCK")))
		},
		"stray-table": func(t *testing.T, dir string) {
			require.NoError(t, os.CopyFS(dir, os.DirFS(closed)))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "999999.sst"), bytes.Repeat([]byte{0xa5}, 5000), 0o644))
		},
		"empty-vlog": func(t *testing.T, dir string) {
			require.NoError(t, os.CopyFS(dir, os.DirFS(closed)))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "000009.vlog"), nil, 0o644))
		},
	}
	for name, prepare := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			prepare(t, dir)
			before := snapshot(t, dir)
			_, err := OpenReadOnly(dir)
			require.ErrorIs(t, err, ErrUnclean)
			require.Equal(t, before, snapshot(t, dir), "left as it was")

			w, err := Open(dir)
			require.NoError(t, err)
			require.NoError(t, w.Close())
			r, err := OpenReadOnly(dir)
			require.NoError(t, err, "recovered by Open")
			got, err := r.Job(settled.ID)
			require.NoError(t, err)
			require.Equal(t, settled, got)
			require.NoError(t, r.Close())
		})
	}
}
