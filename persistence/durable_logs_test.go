package persistence

// A durable store's logs: what its syncs leave dirty, GC, the commit delay.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A durable store's value-log GC with nothing to collect holds nothing
// open; making a GC's moves durable waits for no flush with one memtable
// and syncs; the store closes after both. (A GC that moves entries needs a
// value-log file of 64 MiB written, flushed and compacted: not here.)
func TestStore_DurableGC(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	require.NoError(t, s.SetDurable(true))
	putJobRecord(t, s, 1, 1, 1, false)
	require.Error(t, s.runGC(), "nothing to collect")
	require.Empty(t, s.gcHolds)
	n, err := memtableLogs(s.dir)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	before := s.Syncs()
	s.mu.Lock()
	err = s.gcDurableLocked()
	s.mu.Unlock()
	require.NoError(t, err)
	require.Equal(t, before+1, s.Syncs())
}

// errNoCachestat: the kernel has no cachestat(2) (before Linux 6.5).
var errNoCachestat = errors.New("no cachestat")

// dirtyLogs returns, for each of Badger's logs in dir (the memtables'
// *.mem and the value log's *.vlog), how many of its pages the kernel holds
// dirty or under writeback (cachestat(2)): what a power cut would lose. A
// log deleted meanwhile is skipped. The test is skipped on a kernel
// without cachestat.
func dirtyLogs(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	dirty, err := logsDirty(dir)
	if errors.Is(err, errNoCachestat) {
		t.Skip(err)
	}
	require.NoError(t, err)
	return dirty
}

func logsDirty(dir string) (map[string]uint64, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	dirty := map[string]uint64{}
	for _, e := range es {
		if ext := filepath.Ext(e.Name()); ext != ".mem" && ext != ".vlog" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var cs unix.Cachestat_t
		err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0)
		_ = f.Close()
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: %v", errNoCachestat, err)
		}
		if err != nil {
			return nil, err
		}
		if n := cs.Dirty + cs.Writeback; n > 0 {
			dirty[e.Name()] = n
		}
	}
	return dirty, nil
}

// Once a durable store has answered a write (a job's creation, a target's
// outcome with a result in the value log, a job's row), no page of its
// logs is left dirty in the kernel: the answer came after the sync, as
// the kernel itself tells. The same writes on a store that is not durable
// leave dirty pages (so the check can fail).
func TestStore_DurableAnswerLeavesNoDirtyLog(t *testing.T) {
	t.Parallel()
	for _, durable := range []bool{true, false} {
		dir := t.TempDir()
		s := mustOpen(t, dir)
		require.NoError(t, s.SetDurable(durable))
		j := putJobRecord(t, s, 1, 1, 1, false)
		created := dirtyLogs(t, dir)
		require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: make([]byte, 3000), Stored: 2}))
		outcome := dirtyLogs(t, dir)
		j.Status, j.Settled = StatusDone, true
		require.NoError(t, s.SaveJob(&j))
		settled := dirtyLogs(t, dir)
		if durable {
			require.Empty(t, created, "dirty after CreateJob returned")
			require.Empty(t, outcome, "dirty after SaveOutcome returned")
			require.Empty(t, settled, "dirty after SaveJob returned")
			continue
		}
		require.NotEmpty(t, settled, "a store that is not durable syncs nothing")
	}
}

// A durable store's sync leaves none of its logs dirty, also when the
// group it covers filled a memtable: Badger's DB.Sync syncs only the
// current memtable's log, and a memtable that fills is set aside for a
// flush without a sync, so a group whose results' chunk transactions went
// into the memtable that filled (and its outcome rows into the next one)
// must have that memtable's log synced too before it is answered (or wait
// for its flush). Results of 1000 bytes: a chunk row each (over 512
// bytes), in the memtable (under Badger's 1 KiB value threshold).
func TestStore_DurableSyncCoversTheMemtableThatFilled(t *testing.T) {
	syncsAcrossMemtables(t, 1000)
}

// The same with results inline in their outcome rows (500 bytes): each
// group is one transaction, which Badger puts in one memtable whole, so
// the sync covers it however the memtables fill.
func TestStore_DurableSyncLeavesNoDirtyLogAcrossMemtables(t *testing.T) {
	if testing.Short() {
		t.Skip("fills two 16 MiB memtables through synced groups: about 10 s")
	}
	syncsAcrossMemtables(t, 500)
}

