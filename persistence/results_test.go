package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

// modes are the two kinds of store: every result test runs on both.
var modes = []struct {
	name string
	dir  func(t *testing.T) string
}{
	{"memory", func(*testing.T) string { return "" }},
	{"disk", func(t *testing.T) string { return t.TempDir() }},
}

// result is n bytes that differ from chunk to chunk and from seed to seed,
// so that a chunk read at the wrong place shows.
func result(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/resultChunkSize*7 + i%251 + seed)
	}
	return b
}

// chunksOf counts the b keys of job id, by target.
func chunksOf(t *testing.T, s *Store, id [idLen]byte) map[int]int {
	t.Helper()
	n := map[int]int{}
	require.NoError(t, s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: resultsPrefix(id)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			require.Len(t, k, chunkKeyLen)
			n[int(k[1+idLen])<<8|int(k[2+idLen])]++
		}
		return nil
	}))
	return n
}

// TestStore_Results stores results of every length that matters (none,
// inline, the longest inline, the shortest chunked, one chunk exactly, one
// byte more, 16 MiB and a bit) in both modes, and reads them back every way:
// the reads that return results return them whole; TargetStatuses and Job
// return none but their lengths; the byte total counts each once; deleting
// the job deletes every chunk.
func TestStore_Results(t *testing.T) {
	sizes := []int{0, 1, inlineResultMax, inlineResultMax + 1, resultChunkSize, resultChunkSize + 1, 16<<20 + 3}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := mustOpen(t, mode.dir(t))
			j := JobRecord{ID: testID(1), Caller: "alice", Status: StatusRunning, TargetsTotal: len(sizes) + 1, Created: 1, Lease: 1}
			specs := make([]TargetRecord, len(sizes)+1)
			for i := range specs {
				specs[i] = TargetRecord{Idx: i, URL: fmt.Sprintf("http://h/%d", i)}
			}
			require.NoError(t, s.CreateJob(&j, specs))
			want := make([]TargetRecord, len(specs))
			var total int64     // result bytes
			stored := s.Bytes() // the row and the specs, then the outcomes
			for i, n := range sizes {
				res := result(n, i)
				if n == 0 {
					res = nil
				}
				tr := TargetRecord{Idx: i, Status: TargetDone, Result: res, Stored: int64(10 + i)}
				require.NoError(t, s.SaveOutcome(j.ID, &tr), "size %d", n)
				stored += int64(len(encodeOutcome(&tr))) // with the result when it is inline
				if chunkCount(int64(n)) > 0 {
					stored += int64(n)
				}
				total += int64(n)
				tr.URL, tr.ResultSize = specs[i].URL, int64(n)
				want[i] = tr
			}
			failed := TargetRecord{Idx: len(sizes), URL: specs[len(sizes)].URL, Status: TargetFailed, Error: "e", Hint: "h", Stored: 99}
			require.NoError(t, s.SaveOutcome(j.ID, &failed))
			stored += int64(len(encodeOutcome(&failed)))
			want[len(sizes)] = failed
			require.Equal(t, stored, requireCounted(t, s), "each result and row counted once")

			id := mustID(t, j.ID)
			chunks := chunksOf(t, s, id)
			for i, n := range sizes {
				require.Equal(t, chunkCount(int64(n)), chunks[i], "chunks of a %d-byte result", n)
			}

			check := func(t *testing.T) {
				got, ts, err := s.JobWithTargets(j.ID)
				require.NoError(t, err)
				require.Equal(t, want, ts)
				require.Equal(t, total, got.ResultBytes)
				all, err := s.Targets(j.ID)
				require.NoError(t, err)
				require.Equal(t, want, all)
				for i := range want {
					one, err := s.Target(j.ID, i)
					require.NoError(t, err)
					require.Equal(t, want[i], one)
				}

				got2, statuses, err := s.TargetStatuses(j.ID)
				require.NoError(t, err)
				require.Equal(t, got, got2)
				for i := range want {
					w := want[i]
					w.Result = nil
					require.Equal(t, w, statuses[i], "target %d: no result, its length", i)
				}
				got3, err := s.Job(j.ID)
				require.NoError(t, err)
				require.Equal(t, got, got3)

				for i, n := range sizes {
					res, err := s.ResultJSON(j.ID, i)
					require.NoError(t, err)
					require.Equal(t, n, len(res))
					require.True(t, bytes.Equal(want[i].Result, res), "result %d", i)
					if chunkCount(int64(n)) > 0 {
						require.Equal(t, n, cap(res), "allocated once, at its size")
					}
				}
				for _, idx := range []int{len(sizes), len(sizes) + 1, -1, 0xffff, 0x10000} {
					_, err := s.ResultJSON(j.ID, idx)
					require.ErrorIs(t, err, ErrNotFound, "target %d: failed, or out of range", idx)
				}
				_, err = s.ResultJSON(testID(2), 0)
				require.ErrorIs(t, err, ErrNotFound, "an unknown job")
				_, _, err = s.TargetStatuses(testID(2))
				require.ErrorIs(t, err, ErrNotFound, "an unknown job")
			}
			t.Run("Unsettled", check)

			j.Status, j.Settled, j.TargetsDone, j.TargetsFailed, j.ResultBytes, j.Lease = StatusPartial, true, len(specs), 1, total, 99
			require.NoError(t, s.SaveJob(&j))
			t.Run("Settled", check)

			n, _, err := s.Sweep(99, 10)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Zero(t, s.Bytes())
			require.Equal(t, emptyStore, keysByPrefix(t, s), "no chunk left")
		})
	}
}

