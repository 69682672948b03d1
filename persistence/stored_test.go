package persistence

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// requireCounted checks that the byte total is what a count of every row
// gives (CountBytes), and returns it.
func requireCounted(tb testing.TB, s *Store) int64 {
	tb.Helper()
	n, err := s.CountBytes()
	require.NoError(tb, err)
	require.Equal(tb, n, s.Bytes(), "the byte total is the count of the rows")
	return n
}

// jobBytes is what job id's rows count in the byte total.
func jobBytes(tb testing.TB, s *Store, id string) int64 {
	tb.Helper()
	raw, ok := parseID(id)
	require.True(tb, ok)
	var d doomed
	require.NoError(tb, s.view("test", func(txn *badger.Txn) error {
		var err error
		d, err = doom(txn, raw)
		return err
	}))
	return d.size
}

// TestStore_BytesCountEveryRowUnderRandomWrites runs a seeded random mix of
// every write the store has (a job created with specs of any length, an
// outcome done inline or chunked or failed with an error and a hint, a row
// rewritten with an error text, settled done, failed or cancelled, a Touch,
// a sweep, an eviction) and checks after each that the byte total is what a
// count of every row gives; then after a Close and a reopen.
func TestStore_BytesCountEveryRowUnderRandomWrites(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			dir := mode.dir(t)
			s, err := Open(dir)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(20260123, 1))
			type liveJob struct {
				rec  JobRecord
				next int // the next target to store
			}
			var live []*liveJob
			created, now := 0, int64(1000)
			text := func(max int) string { return strings.Repeat("e", rng.IntN(max)) }
			for op := range 400 {
				now++
				switch k := rng.IntN(10); {
				case k < 3 || len(live) == 0: // a new job
					n := 1 + rng.IntN(4)
					ts := make([]TargetRecord, n)
					for i := range ts {
						ts[i] = TargetRecord{Idx: i, URL: "http://h/" + text(200), Options: []byte(text(50))}
					}
					created++
					j := JobRecord{ID: testID(created), Caller: "c" + text(20), Status: StatusQueued, TargetsTotal: n, Created: now, Lease: now}
					j.Key[0], j.Key[1] = byte(created>>8), byte(created)
					require.NoError(t, s.CreateJob(&j, ts))
					live = append(live, &liveJob{rec: j})
				case k < 6: // an outcome
					l := live[rng.IntN(len(live))]
					if l.next == l.rec.TargetsTotal {
						continue
					}
					tr := TargetRecord{Idx: l.next, Status: TargetDone, Stored: now}
					switch rng.IntN(3) {
					case 0:
						tr.Result = result(rng.IntN(inlineResultMax+1), op)
					case 1:
						tr.Result = result(inlineResultMax+1+rng.IntN(2*resultChunkSize), op)
					default:
						tr.Status, tr.Error, tr.Hint = TargetFailed, text(300), text(100)
					}
					l.rec.CountOutcome(tr.Status, int64(len(tr.Result)), now)
					l.next++
					if rng.IntN(2) == 0 {
						require.NoError(t, s.SaveOutcome(l.rec.ID, &tr))
					} else {
						l.rec.Status = StatusRunning
						require.NoError(t, s.SaveTarget(&l.rec, &tr))
					}
				case k < 7: // the row again, with an error text of another length
					l := live[rng.IntN(len(live))]
					l.rec.Error = text(100)
					require.NoError(t, s.SaveJob(&l.rec))
				case k < 8: // settled: done by its outcomes, failed, or cancelled
					i := rng.IntN(len(live))
					l := live[i]
					switch {
					case l.next == l.rec.TargetsTotal:
						l.rec.Status, l.rec.Error = l.rec.TerminalStatus(), ""
					case rng.IntN(2) == 0:
						l.rec.Status, l.rec.Error = StatusFailed, "restart"
					default:
						l.rec.Status, l.rec.Error = StatusCancelled, ""
					}
					l.rec.Settled = true
					require.NoError(t, s.SaveJob(&l.rec))
					live = append(live[:i], live[i+1:]...)
				case k < 9: // a Touch of any job
					_, err := s.Touch(testID(1+rng.IntN(created)), now)
					require.NoError(t, err)
				default: // a sweep or an eviction
					if rng.IntN(2) == 0 {
						_, _, err := s.Sweep(now-int64(rng.IntN(200)), 1+rng.IntN(10))
						require.NoError(t, err)
					} else {
						_, err := s.Evict(int64(rng.IntN(4 << 20)))
						require.NoError(t, err)
					}
				}
				requireCounted(t, s)
			}
			want := requireCounted(t, s)
			require.NotZero(t, want)
			require.NoError(t, s.Close())
			if dir == "" {
				return
			}
			s = mustOpen(t, dir)
			require.Equal(t, want, requireCounted(t, s), "the same after a reopen")
		})
	}
}