// syncsAcrossMemtables has writers write outcomes with results of
// resultLen bytes until two memtables have filled, and checks that right
// after each of the store's syncs (its sync fault hook, under the write
// lock) no page of a log is dirty (cachestat(2)).
func syncsAcrossMemtables(t *testing.T, resultLen int) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	require.NoError(t, s.SetDurable(true))
	dirtyLogs(t, dir) // skips without cachestat
	const writers = 16
	jobs := make([]JobRecord, writers)
	for i := range jobs {
		jobs[i] = putJobRecord(t, s, i+1, 1, 1, false)
	}
	var (
		mu     sync.Mutex
		found  []string
		mems   = map[string]bool{}
		failed error
		// dirSynced: the newest memtable log when the directory was
		// last synced; newer ones seen at a sync without a directory
		// sync are unsyncedDir.
		dirSynced   string
		dirSyncs    int64
		unsyncedDir []string
	)
	s.SetSyncFault(func() error {
		dirty, err := logsDirty(dir)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = err
			return nil
		}
		for name := range dirty {
			found = append(found, fmt.Sprintf("%s: %d pages", name, dirty[name]))
		}
		es, _ := os.ReadDir(dir)
		newest := ""
		for _, e := range es {
			if filepath.Ext(e.Name()) == ".mem" {
				mems[e.Name()] = true
				newest = max(newest, e.Name())
			}
		}
		if n := s.DirSyncs(); n != dirSyncs {
			dirSyncs, dirSynced = n, newest
		} else if newest > dirSynced {
			unsyncedDir = append(unsyncedDir, newest)
		}
		return nil
	})
	dirSyncs = s.DirSyncs()
	require.Equal(t, int64(1), dirSyncs, "SetDurable syncs the directory once")
	dirSynced = newestMem(t, dir)
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(found) > 0 || failed != nil || len(mems) >= 3
	}
	result := make([]byte, resultLen)
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			var err error
			for i := 0; err == nil && !done(); i++ {
				err = s.SaveOutcome(jobs[w].ID, &TargetRecord{Idx: i % 2, Status: TargetDone, Result: result, Stored: int64(i + 2)})
			}
			errs <- err
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	s.SetSyncFault(nil)
	require.NoError(t, failed)
	require.GreaterOrEqual(t, len(mems), 2, "no memtable filled")
	require.Empty(t, found, "log pages dirty right after a sync; memtable logs seen: %v", mems)
	require.Empty(t, unsyncedDir, "a sync answered writes in a new memtable log whose directory entry was not synced")
	require.Greater(t, dirSyncs, int64(1), "no directory sync for the new memtable logs")
}

// newestMem is the name of the newest memtable log in dir.
func newestMem(t *testing.T, dir string) string {
	t.Helper()
	f, err := newestLogs(dir)
	require.NoError(t, err)
	return filepath.Base(memLogPath(dir, f.mem))
}

// A durable store's writer waits, before it commits a group, for as many
// writes as its recent groups held (the commit delay): once a group of 4
// has been seen, 4 writes queued one after another (each by a job of its
// own, none waiting) go in one group under one sync, with a delay far
// longer than the test, so only the 4th write's arrival can end it (the
// writer is seen waiting with the first write queued).
func TestStore_DurableCommitDelayGathersAGroup(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	require.NoError(t, s.SetDurable(true))
	s.SetCommitDelay(time.Hour)
	jobs := make([]JobRecord, 5)
	for i := range jobs {
		jobs[i] = putJobRecord(t, s, i+1, 1, 1, false)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	s.SetSyncFault(func() error {
		if held.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	})
	got := make(answers, 8)
	write := func(j, idx int) {
		s.SaveOutcomeRetried(jobs[j].ID, &TargetRecord{Idx: idx, Status: TargetDone, Result: []byte(`"a"`)}, got.done(jobs[j].ID))
	}
	write(0, 0) // a group of 1 (no delay: no group of more yet), held in its sync
	testkit.Recv(t, entered)
	for j := 1; j <= 4; j++ {
		write(j, 0) // queued while the sync is held: the next group holds 4
	}
	close(release)
	for range 5 {
		require.NoError(t, got.next(t).err)
	}
	before := s.Syncs()
	write(1, 1)
	testkit.WaitFor(t, "the writer waiting for 4 writes with 1 queued", func() bool {
		s.q.mu.Lock()
		defer s.q.mu.Unlock()
		return s.q.want == 4 && len(s.q.writes) == 1
	})
	for j := 2; j <= 4; j++ {
		write(j, 1)
	}
	for range 4 {
		require.NoError(t, got.next(t).err)
	}
	require.Equal(t, before+1, s.Syncs(), "the 4 writes went in one synced group")
}
