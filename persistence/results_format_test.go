package persistence

// Results in older formats, timings, and what a delete leaves behind.

import (
	"bytes"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// TestStore_ReadsVersion2 writes rows as format version 2 wrote them
// (results inline in the outcome row, however long) and reads them with
// every read, then deletes them.
func TestStore_ReadsVersion2(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := mustOpen(t, mode.dir(t))
			j := JobRecord{ID: testID(3), Caller: "alice", Status: StatusPartial, TargetsTotal: 4, TargetsDone: 3, TargetsFailed: 1,
				Created: 1, Lease: 50, ResultBytes: 2 + 5000, Settled: true}
			specs := []TargetRecord{{Idx: 0, URL: "http://a", Options: []byte(`{"mode":"m"}`)}, {Idx: 1, URL: "http://b"}, {Idx: 2, URL: "http://c"}, {Idx: 3, URL: "http://d"}}
			outs := []TargetRecord{
				{Idx: 0, Status: TargetDone, Result: []byte("{}"), Stored: 10},
				{Idx: 1, Status: TargetDone, Result: result(5000, 0), Stored: 20}, // longer than inline: v2 kept it in the row
				{Idx: 2, Status: TargetFailed, Error: "e", Hint: "h", Stored: 30},
			}
			id := mustID(t, j.ID)
			require.NoError(t, s.update("write v2 rows", func(txn *badger.Txn) (int64, error) {
				row := encodeJobAs(formatVersion2, &j)
				specRow := encodeSpecsAs(formatVersion2, specs)
				for _, kv := range [][2][]byte{
					{jobKey(id), row}, {specsKey(id), specRow}, {idemKey(j.Key), id[:]},
					{indexKey(prefixLease, j.Lease, id), nil}, {indexKey(prefixAge, j.Created, id), nil},
				} {
					if err := txn.Set(kv[0], kv[1]); err != nil {
						return 0, err
					}
				}
				for i := range outs {
					if err := txn.Set(outcomeKey(id, i), encodeOutcomeV2(&outs[i])); err != nil {
						return 0, err
					}
				}
				return j.ResultBytes, nil
			}))

			want := make([]TargetRecord, len(specs))
			for i := range specs {
				want[i] = specs[i]
				want[i].Status = TargetPending
				if i < len(outs) {
					want[i].Status, want[i].Result, want[i].Error, want[i].Hint, want[i].Stored = outs[i].Status, outs[i].Result, outs[i].Error, outs[i].Hint, outs[i].Stored
					want[i].ResultSize = int64(len(outs[i].Result))
				}
			}
			got, ts, err := s.JobWithTargets(j.ID)
			require.NoError(t, err)
			require.Equal(t, j, got)
			require.Equal(t, want, ts)
			_, statuses, err := s.TargetStatuses(j.ID)
			require.NoError(t, err)
			for i := range want {
				w := want[i]
				w.Result = nil
				require.Equal(t, w, statuses[i])
			}
			one, err := s.Target(j.ID, 1)
			require.NoError(t, err)
			require.Equal(t, want[1], one)
			res, err := s.ResultJSON(j.ID, 1)
			require.NoError(t, err)
			require.Equal(t, outs[1].Result, res)
			_, err = s.ResultJSON(j.ID, 2)
			require.ErrorIs(t, err, ErrNotFound)
			got, err = s.Job(j.ID)
			require.NoError(t, err)
			require.Equal(t, j, got)

			n, _, err := s.Sweep(50, 10)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, emptyStore, keysByPrefix(t, s))
		})
	}
}