// TestStore_FailedAndCancelledJobsAreEvicted: jobs with no result (every
// target failed, or cancelled before any was stored) count their rows, so
// eviction bounds them: oldest settled first, live jobs never.
func TestStore_FailedAndCancelledJobsAreEvicted(t *testing.T) {
	s := mustOpen(t, "")
	live := putJobRecord(t, s, 0, 0, 0, false) // the oldest, but live
	const jobs = 200
	for i := 1; i <= jobs; i++ {
		j := putJobRecord(t, s, i, int64(i), int64(i), false)
		if i%2 == 0 {
			for idx := range 2 {
				require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: idx, Status: TargetFailed, Error: "connection refused", Hint: "check the host", Stored: int64(i)}))
			}
			j.Status, j.TargetsDone, j.TargetsFailed = StatusFailed, 2, 2
		} else {
			j.Status = StatusCancelled
		}
		j.Settled = true
		require.NoError(t, s.SaveJob(&j))
	}
	u := jobBytes(t, s, testID(jobs)) // a failed job's rows
	max := 20 * u
	n, err := s.Evict(max)
	require.NoError(t, err)
	require.Positive(t, n)
	total := requireCounted(t, s)
	require.LessOrEqual(t, total, max)
	require.Greater(t, total+u, max, "no more evicted than needed: one more job would not fit")
	count := 0
	require.NoError(t, s.Jobs(func(j JobRecord) bool { count++; return true }))
	require.Equal(t, jobs+1-n, count)
	require.True(t, exists(t, s, live.ID), "live jobs are never evicted")
	for i := 1; i <= jobs; i++ {
		require.Equal(t, i > n, exists(t, s, testID(i)), "job %d: the oldest go first", i)
	}
}

// oldFormat makes s's store look as a store of the version before the
// byte total counted every row: no m stored, and m bytes with its result
// bytes only.
func oldFormat(t *testing.T, s *Store, results int64) {
	t.Helper()
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		if err := txn.Delete(keyStored); err != nil {
			return 0, err
		}
		return 0, txn.Set(keyResultBytes, binary.BigEndian.AppendUint64(nil, uint64(results)))
	}))
}

// TestStore_CountsAnOlderStoreOnce opens a store written before the byte
// total counted every row (m bytes, results only): Open counts every row,
// writes the count (m stored) and deletes m bytes; the next Open reads it
// and counts nothing. A read-only Open counts it in memory and writes
// nothing.
func TestStore_CountsAnOlderStoreOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	var results int64
	for i := range 5 {
		j := putJobRecord(t, s, i, int64(i), int64(i), false)
		res := result(100*i+inlineResultMax*(i%2), i)
		require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: res, Stored: int64(i)}))
		require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 1, Status: TargetFailed, Error: "e", Stored: int64(i)}))
		results += int64(len(res))
		if i%2 == 0 {
			j.Status, j.Settled, j.Error = StatusFailed, true, "restart"
			require.NoError(t, s.SaveJob(&j))
		}
	}
	want := requireCounted(t, s)
	oldFormat(t, s, results)
	require.NoError(t, s.Close())
	meta := func(s *Store) (stored, old bool) {
		require.NoError(t, s.db.View(func(txn *badger.Txn) error {
			_, err := txn.Get(keyStored)
			stored = err == nil
			_, err = txn.Get(keyResultBytes)
			old = err == nil
			return nil
		}))
		return stored, old
	}

	ro, err := OpenReadOnly(dir)
	require.NoError(t, err)
	require.Equal(t, want, requireCounted(t, ro), "a read-only Open counts in memory")
	stored, old := meta(ro)
	require.False(t, stored, "and writes nothing")
	require.True(t, old)
	require.NoError(t, ro.Close())

	s, err = Open(dir)
	require.NoError(t, err)
	require.Equal(t, want, requireCounted(t, s), "Open counts every row")
	stored, old = meta(s)
	require.True(t, stored)
	require.False(t, old, "m bytes is gone")
	// Mark the total, to see that the next Open reads it, not counts again.
	const mark = 123456789
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		return 0, txn.Set(keyStored, binary.BigEndian.AppendUint64(nil, mark))
	}))
	require.NoError(t, s.Close())
	s = mustOpen(t, dir)
	require.Equal(t, int64(mark), s.Bytes(), "counted once: the next Open reads the total")
}
