package persistence

import (
	"bytes"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

// holdWrites makes the writer goroutine stop inside its next write until
// the returned release is called; entered says it has got there.
func holdWrites(s *Store) (entered <-chan struct{}, release func()) {
	in, gate := make(chan struct{}, 1), make(chan struct{})
	s.SetWriteFault(func() error {
		select {
		case in <- struct{}{}:
		default:
		}
		<-gate
		return nil
	})
	return in, func() { s.SetWriteFault(nil); close(gate) }
}

// The writes queued while one is being committed are committed together;
// one of them failing (a row too large) fails it alone; each job's writes
// land in the order they were made.
func TestStore_GroupCommit(t *testing.T) {
	s := mustOpen(t, "")
	const n = 40
	jobs := make([]JobRecord, n)
	for i := range jobs {
		jobs[i] = putJobRecord(t, s, i, 1, 1, false)
	}
	entered, release := holdWrites(s)
	first := make(chan error, 1)
	s.write("save job", jobs[0].ID, &jobs[0], nil, func(err error) { first <- err }, nil)
	testkit.Recv(t, entered)

	results := make(chan error, 2*n)
	var want int64
	for i := 1; i < n; i++ {
		res := []byte(`{"content":"` + testID(i) + `"}`)
		want += int64(len(res))
		jobs[i].TargetsDone, jobs[i].ResultBytes, jobs[i].Lease = 1, int64(len(res)), 2
		s.SaveTargetAsync(&jobs[i], &TargetRecord{Idx: 0, Status: TargetDone, Result: res}, func(err error) { results <- err })
		// A later write of the same row, queued after: it wins.
		jobs[i].Lease = 3
		s.write("save job", jobs[i].ID, &jobs[i], nil, func(err error) { results <- err }, nil)
	}
	big := jobs[0]
	big.TargetsFailed = 1
	tooLarge := make(chan error, 1)
	text := string(bytes.Repeat([]byte("x"), maxValueInMemory+1)) // over Badger's in-memory value cap
	s.SaveTargetAsync(&big, &TargetRecord{Idx: 1, Status: TargetFailed, Error: text}, func(err error) { tooLarge <- err })
	release()

	require.NoError(t, <-first)
	for i := 0; i < 2*(n-1); i++ {
		require.NoError(t, <-results)
	}
	require.ErrorIs(t, <-tooLarge, ErrTooLarge)
	for i := 1; i < n; i++ {
		j, ts, err := s.JobWithTargets(testID(i))
		require.NoError(t, err)
		require.Equal(t, int64(3), j.Lease, "the later write of the row wins")
		require.Equal(t, 1, j.TargetsDone)
		require.Equal(t, TargetDone, ts[0].Status)
	}
	require.Greater(t, requireCounted(t, s), want, "the byte total counts every committed result and row, not the refused one")
}

// A write queued after Close is refused with ErrClosed, at once; the sync
// form too.
func TestStore_WriteAfterClose(t *testing.T) {
	s, err := Open("")
	require.NoError(t, err)
	j := putJobRecord(t, s, 1, 1, 1, false)
	require.NoError(t, s.Close())
	got := make(chan error, 1)
	s.SaveOutcomeAsync(j.ID, &TargetRecord{Idx: 0, Status: TargetDone}, func(err error) { got <- err })
	require.ErrorIs(t, <-got, ErrClosed)
	require.ErrorIs(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone}), ErrClosed)
}

// An unsettled job's row is not rewritten for each target: its readers count
// its progress and take its lease from the outcome rows. The write that
// settles it writes the row.
func TestStore_OutcomesCountForAnUnsettledJob(t *testing.T) {
	s := mustOpen(t, "")
	j := putJobRecord(t, s, 1, 10, 10, false) // two targets
	save := func(tr *TargetRecord) {
		done := make(chan error, 1)
		s.SaveOutcomeAsync(j.ID, tr, func(err error) { done <- err })
		require.NoError(t, <-done)
	}
	save(&TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`{"c":1}`), Stored: 20})

	got, err := s.Job(j.ID)
	require.NoError(t, err)
	require.Equal(t, StatusQueued, got.Status, "the row itself is as written")
	require.Equal(t, 1, got.TargetsDone)
	require.Equal(t, 0, got.TargetsFailed)
	require.Equal(t, int64(7), got.ResultBytes)
	require.Equal(t, int64(20), got.Lease, "storing a target bumps the lease")
	requireCounted(t, s)

	save(&TargetRecord{Idx: 1, Status: TargetFailed, Error: "e", Stored: 30})
	got2, ts, err := s.JobWithTargets(j.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got2.TargetsDone)
	require.Equal(t, 1, got2.TargetsFailed)
	require.Equal(t, int64(30), got2.Lease)
	require.Equal(t, TargetFailed, ts[1].Status)
	left, err := s.Unsettled()
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, got2, left[0])
	var listed []JobRecord
	require.NoError(t, s.Jobs(func(j JobRecord) bool { listed = append(listed, j); return true }))
	require.Equal(t, []JobRecord{got2}, listed)

	// Settled: the row is complete, and taken as it is.
	final := got2
	final.Status, final.Settled, final.TargetsFailed = StatusPartial, true, 2 // not what the outcomes say
	require.NoError(t, s.SaveJob(&final))
	got3, err := s.Job(j.ID)
	require.NoError(t, err)
	require.Equal(t, final, got3)
}