// TestStore_OpensVersion2Store opens a store written by the code before
// chunks (testdata/v2store, see testdata/v2gen): a settled job with a small
// and a 100,000-byte result inline and a failure; an unsettled one with a
// 2,000-byte result. Everything reads as it did (no times: unknown); new writes are version 4
// and read beside the old rows; the sweep deletes both.
func TestStore_OpensVersion2Store(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/v2store", dir)
	s := mustOpen(t, dir)
	small := []byte(`{"content":"small"}`)
	big := append(append([]byte(`{"content":"`), bytes.Repeat([]byte("b"), 100_000)...), '"', '}')
	mid := append(append([]byte(`{"content":"`), bytes.Repeat([]byte("m"), 2000)...), '"', '}')
	// It counted its results only (m bytes): Open counted every row.
	require.Greater(t, requireCounted(t, s), int64(len(small)+len(big)+len(mid)))

	j, ts, err := s.JobWithTargets(testID(1))
	require.NoError(t, err)
	require.Equal(t, StatusPartial, j.Status)
	require.True(t, j.Settled)
	require.Equal(t, int64(len(small)+len(big)), j.ResultBytes)
	require.Equal(t, small, ts[0].Result)
	require.Equal(t, big, ts[1].Result)
	require.Equal(t, int64(len(big)), ts[1].ResultSize)
	require.Equal(t, TargetFailed, ts[2].Status)
	require.Equal(t, "h", ts[2].Hint)
	require.Equal(t, `{"mode":"m"}`, string(ts[0].Options))
	_, statuses, err := s.TargetStatuses(testID(1))
	require.NoError(t, err)
	for i := range ts {
		require.Nil(t, statuses[i].Result)
		require.Equal(t, ts[i].ResultSize, statuses[i].ResultSize)
		require.Equal(t, ts[i].Status, statuses[i].Status)
	}
	res, err := s.ResultJSON(testID(1), 1)
	require.NoError(t, err)
	require.Equal(t, big, res)

	k, err := s.Job(testID(2))
	require.NoError(t, err)
	require.False(t, k.Settled)
	require.Equal(t, 1, k.TargetsDone)
	require.Equal(t, int64(len(mid)), k.ResultBytes)
	require.Equal(t, int64(2001), k.Lease)
	left, err := s.Unsettled()
	require.NoError(t, err)
	require.Equal(t, []JobRecord{k}, left)

	// Open wrote the caller entries the store had none of.
	for caller, id := range map[string]string{"alice": testID(1), "bob": testID(2)} {
		jobs, next, err := s.CallerJobs(caller, nil, 10, nil)
		require.NoError(t, err)
		require.Nil(t, next)
		require.Len(t, jobs, 1)
		require.Equal(t, id, jobs[0].ID)
	}
	// And the entries of the index of every job; its rows have no times.
	all, _, err := s.AllJobs(nil, 10, nil)
	require.NoError(t, err)
	require.Len(t, all, 2)
	for _, j := range all {
		require.Zero(t, j.Started, "unknown")
		require.Zero(t, j.Ended, "unknown")
	}
	for _, t2 := range ts {
		require.Zero(t, t2.Took, "unknown")
	}

	// A version 4 outcome, chunked, beside the version 2 one.
	long := result(resultChunkSize+100, 3)
	require.NoError(t, s.SaveOutcome(k.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: long, Stored: 2002, Took: 7}))
	_, ts, err = s.JobWithTargets(k.ID)
	require.NoError(t, err)
	require.Equal(t, mid, ts[0].Result)
	require.Equal(t, long, ts[1].Result)
	require.Equal(t, time.Duration(7), ts[1].Took)
	k.Status, k.Settled, k.TargetsDone, k.TargetsFailed, k.ResultBytes, k.Lease = StatusPartial, true, 3, 1, int64(len(mid)+len(long)), 2003
	require.NoError(t, s.SaveTarget(&k, &TargetRecord{Idx: 2, Status: TargetFailed, Error: "e", Stored: 2003}))

	n, _, err := s.Sweep(3000, 10)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, requireCounted(t, s))
	require.Equal(t, emptyStore, keysByPrefix(t, s))
}

