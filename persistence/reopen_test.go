package persistence

import (
	"sync/atomic"
	"testing"

	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

// After a failed sync the store reopens Badger before its next write
// (reopen.go), with the reads paused: a read in flight ends first (the
// reopen waits for it), a read begun meanwhile waits for the reopen and
// then reads, a read nested in the one in flight fails naming the reopen
// (it cannot wait: the reopen waits for its outer read), and every row
// written before the failed sync, and the write that failed (retried),
// read back after it, as after a restart.
func TestStore_ReopenAfterFailedSyncWithReads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	require.NoError(t, s.SetDurable(true))
	s.SetRetryWait(1)
	a := putJobRecord(t, s, 1, 1, 1, false)
	var bs []JobRecord
	var fails atomic.Int64
	fails.Store(1)
	s.SetSyncFault(func() error {
		if fails.Add(-1) >= 0 {
			return errDiskGone
		}
		return nil
	})
	// The failed sync: the write is held and retried, which reopens Badger.
	got := make(answers, 1)
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: result(2000, 1)}, got.done("outcome"))
	require.Equal(t, answer{"outcome", nil, false}, got.next(t))
	require.EqualValues(t, 1, s.Reopens())

	// A read in flight as the next failed sync's reopen begins: with a
	// read begun during the reopen, and (nested) with a read made inside
	// the one in flight.
	for i, nest := range []bool{false, true} {
		b := putJobRecord(t, s, 2+i, 2, 2, false) // a target's outcome is written once
		bs = append(bs, b)
		fails.Store(1)
		require.ErrorIs(t, s.SaveOutcome(b.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: result(10, 2)}), ErrNotSynced)
		inRead, release := make(chan struct{}), make(chan struct{})
		var nested error
		outer := make(chan error, 1)
		go func() {
			first := true
			outer <- s.Jobs(func(JobRecord) bool {
				if first {
					first = false
					close(inRead)
					<-release
					if nest {
						_, nested = s.Job(b.ID)
					}
				}
				return true
			})
		}()
		<-inRead
		wrote := make(chan error, 1)
		go func() { wrote <- s.SaveOutcome(b.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: result(10, 3)}) }()
		testkit.WaitFor(t, "the reopen to pause the reads", func() bool {
			s.reads.mu.Lock()
			defer s.reads.mu.Unlock()
			return s.reads.paused != nil
		})
		later := make(chan error, 1)
		if !nest {
			go func() {
				_, err := s.Job(a.ID)
				later <- err
			}()
		}
		close(release)
		require.NoError(t, <-outer)
		require.NoError(t, <-wrote)
		if nest {
			require.ErrorIs(t, nested, ErrNotSynced, "a read nested in the one in flight fails, naming the reopen")
		} else {
			require.NoError(t, <-later, "a read begun during the reopen waits for it")
		}
		require.EqualValues(t, 2+i, s.Reopens())
	}

	check := func(s *Store) {
		_, ts, err := s.JobWithTargets(a.ID)
		require.NoError(t, err)
		require.Equal(t, result(2000, 1), ts[0].Result)
		for _, b := range bs {
			_, ts, err = s.JobWithTargets(b.ID)
			require.NoError(t, err)
			require.Equal(t, result(10, 2), ts[0].Result, "committed, its sync failed, flushed as Badger closed")
			require.Equal(t, result(10, 3), ts[1].Result)
		}
		counted, err := s.CountBytes()
		require.NoError(t, err)
		require.Equal(t, counted, s.Bytes())
	}
	check(s)
	require.NoError(t, s.Close())
	s2 := mustOpen(t, dir)
	check(s2)
}
