package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// benchReadSizes are the result sizes of the read benchmarks: a settled
// 32-target job with 1 KiB of content per result (32 KiB in all), and one
// with 512 KiB per result (16 MiB in all). Issue 9 wants a read that does
// not ask for results to cost the same for both.
var benchReadSizes = []struct {
	name    string
	content int
}{{"1KiB", 1 << 10}, {"512KiB", 512 << 10}}

// benchReadChunk is how many reads of one job the alternating benchmarks
// time before they switch to the other job.
const benchReadChunk = 64

// BenchmarkRunner_Read measures the reads that answer a poll without
// results (issue 9): [engine.Runner.Job], the summary, and
// [engine.Runner.Targets], the summary and every target's status, of a
// settled (done, its actor gone) 32-target job, on a directory store and
// on the in-memory one. Targets are ≤ 5 µs for Job and ≤ 40 µs for
// Targets, each within 1.5× in time and in bytes allocated between 1 KiB
// and 512 KiB results.
//
//   - store=S/OP/result=SIZE: one op is one OP call on the job whose
//     results are SIZE each; ns/op, B/op, allocs/op as usual. Compare the
//     two sizes with benchstat -col /result.
//   - store=S/OP/alternating: one op is one OP call; the benchmark reads
//     the two jobs in turns of 64 calls each, in the same loop, and reports
//     each one's mean (ns/read-1KiB, ns/read-512KiB) and their ratio
//     (x-512KiB/1KiB): the time ratio paired within one run, on a noisy
//     machine.
//
// Both jobs are in one runner, written by it (results of the given size,
// a meta map), before any sub-benchmark starts.
func BenchmarkRunner_Read(b *testing.B) {
	ops := []struct {
		name string
		read func(r *engine.Runner, id string) bool
	}{
		{"Job", func(r *engine.Runner, id string) bool {
			j, ok := r.Job(id)
			return ok && j.Status == engine.StatusDone && j.TargetsDone == 32
		}},
		{"Targets", func(r *engine.Runner, id string) bool {
			j, ts, ok := r.Targets(id)
			return ok && j.Status == engine.StatusDone && len(ts) == 32 && ts[31].Status == engine.TargetDone && ts[31].Result == nil
		}},
	}
	for _, mode := range []struct {
		name string
		dir  bool
	}{{"dir", true}, {"mem", false}} {
		b.Run("store="+mode.name, func(b *testing.B) {
			r, ids := benchReadRunner(b, mode.dir)
			for _, op := range ops {
				for k, size := range benchReadSizes {
					b.Run(op.name+"/result="+size.name, func(b *testing.B) {
						b.ReportAllocs()
						for b.Loop() {
							if !op.read(r, ids[k]) {
								b.Fatalf("%s %s: not a done 32-target job", op.name, ids[k])
							}
						}
					})
				}
				b.Run(op.name+"/alternating", func(b *testing.B) {
					var took [2]time.Duration
					var n [2]int
					chunk := max(1, min(benchReadChunk, b.N/2))
					b.ResetTimer()
					for i := 0; i < b.N; {
						k := (i / chunk) % 2
						m := min(chunk, b.N-i)
						start := time.Now()
						for range m {
							if !op.read(r, ids[k]) {
								b.Fatalf("%s %s: not a done 32-target job", op.name, ids[k])
							}
						}
						took[k] += time.Since(start)
						n[k] += m
						i += m
					}
					b.StopTimer()
					if n[0] > 0 && n[1] > 0 {
						small := float64(took[0].Nanoseconds()) / float64(n[0])
						large := float64(took[1].Nanoseconds()) / float64(n[1])
						b.ReportMetric(small, "ns/read-"+benchReadSizes[0].name)
						b.ReportMetric(large, "ns/read-"+benchReadSizes[1].name)
						b.ReportMetric(large/small, "x-"+benchReadSizes[1].name+"/"+benchReadSizes[0].name)
					}
				})
			}
		})
	}
}

// benchReadRunner starts a runner on a directory store (dir) or an
// in-memory one, runs one 32-target job per size of benchReadSizes to its
// end, and returns the runner and the jobs' ids, in that order, once
// their actors are gone (the jobs are settled: reads go to the store).
// The runner and the store are closed at b's cleanup.
func benchReadRunner(b *testing.B, dir bool) (*engine.Runner, []string) {
	b.Helper()
	var store *persistence.Store
	if dir {
		store = benchStore(b)
	} else {
		var err error
		if store, err = persistence.Open(""); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := store.Close(); err != nil {
				b.Error(err)
			}
		})
	}
	contents := map[string]string{}
	for _, s := range benchReadSizes {
		contents["/"+s.name+"/"] = strings.Repeat("a", s.content)
	}
	fetch := func(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		for k, c := range contents {
			if strings.Contains(t.URL, k) {
				return engine.Result{Content: c, Meta: map[string]any{"status": 200, "content_type": "text/plain"}}, nil
			}
		}
		return engine.Result{}, fmt.Errorf("no content for this URL")
	}
	r, err := engine.New(store, fetch, engine.Config{JobsPerCaller: len(benchReadSizes)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close) // before the store's close: cleanups run last first
	c := &engine.Caller{Name: "bench"}
	ids := make([]string, len(benchReadSizes))
	for k, s := range benchReadSizes {
		ts := make([]engine.Target, 32)
		for i := range ts {
			ts[i] = engine.Target{URL: fmt.Sprintf("https://example.com/%s/page-%d", s.name, i)}
		}
		if ids[k], _, err = r.Submit(context.Background(), c, "", ts); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	for _, id := range ids {
		j, err := r.Wait(ctx, id)
		if err != nil || j.Status != engine.StatusDone {
			b.Fatalf("job %s: %s, %v", id, j.Status, err)
		}
	}
	// The jobs are done; their actors stop a moment after their terminal
	// write. Give them that moment, and Badger its compactions, so that the
	// reads measured go to the store alone.
	time.Sleep(50 * time.Millisecond)
	badgerSettle()
	return r, ids
}