// A job's targets with results of 512 KiB each, 16 MiB in all, stored in
// one group commit in memory: the chunks go in transactions of their own,
// the outcomes in the group, each job's in order.
func TestStore_ResultsInOneGroup(t *testing.T) {
	s := mustOpen(t, "")
	const jobs, perJob = 4, 8
	for n := range jobs {
		j := JobRecord{ID: testID(n), Caller: "alice", Status: StatusRunning, TargetsTotal: perJob, Created: 1, Lease: 1}
		j.Key[0] = byte(n)
		require.NoError(t, s.CreateJob(&j, make([]TargetRecord, perJob)))
	}
	entered, release := holdWrites(s)
	first := make(chan error, 1)
	s.SaveOutcomeAsync(testID(0), &TargetRecord{Idx: 0, Status: TargetFailed}, func(err error) { first <- err })
	testkit.Recv(t, entered)
	errs := make(chan error, jobs*perJob)
	for idx := range perJob {
		for n := range jobs {
			if n == 0 && idx == 0 {
				continue
			}
			tr := TargetRecord{Idx: idx, Status: TargetDone, Result: result(resultChunkSize, n*perJob+idx)}
			s.SaveOutcomeAsync(testID(n), &tr, func(err error) { errs <- err })
		}
	}
	release()
	require.NoError(t, <-first)
	for range jobs*perJob - 1 {
		require.NoError(t, <-errs)
	}
	for n := range jobs {
		ts, err := s.Targets(testID(n))
		require.NoError(t, err)
		for idx := range perJob {
			if n == 0 && idx == 0 {
				continue
			}
			require.True(t, bytes.Equal(result(resultChunkSize, n*perJob+idx), ts[idx].Result), "job %d target %d", n, idx)
		}
	}
	require.Greater(t, requireCounted(t, s), int64((jobs*perJob-1)*resultChunkSize))
}

// TestStore_OrphanChunks: chunks written without their outcome row (its
// write failed after them, as a crash between the two would leave them) are
// not a result: the target reads pending, the byte total does not count
// them, a later write of the outcome (shorter, here) takes its own chunks
// only, and deleting the job deletes every chunk under its id.
func TestStore_OrphanChunks(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := mustOpen(t, mode.dir(t))
			j := putJobRecord(t, s, 1, 1, 1, false)
			id := mustID(t, j.ID)
			disk := errors.New("no space left on device")
			calls := 0
			s.SetWriteFault(func() error {
				calls++
				if calls > 1 { // the chunk transaction goes through, the outcome's fails
					return disk
				}
				return nil
			})
			long := result(3*resultChunkSize-5, 1)
			err := s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: long, Stored: 5})
			require.ErrorIs(t, err, disk)
			s.SetWriteFault(nil)
			require.Equal(t, map[int]int{0: 3}, chunksOf(t, s, id), "the chunks are there")
			rows := jobBytes(t, s, j.ID)
			require.Equal(t, rows, requireCounted(t, s), "chunks without their outcome row are not counted")
			_, ts, err := s.TargetStatuses(j.ID)
			require.NoError(t, err)
			require.Equal(t, TargetPending, ts[0].Status)
			_, err = s.ResultJSON(j.ID, 0)
			require.ErrorIs(t, err, ErrNotFound)

			short := result(resultChunkSize+1, 2)
			require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: short, Stored: 6}))
			res, err := s.ResultJSON(j.ID, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(short, res), "its own chunks, not the third one left behind")
			require.Equal(t, rows+int64(len(short)+len(encodeOutcome(&TargetRecord{Status: TargetDone, Result: short}))), requireCounted(t, s))

			// Target 1 has only orphans: a crash before its outcome.
			require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
				return 0, txn.Set(chunkKey(id, 1, 0), []byte("orphan"))
			}))
			j.Status, j.Settled, j.TargetsDone, j.ResultBytes = StatusFailed, true, 1, int64(len(short))
			require.NoError(t, s.SaveJob(&j))
			n, err := s.Evict(0)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Empty(t, chunksOf(t, s, id))
			require.Equal(t, emptyStore, keysByPrefix(t, s))
			require.Zero(t, requireCounted(t, s))
		})
	}
}

// A chunk missing or cut short under an outcome that needs it is a damaged
// store: an error wrapping ErrCorrupt, never a short result.
func TestStore_DamagedChunks(t *testing.T) {
	s := mustOpen(t, "")
	j := putJobRecord(t, s, 1, 1, 1, false)
	id := mustID(t, j.ID)
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: result(2*resultChunkSize, 0)}))
	for name, damage := range map[string]func(txn *badger.Txn) error{
		"missing": func(txn *badger.Txn) error { return txn.Delete(chunkKey(id, 0, 1)) },
		"short":   func(txn *badger.Txn) error { return txn.Set(chunkKey(id, 0, 0), []byte("short")) },
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) { return 0, damage(txn) }))
			_, err := s.ResultJSON(j.ID, 0)
			require.ErrorIs(t, err, ErrCorrupt)
			_, _, err = s.JobWithTargets(j.ID)
			require.ErrorIs(t, err, ErrCorrupt)
			_, _, err = s.TargetStatuses(j.ID)
			require.NoError(t, err, "statuses read no chunk")
		})
	}
}
