package persistence

// The indexes, sweep, eviction, touch and Close of a store.

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStore_Indexes(t *testing.T) {
	s := mustOpen(t, "")
	j := putJobRecord(t, s, 1, 100, 100, false)

	got, found, err := s.JobByKey(j.Key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, j.ID, got.ID)

	left, err := s.Unsettled()
	require.NoError(t, err)
	require.Len(t, left, 1)

	// Unsettled jobs are neither swept nor evicted.
	n, _, err := s.Sweep(1<<62, 100)
	require.NoError(t, err)
	require.Zero(t, n)

	// Touching an unsettled job sets its lease only.
	ok, err := s.Touch(j.ID, 150)
	require.NoError(t, err)
	require.True(t, ok)
	j.Lease = 150

	j.Status, j.Settled, j.ResultBytes, j.TargetsDone = StatusDone, true, 10, 1
	require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("0123456789")}))
	left, _ = s.Unsettled()
	require.Empty(t, left)
	require.Equal(t, jobBytes(t, s, j.ID), requireCounted(t, s))

	// A settled job's lease moves its sweep entry; an older lease never wins.
	ok, err = s.Touch(j.ID, 500)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Touch(j.ID, 200)
	require.NoError(t, err)
	require.True(t, ok)
	got, err = s.Job(j.ID)
	require.NoError(t, err)
	require.Equal(t, int64(500), got.Lease, "the later lease wins")
	n, _, err = s.Sweep(499, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	n, more, err := s.Sweep(500, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, more)
	_, err = s.Job(j.ID)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Target(j.ID, 0)
	require.ErrorIs(t, err, ErrNotFound)
	_, found, err = s.JobByKey(j.Key)
	require.NoError(t, err)
	require.False(t, found, "the idempotency entry went with it")
	require.Zero(t, requireCounted(t, s))

	ok, err = s.Touch(j.ID, 900)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.Touch("not hex", 900)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestStore_SweepInBatches(t *testing.T) {
	s := mustOpen(t, "")
	for i := range 10 {
		putJobRecord(t, s, i, int64(i), int64(i), true)
	}
	n, more, err := s.Sweep(4, 3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.True(t, more)
	n, _, err = s.Sweep(4, 3)
	require.NoError(t, err)
	require.Equal(t, 2, n, "only leases ≤ 4 are due")
	count := 0
	require.NoError(t, s.Jobs(func(JobRecord) bool { count++; return true }))
	require.Equal(t, 5, count)
}

func TestStore_Evict(t *testing.T) {
	s := mustOpen(t, "")
	store := func(j *JobRecord, n int) {
		j.ResultBytes += int64(n)
		require.NoError(t, s.SaveTarget(j, &TargetRecord{Idx: 0, Status: TargetDone, Result: bytes.Repeat([]byte("x"), n)}))
	}
	live := putJobRecord(t, s, 100, 0, 0, false) // the oldest, but live
	store(&live, 50)
	var jobs []JobRecord
	for i := range 5 {
		j := putJobRecord(t, s, i, int64(10+i), int64(10+i), false)
		j.Status, j.Settled = StatusDone, true
		store(&j, 100)
		jobs = append(jobs, j)
	}
	lv, u := jobBytes(t, s, live.ID), jobBytes(t, s, jobs[0].ID) // the settled jobs' rows are as long
	require.Equal(t, lv+5*u, requireCounted(t, s))
	n, err := s.Evict(lv + 2*u + u/2)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the three oldest settled jobs")
	for i, j := range jobs {
		_, err := s.Job(j.ID)
		if i < 3 {
			require.ErrorIs(t, err, ErrNotFound)
		} else {
			require.NoError(t, err)
		}
	}
	_, err = s.Job(live.ID)
	require.NoError(t, err, "live jobs are never evicted")
	n, err = s.Evict(0)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, lv, requireCounted(t, s), "only the live job's bytes are left")
}

// A result over MaxResultSize is refused before anything is written; a
// row Badger refuses (an error text over the in-memory value cap) is
// refused as too large too.
func TestStore_TooLarge(t *testing.T) {
	s := mustOpen(t, "")
	j := putJobRecord(t, s, 1, 1, 1, false)
	before := keysByPrefix(t, s)
	big := make([]byte, MaxResultSize+1)
	big[0] = 'x'
	err := s.SaveTarget(&j, &TargetRecord{Idx: 1, Status: TargetDone, Result: big})
	require.ErrorIs(t, err, ErrTooLarge)
	require.False(t, errors.Is(err, ErrCorrupt))
	require.Equal(t, before, keysByPrefix(t, s), "nothing written")
	require.Equal(t, jobBytes(t, s, j.ID), requireCounted(t, s), "nothing counted")
	done := make(chan error, 1)
	s.SaveOutcomeAsync(j.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: big}, func(err error) { done <- err })
	require.ErrorIs(t, <-done, ErrTooLarge)

	text := string(bytes.Repeat([]byte("x"), maxValueInMemory+1))
	err = s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetFailed, Error: text})
	require.ErrorIs(t, err, ErrTooLarge)
	require.NotContains(t, err.Error(), "xxxx", "no value in the error text")
	require.Equal(t, before, keysByPrefix(t, s))
}

