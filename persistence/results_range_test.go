package persistence

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// storeResults stores one done target per size in a job of its own store
// s, and returns the job's id and the results.
func storeResults(t testing.TB, s *Store, sizes ...int) (string, [][]byte) {
	t.Helper()
	j := JobRecord{ID: testID(1), Caller: "alice", Status: StatusRunning, TargetsTotal: len(sizes) + 1, Created: 1, Lease: 1}
	specs := make([]TargetRecord, len(sizes)+1)
	for i := range specs {
		specs[i] = TargetRecord{Idx: i, URL: fmt.Sprintf("http://h/%d", i)}
	}
	require.NoError(t, s.CreateJob(&j, specs))
	res := make([][]byte, len(sizes))
	for i, n := range sizes {
		res[i] = result(n, i)
		require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: i, Status: TargetDone, Result: res[i], Stored: 1}))
	}
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: len(sizes), Status: TargetFailed, Error: "e", Stored: 1}))
	return j.ID, res
}

// TestStore_ResultRange reads ranges of results inline and chunked, across
// and at chunk boundaries, past the end, and of targets without a result.
func TestStore_ResultRange(t *testing.T) {
	sizes := []int{1, inlineResultMax, inlineResultMax + 1, resultChunkSize, 3*resultChunkSize + 17}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			s := mustOpen(t, mode.dir(t))
			id, res := storeResults(t, s, sizes...)
			for i, r := range res {
				n := int64(len(r))
				for _, rg := range [][2]int64{
					{0, n}, {0, 1}, {n - 1, 1}, {0, n + 100}, {n, 10}, {n + 5, 10}, {-1, 10}, {0, 0}, {0, -3},
					{resultChunkSize - 3, 6}, {resultChunkSize, 1}, {resultChunkSize - 1, resultChunkSize + 2},
					{2*resultChunkSize + 5, 256 << 10},
				} {
					got, size, err := s.ResultRange(id, i, rg[0], rg[1])
					require.NoError(t, err)
					require.Equal(t, n, size)
					var want []byte
					if rg[0] >= 0 && rg[1] > 0 && rg[0] < n {
						want = r[rg[0]:min(n, rg[0]+rg[1])]
					}
					require.Equal(t, len(want), len(got), "result %d range %v", i, rg)
					if len(want) > 0 {
						require.Equal(t, want, got, "result %d range %v", i, rg)
					}
				}
			}
			for _, bad := range []struct {
				id  string
				idx int
			}{{id, len(sizes)}, {id, len(sizes) + 1}, {id, -1}, {testID(2), 0}, {"zz", 0}} {
				_, _, err := s.ResultRange(bad.id, bad.idx, 0, 10)
				require.ErrorIs(t, err, ErrNotFound, "%v", bad)
			}
		})
	}
}

// BenchmarkStore_ResultRange reads a 256 KiB range in the middle of a
// result of 1, 16 and 32 MiB (MaxResultSize): B/op stays near the chunks
// the range covers, whatever the result's size; ResultJSON reads it all.
func BenchmarkStore_ResultRange(b *testing.B) {
	for _, mib := range []int{1, 16, MaxResultSize >> 20} {
		s := mustOpen(b, b.TempDir())
		id, _ := storeResults(b, s, mib<<20)
		off := int64(mib<<20) / 2
		b.Run(fmt.Sprintf("range/%dMiB", mib), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.ResultRange(id, 0, off, 256<<10); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("whole/%dMiB", mib), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ResultJSON(id, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
