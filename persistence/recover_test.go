package persistence

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// powerCutAfterFlush leaves dir as a power cut leaves a store right after
// a memtable's flush (see the top of recover.go): it writes n jobs, keeps
// a copy of the memtable's log, closes the store (Badger flushes the
// memtable to a level-0 table, lists it, and deletes the log), then takes
// the new tables away and puts the log back. It returns the jobs and
// how many tables it took.
func powerCutAfterFlush(t *testing.T, dir string, n int) ([]JobRecord, int) {
	t.Helper()
	s, err := Open(dir)
	require.NoError(t, err)
	before := globSet(t, dir, "*.sst")
	var jobs []JobRecord
	for i := range n {
		jobs = append(jobs, putJobRecord(t, s, i+1, int64(i+1), 1, true))
	}
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	require.NoError(t, err)
	require.Len(t, mems, 1)
	log, err := os.ReadFile(mems[0])
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = os.Stat(mems[0])
	require.ErrorIs(t, err, os.ErrNotExist, "Close flushed the memtable and deleted its log")
	took := 0
	for name := range globSet(t, dir, "*.sst") {
		if !before[name] {
			require.NoError(t, os.Remove(name))
			took++
		}
	}
	require.NoError(t, os.WriteFile(mems[0], log, 0o644))
	return jobs, took
}

func globSet(t *testing.T, dir, pattern string) map[string]bool {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return set
}

// A store a power cut left right after a memtable's flush (its MANIFEST
// lists a level-0 table the directory lost; the memtable's log is back)
// opens: Open takes the table off the MANIFEST, says so (Recovery), and
// every job is read back from the log; the next Open repairs nothing.
func TestStore_OpenAfterCutAfterFlush(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobs, took := powerCutAfterFlush(t, dir, 20)
	require.Equal(t, 1, took)
	s, err := Open(dir)
	require.NoError(t, err)
	require.Equal(t, Recovery{UnlistedTables: 1}, s.Recovery())
	for _, j := range jobs {
		got, err := s.Job(j.ID)
		require.NoError(t, err, "job %s", j.ID)
		require.Equal(t, j.Caller, got.Caller)
	}
	n, err := s.CountBytes()
	require.NoError(t, err)
	require.Equal(t, n, s.Bytes())
	require.NoError(t, s.Close())
	s = mustOpen(t, dir)
	require.Equal(t, Recovery{}, s.Recovery())
	require.Len(t, mustJobs(t, s), len(jobs))
}

// A listed table that is missing where no memtable log can hold its rows
// is damage for a durable store (every log's directory entry is synced
// with its first write): Open refuses the store, and changes nothing in
// it. In the default mode it is what a power cut leaves (nothing syncs the
// directory: the log's creation is undone with the table's): Open unlists
// the table and counts it lost, and the store opens.
func TestStore_OpenMissingTableWithoutLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	powerCutAfterFlush(t, dir, 5)
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	require.NoError(t, err)
	for _, m := range mems {
		require.NoError(t, os.Remove(m))
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "MANIFEST"))
	require.NoError(t, err)
	_, err = OpenWith(dir, Options{Durable: true})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "1 tables missing, 0 memtable logs")
	after, err := os.ReadFile(filepath.Join(dir, "MANIFEST"))
	require.NoError(t, err)
	require.Equal(t, manifest, after, "a durable Open changes nothing")

	s := mustOpen(t, dir) // the default mode
	require.Equal(t, Recovery{UnlistedTables: 1, LostTables: 1}, s.Recovery())
	require.NoError(t, s.Jobs(func(JobRecord) bool { return true }), "the store reads")
	require.NoError(t, s.Close())
	s = mustOpen(t, dir)
	require.Equal(t, Recovery{}, s.Recovery(), "repaired once")
}

func mustJobs(t *testing.T, s *Store) []JobRecord {
	t.Helper()
	var js []JobRecord
	require.NoError(t, s.Jobs(func(j JobRecord) bool { js = append(js, j); return true }))
	return js
}
