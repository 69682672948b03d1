package engine_test

// The durable mode's figures (issue 28): throughput and Submit latency,
// default (DurabilityProcess) vs durable (DurabilitySync), side by side in
// one run; docs/PERFORMANCE.md (Durable mode) holds them.

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// durabilities are the modes the durable benchmarks compare, innermost, so
// that each pair runs back to back.
var durabilities = []engine.Durability{engine.DurabilityProcess, engine.DurabilitySync}

// diskSyncs measures the synced-write rate of the disk under dir
// ([testkit.DiskSyncRate], 300 ms), just before a run: its reference.
func diskSyncs(b *testing.B, dir string) float64 {
	b.Helper()
	rate, err := testkit.DiskSyncRate(dir, 300*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	return rate
}

// BenchmarkRunner_Durable measures no-op throughput (a FetchFunc that
// returns at once) with 1 or 2 workers and 1, 8 or 32 live jobs (jobs of
// 256 targets, the next submitted as one ends, so that that many stay
// live), in each Durability, on a directory store. One op is one target
// stored; the Submits are inside the timer.
//
// Besides ns/op it reports targets/s; disk-syncs/s, 4 KiB O_DSYNC writes
// per second in the store's directory measured just before the run;
// targets/sync, targets over the store's syncs (durable only: a job's
// creation is one of them); and sync-ceiling/s, disk-syncs/s × targets/sync,
// the rate the disk would allow at that grouping.
func BenchmarkRunner_Durable(b *testing.B) {
	for _, workers := range []int{1, 2} {
		for _, live := range []int{1, 8, 32} {
			for _, d := range durabilities {
				b.Run(fmt.Sprintf("workers=%d/live=%d/%s", workers, live, d), func(b *testing.B) {
					benchDurable(b, workers, live, d, -1)
				})
			}
		}
	}
}

// BenchmarkRunner_DurableCommitDelay is BenchmarkRunner_Durable's durable
// case with 8 and 32 live jobs, the store's commit delay off (delay=0) and
// at its default ([persistence.DefaultCommitDelay]), back to back.
func BenchmarkRunner_DurableCommitDelay(b *testing.B) {
	for _, workers := range []int{1, 2} {
		for _, live := range []int{8, 32} {
			for _, delay := range []time.Duration{0, persistence.DefaultCommitDelay} {
				b.Run(fmt.Sprintf("workers=%d/live=%d/delay=%s", workers, live, delay), func(b *testing.B) {
					benchDurable(b, workers, live, engine.DurabilitySync, delay)
				})
			}
		}
	}
}

// benchDurable runs one case of BenchmarkRunner_Durable; delay is the
// store's commit delay (persistence's SetCommitDelay), < 0 for its default.
func benchDurable(b *testing.B, workers, live int, d engine.Durability, delay time.Duration) {
	dir := b.TempDir()
	disk := diskSyncs(b, dir)
	store, err := persistence.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	if delay >= 0 {
		store.SetCommitDelay(delay)
	}
	const perJob = 256
	jobs := (b.N + perJob - 1) / perJob
	var stored atomic.Int64
	all := make(chan struct{})
	ended := make(chan struct{}, jobs)
	total := int64(b.N)
	result := engine.Result{Content: "ok"}
	r, err := engine.New(store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return result, nil
	}, engine.Config{
		Workers: workers, JobsTotal: live, JobsPerCaller: live, TargetsPerJob: perJob, MaxBytes: 1 << 40,
		Durability: d,
		Hooks: engine.Hooks{
			Target: func(error, time.Duration, int) {
				if stored.Add(1) == total {
					close(all)
				}
			},
			Job: func(outcome string) {
				if outcome != "created" && outcome != "reused" {
					ended <- struct{}{}
				}
			},
		},
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	c := &engine.Caller{Name: "bench"}
	batches := make([][]engine.Target, jobs)
	for j := range batches {
		batches[j] = make([]engine.Target, min(perJob, b.N-j*perJob))
		for i := range batches[j] {
			batches[j][i] = engine.Target{URL: fmt.Sprintf("https://example.com/%d/%d", j, i)}
		}
	}
	submit := func(ts []engine.Target) {
		if _, _, err := r.Submit(context.Background(), c, "", ts); err != nil {
			b.Fatal(err)
		}
	}
	syncs := store.Syncs()
	b.ResetTimer()
	start := time.Now()
	for j := range batches {
		if j >= live {
			select {
			case <-ended:
			case <-time.After(benchTimeout):
				b.Fatalf("no job ended; stored %d of %d targets", stored.Load(), total)
			}
		}
		submit(batches[j])
	}
	select {
	case <-all:
	case <-time.After(benchTimeout):
		b.Fatalf("stored %d of %d targets", stored.Load(), total)
	}
	b.StopTimer()
	took := time.Since(start)
	b.ReportMetric(float64(b.N)/took.Seconds(), "targets/s")
	b.ReportMetric(disk, "disk-syncs/s")
	if n := store.Syncs() - syncs; n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "targets/sync")
		b.ReportMetric(disk*float64(b.N)/float64(n), "sync-ceiling/s")
	}
}

// BenchmarkRunner_DurableSubmit measures Submit's latency in each
// Durability: one op is one Submit of a one-target job (a FetchFunc that
// returns at once, 1 worker, caps raised), one after another, on a
// directory store. It reports the p50 and p99 of the Submits in µs, and
// disk-syncs/s as BenchmarkRunner_Durable.
func BenchmarkRunner_DurableSubmit(b *testing.B) {
	for _, d := range durabilities {
		b.Run(d.String(), func(b *testing.B) {
			dir := b.TempDir()
			disk := diskSyncs(b, dir)
			store, err := persistence.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			r, err := engine.New(store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
				return engine.Result{Content: "ok"}, nil
			}, engine.Config{JobsTotal: b.N + 1, JobsPerCaller: b.N + 1, MaxBytes: 1 << 40, Durability: d}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			c := &engine.Caller{Name: "bench"}
			took := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				ts := []engine.Target{{URL: fmt.Sprintf("https://example.com/%d", i)}}
				start := time.Now()
				if _, _, err := r.Submit(context.Background(), c, "", ts); err != nil {
					b.Fatal(err)
				}
				took[i] = time.Since(start)
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[b.N/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(took[b.N*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(disk, "disk-syncs/s")
		})
	}
}
