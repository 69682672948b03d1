package engine_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/persistence"
)

// benchListChunk is how many pages of one store the alternating list
// benchmark reads before it switches to the other store.
const benchListChunk = 64

// fillListStore stores n settled jobs of one target each, from 100
// callers, one created a millisecond after the other (every 10th failed),
// straight into s, as a store that has run for a while holds them.
func fillListStore(b *testing.B, s *persistence.Store, n int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	ts := []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/list/page", Options: []byte("{}")}}
	at := time.Now().Add(-time.Hour).UnixNano()
	for i := range n {
		var id [16]byte
		binary.BigEndian.PutUint64(id[:], rng.Uint64())
		binary.BigEndian.PutUint64(id[8:], rng.Uint64())
		created := at + int64(i)*int64(time.Millisecond)/100
		j := persistence.JobRecord{ID: hex.EncodeToString(id[:]), Caller: fmt.Sprintf("caller-%d", i%100), Status: persistence.StatusDone,
			Settled: true, TargetsTotal: 1, TargetsDone: 1, Created: created, Lease: created, Started: created, Ended: created}
		if i%10 == 0 {
			j.Status, j.TargetsFailed = persistence.StatusFailed, 1
		}
		binary.BigEndian.PutUint64(j.Key[:], rng.Uint64())
		if err := s.CreateJob(&j, ts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunner_ListAll measures a page of 20 of every caller's jobs,
// newest first ([engine.Runner.ListAll]), in an in-memory store of 1,000
// and of 100,000 settled jobs (100 callers, every 10th job failed): the
// page's cost must not grow with the jobs stored (issue 26: flat, ≤ 1.5×).
//
//   - stored=N/status=S/page=P: one op is one page: the first, or the
//     4th (the cursor of the 3rd in hand); status "" keeps every job,
//     "failed" one in ten (a page looks at 200 jobs).
//   - alternating/status=S: one op is one first page; the benchmark reads
//     the two stores in turns of 64 pages each, in the same loop, and
//     reports each one's mean (ns/page-1k, ns/page-100k) and their ratio
//     (x-100k/1k), paired within one run on a noisy machine.
func BenchmarkRunner_ListAll(b *testing.B) {
	sizes := []int{1_000, 100_000}
	runners := map[int]*engine.Runner{}
	for _, n := range sizes {
		s := enginetest.OpenStore(b, "")
		fillListStore(b, s, n)
		runners[n] = enginetest.SetupOn(b, s, enginetest.OKFetch, engine.Config{Now: time.Now}).Runner
	}
	page := func(b *testing.B, r *engine.Runner, opt engine.ListOptions) string {
		jobs, next, err := r.ListAll(opt)
		if err != nil || len(jobs) != 20 || next == "" {
			b.Fatal(len(jobs), next, err)
		}
		return next
	}
	for _, status := range []string{"", "failed"} {
		for _, n := range sizes {
			r := runners[n]
			opt := engine.ListOptions{Status: status, Limit: 20}
			deep := opt
			for range 3 {
				deep.Cursor = page(b, r, deep)
			}
			for _, p := range []struct {
				name string
				opt  engine.ListOptions
			}{{"page=1", opt}, {"page=4", deep}} {
				b.Run(fmt.Sprintf("stored=%d/status=%s/%s", n, status, p.name), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						page(b, r, p.opt)
					}
				})
			}
		}
		b.Run("alternating/status="+status, func(b *testing.B) {
			opt := engine.ListOptions{Status: status, Limit: 20}
			var took [2]time.Duration
			var pages [2]int
			i := 0
			for b.Loop() {
				k := (i / benchListChunk) % 2
				start := time.Now()
				page(b, runners[sizes[k]], opt)
				took[k] += time.Since(start)
				pages[k]++
				i++
			}
			if pages[0] > 0 && pages[1] > 0 {
				small, large := float64(took[0])/float64(pages[0]), float64(took[1])/float64(pages[1])
				b.ReportMetric(small, "ns/page-1k")
				b.ReportMetric(large, "ns/page-100k")
				b.ReportMetric(large/small, "x-100k/1k")
			}
		})
	}
}

// BenchmarkRunner_ListAllRareStatus measures the first page of every
// caller's jobs with a status filter that no stored job has ("cancelled":
// the page is empty), in stores of 1,000 and 100,000 settled jobs. A page
// looks at no more than engine.ListScan (1,000) jobs: at 1k it reads the
// whole store and is the last page; at 100k it stops there, empty, with a
// next cursor. So its cost does not grow with the store.
//
//   - stored=N: one op is one first page of that store.
//   - alternating: the two stores' first pages in turns of
//     benchListChunk, in one loop; it reports each one's mean
//     (ns/page-1k, ns/page-100k) and their ratio (x-100k/1k).
func BenchmarkRunner_ListAllRareStatus(b *testing.B) {
	sizes := []int{1_000, 100_000}
	runners := map[int]*engine.Runner{}
	for _, n := range sizes {
		s := enginetest.OpenStore(b, "")
		fillListStore(b, s, n)
		runners[n] = enginetest.SetupOn(b, s, enginetest.OKFetch, engine.Config{Now: time.Now}).Runner
	}
	opt := engine.ListOptions{Status: engine.StatusCancelled, Limit: 20}
	page := func(b *testing.B, n int) {
		jobs, next, err := runners[n].ListAll(opt)
		if err != nil || len(jobs) != 0 || (next == "") != (n <= engine.ListScan) {
			b.Fatal(len(jobs), next, err)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("stored=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page(b, n)
			}
		})
	}
	b.Run("alternating", func(b *testing.B) {
		var took [2]time.Duration
		var pages [2]int
		i := 0
		for b.Loop() {
			k := (i / benchListChunk) % 2
			start := time.Now()
			page(b, sizes[k])
			took[k] += time.Since(start)
			pages[k]++
			i++
		}
		if pages[0] > 0 && pages[1] > 0 {
			small, large := float64(took[0])/float64(pages[0]), float64(took[1])/float64(pages[1])
			b.ReportMetric(small, "ns/page-1k")
			b.ReportMetric(large, "ns/page-100k")
			b.ReportMetric(large/small, "x-100k/1k")
		}
	})
}