// A sweep-index entry that is not the job's (its row was written again with
// a later lease, or the job is gone) is deleted by the sweep, never taken
// for the job, and never stops the sweep.
func TestStore_SweepSkipsStaleIndexEntries(t *testing.T) {
	s := mustOpen(t, "")
	j := putJobRecord(t, s, 1, 1, 10, true)
	j.Lease = 50
	require.NoError(t, s.SaveJob(&j)) // settled again: x<10> is left behind
	gone, _ := parseID(testID(99))
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		return 0, txn.Set(indexKey(prefixLease, 5, gone), nil)
	}))

	n, more, err := s.Sweep(20, 64)
	require.NoError(t, err)
	require.False(t, more)
	require.Zero(t, n, "the job's lease is 50")
	_, err = s.Job(j.ID)
	require.NoError(t, err)
	require.NoError(t, s.view("test", func(txn *badger.Txn) error {
		for _, k := range [][]byte{indexKey(prefixLease, 10, mustID(t, j.ID)), indexKey(prefixLease, 5, gone)} {
			_, err := txn.Get(k)
			require.ErrorIs(t, err, badger.ErrKeyNotFound, "the stale entries are deleted")
		}
		return nil
	}))
	n, _, err = s.Sweep(60, 64)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func mustID(t *testing.T, hex string) [idLen]byte {
	t.Helper()
	id, ok := parseID(hex)
	require.True(t, ok)
	return id
}

// answer is one answer of a retried write.
type answer struct {
	what string
	err  error
	late bool
}

// answers records the answers of retried writes, in the order the writer
// gives them.
type answers chan answer

func (a answers) done(what string) WriteDone {
	return func(err error, late bool) { a <- answer{what, err, late} }
}

func (a answers) next(t *testing.T) answer {
	t.Helper()
	return testkit.Recv(t, a)
}

// failFirst makes the first n writes fail with a disk error.
func failFirst(s *Store, n int64) *atomic.Int64 {
	var calls atomic.Int64
	s.SetWriteFault(func() error {
		if calls.Add(1) <= n {
			return syscall.ENOSPC
		}
		return nil
	})
	return &calls
}

// A retried write that fails is held and answered ErrRetrying at once; the
// job's later retried writes wait behind it untried (answered the same),
// while other jobs' writes go on; tried again, they commit in the order
// they were made, each answered again, late. A large result's chunks are
// written again with it.
func TestStore_RetriedWritesInOrderPerJob(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, "")
	s.SetRetryWait(time.Hour) // tried again only by AbandonRetries here
	a := putJobRecord(t, s, 1, 1, 1, false)
	b := putJobRecord(t, s, 2, 1, 1, false)
	calls := failFirst(s, 1)
	got := make(answers, 16)

	large := []byte(`"` + strings.Repeat("x", 3000) + `"`) // in chunks
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: large, Stored: 5}, got.done("a0"))
	first := got.next(t)
	require.Equal(t, answer{"a0", first.err, false}, first)
	require.ErrorIs(t, first.err, ErrRetrying)
	require.ErrorIs(t, first.err, syscall.ENOSPC, "and why")

	s.SaveOutcomeRetried(b.ID, &TargetRecord{Idx: 0, Status: TargetFailed, Error: "nope", Stored: 6}, got.done("b0"))
	require.Equal(t, answer{"b0", nil, false}, got.next(t), "another job's write goes on")

	a.Status, a.Settled, a.TargetsDone, a.TargetsFailed, a.ResultBytes = StatusPartial, true, 2, 1, int64(len(large))
	before := calls.Load()
	s.SaveTargetRetried(&a, &TargetRecord{Idx: 1, Status: TargetFailed, Error: "x", Stored: 7}, got.done("a1+row"))
	held := got.next(t)
	require.Equal(t, "a1+row", held.what)
	require.ErrorIs(t, held.err, ErrRetrying, "held behind a0")
	require.Equal(t, before, calls.Load(), "held untried")
	_, err := s.Target(a.ID, 1)
	require.NoError(t, err)
	stored, err := s.Job(a.ID)
	require.NoError(t, err)
	require.False(t, stored.Settled, "the settling row waits for the outcome before it")

	s.AbandonRetries() // one more try: the disk works again
	require.Equal(t, answer{"a0", nil, true}, got.next(t))
	require.Equal(t, answer{"a1+row", nil, true}, got.next(t))
	stored, err = s.Job(a.ID)
	require.NoError(t, err)
	require.True(t, stored.Settled)
	require.Equal(t, StatusPartial, stored.Status)
	res, err := s.ResultJSON(a.ID, 0)
	require.NoError(t, err)
	require.Equal(t, large, res)
}

