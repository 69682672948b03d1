package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// fillStore writes jobs with small and large results (the large ones go to
// Badger's value log) into a fresh directory store and closes it.
func fillStore(t *testing.T, dir string) []string {
	t.Helper()
	s, err := Open(dir)
	require.NoError(t, err)
	var ids []string
	for n := range 40 {
		j := putJobRecord(t, s, n, int64(n), int64(n), false)
		res := []byte(fmt.Sprintf(`{"content":%q}`, bytes.Repeat([]byte{'a' + byte(n%26)}, 100+n%3*40_000)))
		j.Status, j.TargetsDone, j.ResultBytes = StatusRunning, 1, int64(len(res))
		require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone, Result: res}))
		if n%2 == 0 {
			j.Status, j.TargetsDone, j.TargetsFailed, j.Settled = StatusPartial, 2, 1, true
			require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 1, Status: TargetFailed, Error: "e"}))
		}
		ids = append(ids, j.ID)
	}
	require.NoError(t, s.Close())
	return ids
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.CopyFS(to, os.DirFS(from)))
}

// damage is one way to damage a file.
type damage struct {
	name string
	do   func(b []byte) []byte
}

var damages = []damage{
	{"empty", func([]byte) []byte { return nil }},
	{"half", func(b []byte) []byte { return b[:len(b)/2] }},
	{"short-by-one", func(b []byte) []byte {
		if len(b) == 0 {
			return b
		}
		return b[:len(b)-1]
	}},
	{"garbage-head", func(b []byte) []byte {
		c := bytes.Clone(b)
		copy(c, bytes.Repeat([]byte{0xa5}, min(len(c), 64)))
		return c
	}},
	{"flipped-middle", func(b []byte) []byte {
		c := bytes.Clone(b)
		for i := len(c) / 3; i < len(c)/3+16 && i < len(c); i++ {
			c[i] ^= 0xff
		}
		return c
	}},
	{"zeroed-tail", func(b []byte) []byte {
		c := bytes.Clone(b)
		clear(c[len(c)*3/4:])
		return c
	}},
}

// TestStore_OpenDamaged damages each file of a store directory in each of
// several ways (emptied, truncated, overwritten, bits flipped), then opens
// it and reads every job: Open gives an error wrapping ErrCorrupt, or opens
// and every read gives its rows or an error; nothing panics.
func TestStore_OpenDamaged(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	ids := fillStore(t, base)
	var files []string
	require.NoError(t, filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != "LOCK" {
			files = append(files, d.Name())
		}
		return err
	}))
	sort.Strings(files)
	require.NotEmpty(t, files)

	refused, opened, readErrs := 0, 0, 0
	for _, f := range files {
		for _, dm := range damages {
			t.Run(f+"/"+dm.name, func(t *testing.T) {
				dir := t.TempDir()
				copyDir(t, base, dir)
				p := filepath.Join(dir, f)
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(p, dm.do(b), 0o644))

				s, err := Open(dir)
				if err != nil {
					require.ErrorIs(t, err, ErrCorrupt, "a damaged store is refused with ErrCorrupt")
					require.NotContains(t, err.Error(), "\n")
					refused++
					return
				}
				opened++
				readErrs += readAll(t, s, ids)
				require.NoError(t, s.Close())
			})
		}
	}
	t.Run("StrayTable", func(t *testing.T) {
		// A table a crash left half written is not in the MANIFEST: the
		// store opens (Badger deletes it), nothing is lost.
		dir := t.TempDir()
		copyDir(t, base, dir)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "999999.sst"), bytes.Repeat([]byte{0xa5}, 5000), 0o644))
		s, err := Open(dir)
		require.NoError(t, err)
		require.Zero(t, readAll(t, s, ids))
		require.NoError(t, s.Close())
	})
	t.Logf("damaged stores: %d files × %d damages: %d refused by Open (ErrCorrupt), %d opened (%d reads gave an error)",
		len(files), len(damages), refused, opened, readErrs)
}

// readAll reads everything a runner would and returns how many reads
// failed; it fails t only on a panic (which the test would see anyway).
func readAll(t *testing.T, s *Store, ids []string) int {
	t.Helper()
	errs := 0
	count := func(err error) {
		if err != nil {
			errs++
			require.False(t, errors.Is(err, ErrClosed))
		}
	}
	_, err := s.Unsettled()
	count(err)
	count(s.Jobs(func(JobRecord) bool { return true }))
	for _, id := range ids {
		j, _, err := s.JobWithTargets(id)
		count(err)
		if err == nil {
			_, found, err := s.JobByKey(j.Key)
			count(err)
			_ = found
		}
	}
	_, _, err = s.Sweep(1<<62, 1000)
	count(err)
	_, err = s.Evict(0)
	count(err)
	return errs
}

// TestStore_OpenAfterCrashLeftAnEmptyFile is the regression test for two
// crash test failures: a process killed just after Badger created a new
// memtable file (its write-ahead log) before it sized it, or a value-log
// file before its header was written, leaves the file empty, and Badger
// alone then refused the store ("while opening memtables … Create a new
// file").
func TestStore_OpenAfterCrashLeftAnEmptyFile(t *testing.T) {
	for _, name := range []string{"00009.mem", "000009.vlog"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			require.NoError(t, err)
			j := putJobRecord(t, s, 1, 1, 1, false)
			require.NoError(t, s.Close())
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))

			s = mustOpen(t, dir)
			got, err := s.Job(j.ID)
			require.NoError(t, err, "the rows are all there")
			require.Equal(t, j.ID, got.ID)
			require.NoError(t, s.WriteProbe([]byte("k"), []byte("v")), "and it takes writes")
		})
	}
}
