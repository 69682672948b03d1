package persistence

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// settledJob stores a settled job of 2 targets with the given lease,
// creation time and result bytes.
func settledJob(t *testing.T, s *Store, n int, created, lease, bytes int64) JobRecord {
	t.Helper()
	j := JobRecord{ID: testID(n), Caller: "alice", Status: StatusDone, Settled: true, TargetsTotal: 2,
		Created: created, Lease: lease, ResultBytes: bytes}
	j.Key[0], j.Key[1] = byte(n>>8), byte(n)
	require.NoError(t, s.CreateJob(&j, []TargetRecord{{Idx: 0, URL: "http://a"}, {Idx: 1, URL: "http://b"}}))
	return j
}

func exists(t *testing.T, s *Store, id string) bool {
	t.Helper()
	_, err := s.Job(id)
	if err != nil {
		require.ErrorIs(t, err, ErrNotFound)
	}
	return err == nil
}

// TestStore_SweepAndEvictStartWhereTheyStopped is the regression test for a
// slowdown make soak found: every sweep (one per Submit) and every eviction
// walked its index from the start, over the tombstone of every job deleted
// before, until compaction dropped them: at 30,000 jobs the runner did a
// tenth of its first jobs per second. They now start where the last one
// stopped; this checks that a job indexed below that point is still swept
// and evicted.
func TestStore_SweepAndEvictStartWhereTheyStopped(t *testing.T) {
	s := mustOpen(t, "")
	for i := range 10 {
		settledJob(t, s, i, int64(100+i), int64(100+i), 10)
	}
	n, more, err := s.Sweep(104, 100)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	require.False(t, more)
	require.NotNil(t, s.sweepFrom, "the next sweep starts at lease 105")

	// A job settled with an old lease (a cancel) is indexed below that.
	old := settledJob(t, s, 50, 50, 50, 10)
	n, _, err = s.Sweep(104, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the job below the start is swept")
	require.False(t, exists(t, s, old.ID))
	n, _, err = s.Sweep(106, 100)
	require.NoError(t, err)
	require.Equal(t, 2, n, "leases 105 and 106")

	// Touch moves a lease later: still swept at its new lease.
	touched := settledJob(t, s, 60, 200, 200, 10)
	ok, err := s.Touch(touched.ID, 300)
	require.NoError(t, err)
	require.True(t, ok)
	n, _, err = s.Sweep(299, 100)
	require.NoError(t, err)
	require.Equal(t, 3, n, "leases 107–109, not the touched one")
	require.True(t, exists(t, s, touched.ID))
	n, _, err = s.Sweep(300, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// Eviction: oldest creation first, from where the last one stopped.
	for i := range 6 {
		settledJob(t, s, 100+i, int64(1000+i), int64(1000+i), 100)
	}
	u := jobBytes(t, s, testID(100)) // every job's rows are as long
	require.Equal(t, 6*u, requireCounted(t, s))
	n, err = s.Evict(4 * u)
	require.NoError(t, err)
	require.Equal(t, 2, n, "6 jobs' bytes → 4")
	require.NotNil(t, s.evictFrom)
	older := settledJob(t, s, 200, 10, 5000, 100) // created long ago, settled now
	n, err = s.Evict(4 * u)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, exists(t, s, older.ID), "the job created before the start is evicted first")
	n, err = s.Evict(2 * u)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for i := range 4 {
		require.Equal(t, i >= 4, exists(t, s, testID(100+i)))
	}
	require.True(t, exists(t, s, testID(104)))
	require.Equal(t, 2*u, requireCounted(t, s))
}

// TestStore_EvictOldestFirstWhileJobsSettle is the regression test for a
// race in Evict: it read where to start, let go of the lock, and then
// walked from there (and between batches from where the last one ended),
// so a job that settled meanwhile with an older creation time was passed
// over and a newer one evicted before it. A job settles in each gap here,
// older than every job left: it must go first.
func TestStore_EvictOldestFirstWhileJobsSettle(t *testing.T) {
	t.Run("BeforeTheFirstBatch", func(t *testing.T) {
		s := mustOpen(t, "")
		settledJob(t, s, 1, 50, 50, 100)
		a := settledJob(t, s, 2, 100, 100, 100)
		b := settledJob(t, s, 3, 200, 200, 100)
		u := jobBytes(t, s, b.ID) // every job's rows are as long
		n, err := s.Evict(2 * u)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the job created at 50: the next eviction starts at 100")

		var old JobRecord
		s.evictGap = func() {
			if old.ID == "" {
				old = settledJob(t, s, 4, 60, 60, 100) // settles now, created before a
			}
		}
		n, err = s.Evict(u)
		require.NoError(t, err)
		require.Equal(t, 2, n, "3 jobs' bytes down to 1")
		require.False(t, exists(t, s, old.ID), "the oldest goes first")
		require.False(t, exists(t, s, a.ID))
		require.True(t, exists(t, s, b.ID), "the newest stays")
	})
	t.Run("BetweenBatches", func(t *testing.T) {
		s := mustOpen(t, "")
		const jobs = evictBatch + 20
		for i := range jobs {
			settledJob(t, s, i, int64(1000+i), int64(1000+i), 10)
		}
		gaps := 0
		var old JobRecord
		s.evictGap = func() {
			if gaps++; gaps == 2 { // after the first batch
				old = settledJob(t, s, 500, 1, 1, 10)
			}
		}
		// Down to 10 jobs' bytes: with the one that settles, jobs-9 go.
		n, err := s.Evict(10 * jobBytes(t, s, testID(0)))
		require.NoError(t, err)
		require.GreaterOrEqual(t, gaps, 2)
		require.Equal(t, jobs+1-10, n)
		require.False(t, exists(t, s, old.ID), "the job that settled between batches, the oldest, is evicted")
		for i := jobs - 10; i < jobs; i++ {
			require.True(t, exists(t, s, testID(i)), "job %d, among the 10 newest, stays", i)
		}
	})
}
