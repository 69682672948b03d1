package persistence

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// specsJob stores job n (unsettled) with targets whose URLs start with
// prefix, the even ones with options, and returns it and its targets as a
// read with results gives them (pending).
func specsJob(t *testing.T, s *Store, n, targets int, prefix string) (JobRecord, []TargetRecord) {
	t.Helper()
	j := JobRecord{ID: testID(n), Caller: "alice", Status: StatusQueued, TargetsTotal: targets, Created: 1, Lease: 1}
	j.Key[0], j.Key[1] = byte(n>>8), byte(n)
	ts := make([]TargetRecord, targets)
	for i := range ts {
		ts[i] = TargetRecord{Idx: i, URL: fmt.Sprintf("%s/%d", prefix, i), Status: TargetPending}
		if i%2 == 0 {
			ts[i].Options = []byte(fmt.Sprintf(`{"n":%d}`, i))
		}
	}
	require.NoError(t, s.CreateJob(&j, ts))
	return j, ts
}

// TestStore_SpecsDecodedOnce: a job's specs row is decoded by its first
// read and kept; later reads give the same targets, each reader its own
// copy (options changed by one reader are not another's), and no more
// decoding; a job deleted and stored again under the same id reads its new
// targets, in both modes.
func TestStore_SpecsDecodedOnce(t *testing.T) {
	for _, dir := range []string{"", "dir"} {
		t.Run("dir="+dir, func(t *testing.T) {
			if dir != "" {
				dir = t.TempDir()
			}
			s := mustOpen(t, dir)
			j, want := specsJob(t, s, 1, 32, "https://example.com/a")
			require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 3, Status: TargetFailed, Error: "e", Hint: "h"}))
			want[3].Status, want[3].Error, want[3].Hint = TargetFailed, "e", "h"
			kept := func() *specsEntry {
				s.specs.mu.Lock()
				defer s.specs.mu.Unlock()
				require.Len(t, s.specs.m, 1, "one row kept")
				for _, e := range s.specs.m {
					return e
				}
				return nil
			}
			var first *specsEntry
			for i := range 3 {
				_, got, err := s.JobWithTargets(j.ID)
				require.NoError(t, err)
				require.Equal(t, want, got)
				got[0].Options[0] = 'X' // the reader's own
				got[2].URL = "changed"
				got[2].Options = append(got[2].Options, "XXXXXXXX"...)
				require.Equal(t, want[4].Options, got[4].Options, "an append to one target's options runs over no other's")
				_, got, err = s.TargetStatuses(j.ID)
				require.NoError(t, err)
				require.Equal(t, want, got)
				if i == 0 {
					first = kept()
				}
				require.Same(t, first, kept(), "decoded once")
			}

			// Deleted, then stored again under the same id with other
			// targets: the read sees the new row (a new version).
			j.Status, j.Settled = StatusDone, true
			require.NoError(t, s.SaveJob(&j))
			deleted, _, err := s.Sweep(1, 10)
			require.NoError(t, err)
			require.Equal(t, 1, deleted)
			_, _, err = s.TargetStatuses(j.ID)
			require.ErrorIs(t, err, ErrNotFound, "deleted")
			_, want = specsJob(t, s, 1, 5, "https://example.org/b")
			_, got, err := s.TargetStatuses(j.ID)
			require.NoError(t, err)
			require.Equal(t, want, got)
			_, got, err = s.JobWithTargets(j.ID)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// TestStore_SpecsConcurrentReads: readers of many jobs at once, under
// -race, each see their job's targets, half of the jobs settled (their
// statuses kept by the first read that sees them settled).
func TestStore_SpecsConcurrentReads(t *testing.T) {
	s := mustOpen(t, "")
	const jobs = 8
	want := make([][]TargetRecord, jobs)
	for n := range jobs {
		var j JobRecord
		j, want[n] = specsJob(t, s, n+1, 16, fmt.Sprintf("https://example.com/%d", n))
		if n%2 == 1 {
			j.Status, j.Settled = StatusCancelled, true
			require.NoError(t, s.SaveJob(&j))
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				n := (g + i) % jobs
				read := s.TargetStatuses
				if i%2 == 0 {
					read = s.JobWithTargets
				}
				_, got, err := read(testID(n + 1))
				if err != nil || len(got) != len(want[n]) || got[15].URL != want[n][15].URL || string(got[0].Options) != string(want[n][0].Options) || got[1].Options != nil {
					t.Errorf("job %d: %v, %d targets", n, err, len(got))
					return
				}
				got[0].Options[0] = 'X'
				got[2].Options = append(got[2].Options, 'X')
			}
		})
	}
	wg.Wait()
}

