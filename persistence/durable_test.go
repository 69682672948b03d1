package persistence

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

// A store in memory or read-only cannot be durable; turning it off always
// works, and a store opens not durable.
func TestStore_SetDurableRefused(t *testing.T) {
	t.Parallel()
	mem := mustOpen(t, "")
	require.False(t, mem.Durable())
	require.ErrorIs(t, mem.SetDurable(true), errDurableInMemory)
	require.False(t, mem.Durable())
	require.NoError(t, mem.SetDurable(false))

	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ro, err := OpenReadOnly(dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ro.Close()) })
	require.ErrorIs(t, ro.SetDurable(true), ErrReadOnly)
	require.False(t, ro.Durable())
}

// A durable store syncs once per group commit, after its commit and before
// any write of the group is answered, holding the write lock so that no
// other commit comes between; a job's creation is synced on its own. A
// store that is not durable never syncs.
func TestStore_DurableSyncsEachGroupOnce(t *testing.T) {
	t.Parallel()
	for _, durable := range []bool{false, true} {
		s := mustOpen(t, t.TempDir())
		require.NoError(t, s.SetDurable(durable))
		var syncs atomic.Int64
		var lockFree atomic.Bool
		s.SetSyncFault(func() error {
			if s.mu.TryLock() { // another commit could come in: a defect
				lockFree.Store(true)
				s.mu.Unlock()
			}
			syncs.Add(1)
			return nil
		})
		const jobs = 12
		recs := make([]JobRecord, jobs)
		for i := range recs {
			recs[i] = putJobRecord(t, s, i, 1, 1, false)
		}
		want := int64(0)
		if durable {
			want = jobs // one per CreateJob
		}
		require.Equal(t, want, s.Syncs())

		// The first write is held inside its commit while the others
		// queue: they make a second group.
		entered, release := holdWrites(s)
		// Each answer notes the syncs made by then: the first group's
		// write must see its sync, the second group's writes theirs.
		got := make(answers, jobs)
		seen := make(chan int64, jobs)
		done := func(what string) WriteDone {
			return func(err error, late bool) {
				seen <- s.Syncs()
				got.done(what)(err, late)
			}
		}
		s.SaveOutcomeRetried(recs[0].ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`"a"`)}, done("first"))
		<-entered
		for i := 1; i < jobs; i++ {
			s.SaveOutcomeRetried(recs[i].ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`"b"`)}, done("rest"))
		}
		release()
		for i := range jobs {
			a := got.next(t)
			require.NoError(t, a.err)
			n := <-seen
			if durable {
				group := int64(1)
				if i > 0 {
					group = 2
				}
				require.Equal(t, want+group, n, "%s answered before its group's sync", a.what)
			}
		}
		if durable {
			want += 2
		}
		require.Equal(t, want, s.Syncs(), "one sync per group")
		require.Equal(t, want, syncs.Load())
		require.False(t, lockFree.Load(), "the write lock was free during a sync")
	}
}

// A sync that fails answers the writes it covered with ErrNotSynced: a
// retried write is held, written again and synced, and answered only then
// (once, with no ErrRetrying before: nothing goes on past it), its bytes
// counted once; a job's creation returns the error, the job stored but
// seen by no reader until a write of it is synced.
func TestStore_DurableSyncFailure(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	require.NoError(t, s.SetDurable(true))
	s.SetRetryWait(1)
	a := putJobRecord(t, s, 1, 1, 1, false)
	var fails atomic.Int64
	fails.Store(1)
	s.SetSyncFault(func() error {
		if fails.Add(-1) >= 0 {
			return errDiskGone
		}
		return nil
	})
	got := make(answers, 2)
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: make([]byte, 2000)}, got.done("outcome"))
	require.Equal(t, answer{"outcome", nil, false}, got.next(t))
	require.Zero(t, fails.Load()+1, "the sync failed once")
	counted, err := s.CountBytes()
	require.NoError(t, err)
	require.Equal(t, counted, s.Bytes(), "the outcome's bytes counted once")
	_, ts, err := s.JobWithTargets(a.ID)
	require.NoError(t, err)
	require.Equal(t, TargetDone, ts[0].Status)
	require.Len(t, ts[0].Result, 2000)

	fails.Store(1)
	j := JobRecord{ID: testID(2), Caller: "bob", Status: StatusQueued, TargetsTotal: 1, Created: 1, Lease: 1}
	err = s.CreateJob(&j, []TargetRecord{{Idx: 0, URL: "http://c"}})
	require.ErrorIs(t, err, ErrNotSynced)
	require.NotContains(t, err.Error(), s.Dir())
	_, err = s.Job(j.ID)
	require.ErrorIs(t, err, ErrNotFound, "committed, not synced: hidden")
	_, found, err := s.JobByKey(j.Key)
	require.NoError(t, err)
	require.False(t, found, "never reused")
	all, _, err := s.AllJobs(nil, 10, nil)
	require.NoError(t, err)
	require.Len(t, all, 1, "listed: the first job only")
	j.Status, j.Settled = StatusFailed, true
	require.NoError(t, s.SaveJob(&j))
	got2, err := s.Job(j.ID)
	require.NoError(t, err, "seen once a write of it is synced")
	require.Equal(t, StatusFailed, got2.Status)
}

var errDiskGone = errors.New("input/output error")

// BenchmarkStore_DurableWrites weighs a durable store's one sync per group
// commit against Badger's own SyncWrites (a sync in every commit, whatever
// it writes) and against no sync: writers goroutines, each the owner of
// one live job, write one outcome after another (each waiting for its
// write, as a job waits for its target's), on a directory store. One op is
// one outcome written.
//
// It reports writes/s; disk-syncs/s, the disk's 4 KiB O_DSYNC writes per
// second in the store's directory just before the run; and, for the group
// sync, writes/sync.
func BenchmarkStore_DurableWrites(b *testing.B) {
	for _, writers := range []int{1, 8, 32} {
		for _, mode := range []string{"process", "group-sync", "syncwrites"} {
			b.Run(fmt.Sprintf("writers=%d/%s", writers, mode), func(b *testing.B) {
				dir := b.TempDir()
				disk, err := testkit.DiskSyncRate(dir, 300*time.Millisecond)
				if err != nil {
					b.Fatal(err)
				}
				s, err := open(dir, mode == "syncwrites")
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if err := s.SetDurable(mode == "group-sync"); err != nil {
					b.Fatal(err)
				}
				jobs := make([]JobRecord, writers)
				for i := range jobs {
					jobs[i] = putJobRecord(b, s, i, 1, 1, false)
				}
				var next atomic.Int64
				errs := make(chan error, writers)
				syncs := s.Syncs()
				b.ResetTimer()
				for w := range writers {
					go func() {
						var err error
						for i := next.Add(1); i <= int64(b.N) && err == nil; i = next.Add(1) {
							err = s.SaveOutcome(jobs[w].ID, &TargetRecord{Idx: int(i % 0xffff), Status: TargetDone, Result: []byte(`"ok"`), Stored: i})
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
				b.ReportMetric(disk, "disk-syncs/s")
				if n := s.Syncs() - syncs; n > 0 {
					b.ReportMetric(float64(b.N)/float64(n), "writes/sync")
				}
			})
		}
	}
}

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
		for _, e := range es {
			if filepath.Ext(e.Name()) == ".mem" {
				mems[e.Name()] = true
			}
		}
		return nil
	})
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