// The writer tries the held writes again every retry wait, by itself,
// until they commit.
func TestStore_RetriedWriteRetriedByTheWriter(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, "")
	s.SetRetryWait(time.Millisecond)
	a := putJobRecord(t, s, 1, 1, 1, false)
	calls := failFirst(s, 5)
	got := make(answers, 4)
	a.Status, a.Settled = StatusCancelled, true
	require.ErrorIs(t, s.SaveJobRetried(&a, got.done("row")), ErrRetrying)
	require.Equal(t, answer{"row", nil, true}, got.next(t))
	require.Equal(t, int64(6), calls.Load(), "tried until it committed, then no more")
	stored, err := s.Job(a.ID)
	require.NoError(t, err)
	require.Equal(t, StatusCancelled, stored.Status)
	require.True(t, stored.Settled)
}

// A write that cannot commit however often it is tried (too large, a bad
// id) is answered its error at once, not retried; the writes that are not
// retried answer the disk's error as before.
func TestStore_RetriedWriteNotRetryable(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, "")
	a := putJobRecord(t, s, 1, 1, 1, false)
	got := make(answers, 4)
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: make([]byte, MaxResultSize+1)}, got.done("big"))
	big := got.next(t)
	require.ErrorIs(t, big.err, ErrTooLarge)
	require.NotErrorIs(t, big.err, ErrRetrying)
	s.SaveOutcomeRetried("nope", &TargetRecord{Idx: 0, Status: TargetDone}, got.done("bad id"))
	require.ErrorIs(t, got.next(t).err, ErrNotFound)

	failFirst(s, 1)
	err := s.SaveOutcome(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`{}`)})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorIs(t, err, ErrRetrying)
}

// Held writes are given up when the store closes, or by AbandonRetries if
// they fail once more: each is answered, late, ErrClosed.
func TestStore_RetriedWritesGivenUp(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"AbandonRetries", "Close"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s, err := Open("")
			require.NoError(t, err)
			s.SetRetryWait(time.Hour)
			a := putJobRecord(t, s, 1, 1, 1, false)
			failFirst(s, 1<<40)
			got := make(answers, 4)
			s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`{}`)}, got.done("a0"))
			s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: []byte(`{}`)}, got.done("a1"))
			require.ErrorIs(t, got.next(t).err, ErrRetrying)
			require.ErrorIs(t, got.next(t).err, ErrRetrying)
			if how == "Close" {
				require.NoError(t, s.Close())
			} else {
				s.AbandonRetries()
			}
			for _, what := range []string{"a0", "a1"} {
				late := got.next(t)
				require.Equal(t, what, late.what)
				require.True(t, late.late)
				require.ErrorIs(t, late.err, ErrClosed)
			}
			require.NoError(t, s.Close())
		})
	}
}

// Two retried writes of one job in one group: the first's result chunks
// fail, and the second is held behind it untried, never committed first.
func TestStore_RetriedWriteHeldBehindFailedChunks(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, "")
	s.SetRetryWait(time.Hour)
	a := putJobRecord(t, s, 1, 1, 1, false)
	b := putJobRecord(t, s, 2, 1, 1, false)
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	var calls atomic.Int64
	s.SetWriteFault(func() error {
		switch calls.Add(1) {
		case 1: // b's write: the writer waits here while a's two queue up
			entered <- struct{}{}
			<-gate
		case 2: // a0's first chunk transaction
			return syscall.ENOSPC
		}
		return nil
	})
	got := make(answers, 8)
	s.SaveOutcomeRetried(b.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`{}`)}, got.done("b0"))
	testkit.Recv(t, entered)
	large := []byte(`"` + strings.Repeat("y", 3000) + `"`)
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: large}, got.done("a0"))
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: []byte(`{}`)}, got.done("a1"))
	close(gate)
	require.Equal(t, answer{"b0", nil, false}, got.next(t))
	a0 := got.next(t)
	require.Equal(t, "a0", a0.what)
	require.ErrorIs(t, a0.err, syscall.ENOSPC)
	a1 := got.next(t)
	require.Equal(t, "a1", a1.what)
	require.ErrorIs(t, a1.err, ErrRetrying)
	require.NotErrorIs(t, a1.err, syscall.ENOSPC, "held behind a0, never tried")
	_, err := s.Target(a.ID, 1)
	require.NoError(t, err)
	stored, err := s.Job(a.ID)
	require.NoError(t, err)
	require.Zero(t, stored.TargetsDone, "neither outcome committed")

	s.AbandonRetries()
	require.Equal(t, answer{"a0", nil, true}, got.next(t))
	require.Equal(t, answer{"a1", nil, true}, got.next(t))
	stored, err = s.Job(a.ID)
	require.NoError(t, err)
	require.Equal(t, 2, stored.TargetsDone)
	res, err := s.ResultJSON(a.ID, 0)
	require.NoError(t, err)
	require.Equal(t, large, res)
}
