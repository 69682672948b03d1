package persistence

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
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
// counted once, Badger reopened before the next write (reopen.go); a job's
// creation returns the error and the job is taken back.
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
	require.ErrorIs(t, err, ErrNotFound, "committed, not synced: taken back")
	_, found, err := s.JobByKey(j.Key)
	require.NoError(t, err)
	require.False(t, found, "never reused")
	all, _, err := s.AllJobs(nil, 10, nil)
	require.NoError(t, err)
	require.Len(t, all, 1, "listed: the first job only")
	counted, err = s.CountBytes()
	require.NoError(t, err)
	require.Equal(t, counted, s.Bytes(), "its bytes taken back")
	require.EqualValues(t, 1, s.Reopens(), "Badger reopened before the write after the first failed sync")
	k := putJobRecord(t, s, 3, 1, 1, false) // the next write reopens Badger
	require.EqualValues(t, 2, s.Reopens())
	_, err = s.Job(j.ID)
	require.ErrorIs(t, err, ErrNotFound, "still gone once Badger flushed and reopened")
	_, err = s.Job(k.ID)
	require.NoError(t, err)
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