// TestStore_SettledStatusesReadOnce: the statuses of a settled job are
// read from its outcome rows once, then kept: later reads give the same,
// each reader its own copy, without a walk of the rows; a job not settled
// is read every time (a new outcome shows); a settled job deleted and
// stored again under the same id reads as the new one.
func TestStore_SettledStatusesReadOnce(t *testing.T) {
	for _, dir := range []string{"", "dir"} {
		t.Run("dir="+dir, func(t *testing.T) {
			if dir != "" {
				dir = t.TempDir()
			}
			s := mustOpen(t, dir)
			j, want := specsJob(t, s, 1, 4, "https://example.com/a")
			j.Status, j.TargetsDone, j.ResultBytes = StatusRunning, 1, 2
			require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("{}"), Stored: 5}))
			want[0].Status, want[0].Stored, want[0].ResultSize = TargetDone, 5, 2
			_, got, err := s.TargetStatuses(j.ID)
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Nil(t, s.specs.get(mustID(t, j.ID), versionOf(t, s, j.ID)).settled.Load(), "not settled: not kept")

			j.Status, j.TargetsDone, j.TargetsFailed, j.Settled = StatusPartial, 2, 1, true
			require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 1, Status: TargetFailed, Error: "e", Hint: "h", Stored: 6}))
			want[1].Status, want[1].Error, want[1].Hint, want[1].Stored = TargetFailed, "e", "h", 6
			for i := range 3 {
				rec, got, err := s.TargetStatuses(j.ID)
				require.NoError(t, err)
				require.Equal(t, want, got, "read %d", i)
				require.Equal(t, 2, rec.TargetsDone)
				require.NotNil(t, s.specs.get(mustID(t, j.ID), versionOf(t, s, j.ID)).settled.Load(), "settled: kept")
				got[1].Error = "changed"
				got[0].Options[0] = 'X'
			}
			_, full, err := s.JobWithTargets(j.ID)
			require.NoError(t, err)
			require.Equal(t, []byte("{}"), full[0].Result, "a read of results reads them")

			deleted, _, err := s.Sweep(1, 10)
			require.NoError(t, err)
			require.Equal(t, 1, deleted)
			_, _, err = s.TargetStatuses(j.ID)
			require.ErrorIs(t, err, ErrNotFound, "deleted")
			j2, want2 := specsJob(t, s, 1, 2, "https://example.org/b")
			j2.Status, j2.Settled = StatusCancelled, true
			require.NoError(t, s.SaveJob(&j2))
			_, got, err = s.TargetStatuses(j.ID)
			require.NoError(t, err)
			require.Equal(t, want2, got, "stored again: the new job")
		})
	}
}

// versionOf is the Badger version of a job's specs row.
func versionOf(t *testing.T, s *Store, idHex string) uint64 {
	t.Helper()
	var v uint64
	require.NoError(t, s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(specsKey(mustID(t, idHex)))
		if err == nil {
			v = item.Version()
		}
		return err
	}))
	return v
}

// TestSpecsCache_Bounded: the cache holds at most specsCacheBytes, pushing
// out the oldest rows first, but a row read since it was kept after the
// others; a row too big is not kept; an id kept again replaces its row;
// statuses kept count in the bound.
func TestSpecsCache_Bounded(t *testing.T) {
	var c specsCache
	entry := func(n int, url string, version uint64) *specsEntry {
		ts := make([]TargetRecord, n)
		for i := range ts {
			ts[i] = TargetRecord{Idx: i, URL: url, Status: TargetPending}
		}
		return &specsEntry{version: version, targets: ts}
	}
	check := func() {
		t.Helper()
		require.LessOrEqual(t, c.bytes, specsCacheBytes)
		require.Len(t, c.order, len(c.m))
		total := 0
		for _, e := range c.m {
			total += e.size
		}
		require.Equal(t, total, c.bytes)
	}
	const n = 32
	size := 64 + n*(targetRecordSize+40)
	url := fmt.Sprintf("%040d", 0)
	fit := specsCacheBytes / size
	for i := range fit {
		c.put(mustID(t, testID(i)), entry(n, url, 1))
	}
	require.Len(t, c.m, fit)
	require.NotNil(t, c.get(mustID(t, testID(0)), 1))
	require.Nil(t, c.get(mustID(t, testID(1)), 2), "another version")

	c.put(mustID(t, testID(fit)), entry(n, url, 1)) // one over: the oldest unread goes
	check()
	require.Len(t, c.m, fit)
	require.NotNil(t, c.get(mustID(t, testID(0)), 1), "read since it was kept: passed over")
	require.Nil(t, c.get(mustID(t, testID(1)), 1), "the oldest unread: pushed out")

	for i := range 10 * fit { // many more: still bounded
		c.put(mustID(t, testID(fit+1+i)), entry(n, url, 1))
	}
	check()

	c.put(mustID(t, testID(fit+1)), entry(3, "u", 2)) // kept again: replaced, counted once
	e := c.get(mustID(t, testID(fit+1)), 2)
	require.NotNil(t, e)
	require.Len(t, e.targets, 3)
	check()

	// Statuses kept: counted, and the oldest go to make room.
	last := mustID(t, testID(11*fit))
	e = c.get(last, 1)
	require.NotNil(t, e)
	c.settle(last, e, entry(n, url, 1).targets)
	require.NotNil(t, e.settled.Load())
	require.Equal(t, 64+2*n*(targetRecordSize+40), e.size)
	check()
	c.settle(last, e, nil) // once only
	require.Len(t, *e.settled.Load(), n)
	gone := &specsEntry{}
	c.settle(mustID(t, testID(1)), gone, entry(n, url, 1).targets) // not kept: nothing
	require.Nil(t, gone.settled.Load())
	check()

	c.put(mustID(t, testID(1<<30)), entry(specsCacheBytes/targetRecordSize, "", 1)) // too big
	require.Nil(t, c.get(mustID(t, testID(1<<30)), 1))
	check()
}