func TestStore_WriteFault(t *testing.T) {
	s := mustOpen(t, "")
	j := putJobRecord(t, s, 1, 1, 1, false)
	disk := errors.New("no space left on device")
	s.SetWriteFault(func() error { return disk })
	require.ErrorIs(t, s.SaveJob(&j), disk)
	require.ErrorIs(t, s.WriteProbe([]byte("k"), []byte("v")), disk)
	_, err := s.Job(j.ID)
	require.NoError(t, err, "reads go on")
	s.SetWriteFault(nil)
	require.NoError(t, s.SaveJob(&j))
	require.NoError(t, s.WriteProbe([]byte("k"), []byte("v")))
}

func TestStore_EvictInBatches(t *testing.T) {
	s := mustOpen(t, "")
	const jobs = 3*evictBatch + 10
	for i := range jobs {
		j := putJobRecord(t, s, i, int64(i), int64(i), false)
		j.Status, j.Settled, j.ResultBytes = StatusDone, true, 10
		require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("0123456789")}))
	}
	u := jobBytes(t, s, testID(0)) // every job's rows are as long
	n, err := s.Evict(10 * u)
	require.NoError(t, err)
	require.Equal(t, jobs-10, n, "several batches, down to MaxBytes")
	require.Equal(t, 10*u, requireCounted(t, s))
	for i := range jobs {
		_, err := s.Job(testID(i))
		if i < jobs-10 {
			require.ErrorIs(t, err, ErrNotFound, "job %d", i)
		} else {
			require.NoError(t, err, "job %d", i)
		}
	}
}

func TestStore_SweepStartsOverAfterARunEnds(t *testing.T) {
	s := mustOpen(t, "")
	for i := range 5 {
		putJobRecord(t, s, i, int64(10+i), int64(10+i), true)
	}
	n, more, err := s.Sweep(100, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, more)
	// An older lease shows up behind where the run goes on (a job that
	// settles with an old lease): this run passes it, the next one finds it.
	putJobRecord(t, s, 99, 1, 1, true)
	n, more, err = s.Sweep(100, 10)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.False(t, more)
	n, _, err = s.Sweep(100, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a new run starts at the oldest lease")
}

// TestStore_TouchUnexpired: a settled job past its expiry (its lease at or
// before minLease) is not brought back, and stays due for the sweep; one
// before it is touched; an unsettled job never expires.
func TestStore_TouchUnexpired(t *testing.T) {
	s := mustOpen(t, "")
	settled := putJobRecord(t, s, 1, 100, 100, true)
	live := putJobRecord(t, s, 2, 10, 10, false)

	ok, err := s.TouchUnexpired(settled.ID, 500, 100)
	require.NoError(t, err)
	require.False(t, ok, "lease 100 ≤ minLease 100: expired")
	got, err := s.Job(settled.ID)
	require.NoError(t, err)
	require.Equal(t, int64(100), got.Lease, "left as it is")

	ok, err = s.TouchUnexpired(live.ID, 50, 20)
	require.NoError(t, err)
	require.True(t, ok, "an unsettled job never expires")
	got, err = s.Job(live.ID)
	require.NoError(t, err)
	require.Equal(t, int64(50), got.Lease)

	for _, id := range []string{testID(3), "not hex"} {
		ok, err = s.TouchUnexpired(id, 500, 0)
		require.NoError(t, err)
		require.False(t, ok)
	}

	n, _, err := s.Sweep(100, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the expired job is still due at its own lease")
	_, err = s.Job(settled.ID)
	require.ErrorIs(t, err, ErrNotFound)

	other := putJobRecord(t, s, 4, 100, 100, true)
	ok, err = s.TouchUnexpired(other.ID, 500, 99)
	require.NoError(t, err)
	require.True(t, ok, "lease 100 > minLease 99: touched")
	n, _, err = s.Sweep(499, 10)
	require.NoError(t, err)
	require.Zero(t, n, "its lease is 500 now")
	ok, err = s.Touch(other.ID, 600)
	require.NoError(t, err)
	require.True(t, ok, "Touch has no expiry")
}

// TestStore_CloseWaitsForReads: Close waits for a read in flight (here one
// held inside Jobs's callback) before it closes Badger, and every read
// that begins once Close has begun, by any path, is an error wrapping
// ErrClosed: never a panic of a closed Badger.
func TestStore_CloseWaitsForReads(t *testing.T) {
	s, err := Open("")
	require.NoError(t, err)
	j := putJobRecord(t, s, 1, 1, 1, true)
	entered, release := make(chan struct{}), make(chan struct{})
	read := make(chan error, 1)
	go func() {
		read <- s.Jobs(func(JobRecord) bool {
			close(entered)
			<-release
			return true
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	require.Eventually(t, s.closed.Load, 10*time.Second, time.Millisecond)
	_, err = s.Job(j.ID)
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = s.AllJobs(nil, 10, nil)
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = s.CallerJobs("alice", nil, 10, nil)
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = s.JobsByIDPrefix(nil, 10, nil)
	require.ErrorIs(t, err, ErrClosed)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a read in flight", err)
	default:
	}
	close(release)
	require.NoError(t, <-read, "the read that began before Close ends whole")
	require.NoError(t, <-closed)
	_, err = s.Job(j.ID)
	require.ErrorIs(t, err, ErrClosed)
}