// TestStore_Timings: a job's started and ended times and a target's fetch
// time are stored with the row and the outcome (inline or chunked) and
// read by every read; rows of version 3 (before them) read as 0, unknown,
// beside version 4 ones.
func TestStore_Timings(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := mustOpen(t, mode.dir(t))
			j := JobRecord{ID: testID(1), Caller: "alice", Status: StatusQueued, TargetsTotal: 3, Created: 10, Lease: 10}
			require.NoError(t, s.CreateJob(&j, make([]TargetRecord, 3)))
			j.Status, j.Started = StatusRunning, 11
			require.NoError(t, s.SaveJob(&j))
			require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("{}"), Stored: 20, Took: 3 * time.Millisecond}))
			long := result(inlineResultMax+1, 1)
			j.Status, j.Ended, j.Settled, j.TargetsDone, j.TargetsFailed, j.ResultBytes = StatusPartial, 30, true, 2, 1, int64(2+len(long))
			require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: long, Stored: 25, Took: time.Hour}))
			require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 2, Status: TargetFailed, Error: "e", Stored: 30, Took: 1}))

			got, ts, err := s.JobWithTargets(j.ID)
			require.NoError(t, err)
			require.Equal(t, int64(11), got.Started)
			require.Equal(t, int64(30), got.Ended)
			require.Equal(t, []time.Duration{3 * time.Millisecond, time.Hour, 1}, []time.Duration{ts[0].Took, ts[1].Took, ts[2].Took})
			_, statuses, err := s.TargetStatuses(j.ID)
			require.NoError(t, err)
			for i := range ts {
				require.Equal(t, ts[i].Took, statuses[i].Took)
			}
			one, err := s.Target(j.ID, 1)
			require.NoError(t, err)
			require.Equal(t, time.Hour, one.Took)

			// Version 3 rows beside them: the same but for the times.
			k := JobRecord{ID: testID(2), Caller: "bob", Status: StatusDone, TargetsTotal: 1, TargetsDone: 1, Created: 40, Lease: 40, Settled: true, ResultBytes: 2}
			id := mustID(t, k.ID)
			out := TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("{}"), Stored: 41, ResultSize: 2}
			require.NoError(t, s.update("write v3 rows", func(txn *badger.Txn) (int64, error) {
				for _, kv := range [][2][]byte{
					{jobKey(id), encodeJobAs(formatVersion3, &k)}, {specsKey(id), encodeSpecsAs(formatVersion3, []TargetRecord{{URL: "http://a"}})},
					{outcomeKey(id, 0), encodeOutcomeAs(formatVersion3, &out)},
					{indexKey(prefixLease, k.Lease, id), nil}, {indexKey(prefixAge, k.Created, id), nil}, {everyKey(k.Created, id), nil},
				} {
					if err := txn.Set(kv[0], kv[1]); err != nil {
						return 0, err
					}
				}
				return 0, nil
			}))
			got, ts, err = s.JobWithTargets(k.ID)
			require.NoError(t, err)
			require.Equal(t, k, got)
			require.Zero(t, got.Started)
			require.Zero(t, got.Ended)
			require.Equal(t, []byte("{}"), ts[0].Result)
			require.Equal(t, int64(41), ts[0].Stored)
			require.Zero(t, ts[0].Took)
			all, _, err := s.AllJobs(nil, 10, nil)
			require.NoError(t, err)
			require.Equal(t, []string{k.ID, j.ID}, []string{all[0].ID, all[1].ID})

			// A version 4 outcome of a fetch time that does not fit an
			// int64 is corrupt.
			bad := encodeOutcome(&TargetRecord{Status: TargetDone, Result: []byte("{}"), Stored: 1})
			bad[18] = 0x80
			require.ErrorIs(t, decodeOutcome(&TargetRecord{}, bad), ErrCorrupt)
		})
	}
}

// A deleted job leaves a tombstone for each outcome and chunk row it had,
// and none for a target never stored: a job cancelled after one target
// of 32 leaves one under r, not 32.
func TestStore_DeleteWritesNoNeedlessTombstones(t *testing.T) {
	s := mustOpen(t, "")
	j := JobRecord{ID: testID(1), Caller: "alice", Status: StatusRunning, TargetsTotal: 32, Created: 1, Lease: 1}
	require.NoError(t, s.CreateJob(&j, make([]TargetRecord, 32)))
	long := result(resultChunkSize+1, 0)
	j.Status, j.Settled, j.TargetsDone, j.ResultBytes = StatusCancelled, true, 1, int64(len(long))
	require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone, Result: long, Stored: 2}))
	n, _, err := s.Sweep(2, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	tombstones := map[byte]int{}
	require.NoError(t, s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if it.Item().IsDeletedOrExpired() {
				tombstones[it.Item().Key()[0]]++
			}
		}
		return nil
	}))
	require.Equal(t, 1, tombstones[prefixOutcome], "the one outcome stored")
	require.Equal(t, 2, tombstones[prefixResult], "its two chunks")
}
