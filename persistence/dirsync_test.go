package persistence

import (
	"fmt"
	"os"
	"sync/atomic"
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

// BenchmarkStore_DirSync weighs a durable store's directory syncs
// (dirsync.go) against none, side by side in each run (dirsync=on, then
// off): writers goroutines each write outcomes of one live job, with
// results of size bytes (64 KiB: the value log, whose 64 MiB files fill
// every ~1,000 writes; 100 bytes: inline, the memtable's log, 16 MiB). One
// op is one outcome written. It reports writes/s and dir-syncs (the
// directory syncs of the run).
func BenchmarkStore_DirSync(b *testing.B) {
	for _, size := range []int{100, 64 << 10} {
		for _, on := range []bool{true, false} {
			name := fmt.Sprintf("result=%d/dirsync=%s", size, map[bool]string{true: "on", false: "off"}[on])
			b.Run(name, func(b *testing.B) {
				const writers = 8
				s, err := Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				s.noDirSync = !on
				if err := s.SetDurable(true); err != nil {
					b.Fatal(err)
				}
				jobs := make([]JobRecord, writers)
				for i := range jobs {
					jobs[i] = putJobRecord(b, s, i, 1, 1, false)
				}
				result := make([]byte, size)
				var next atomic.Int64
				errs := make(chan error, writers)
				before := s.DirSyncs()
				b.ResetTimer()
				for w := range writers {
					go func() {
						var err error
						for i := next.Add(1); i <= int64(b.N) && err == nil; i = next.Add(1) {
							err = s.SaveOutcome(jobs[w].ID, &TargetRecord{Idx: int(i % 0xffff), Status: TargetDone, Result: result, Stored: i})
						}
						errs <- err
					}()
				}
				for range writers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
				b.ReportMetric(float64(s.DirSyncs()-before), "dir-syncs")
			})
		}
	}
}

// mkdirSynced creates every missing directory of a path (and is fine
// with one that exists).
func TestMkdirSynced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/a/b/c"
	require.NoError(t, mkdirSynced(dir))
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, st.IsDir())
	require.NoError(t, mkdirSynced(dir))
	require.Error(t, mkdirSynced("/proc/self/status/x"))
}
