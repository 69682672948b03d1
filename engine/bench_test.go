package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// BenchmarkRunner_Throughput measures the engine's cost per target with a
// FetchFunc that returns at once: jobs of 32 targets, caps raised, on a
// directory store. One op is one target stored.
func BenchmarkRunner_Throughput(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			benchThroughput(b, workers)
		})
	}
}

func benchThroughput(b *testing.B, workers int) {
	store, err := persistence.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	const perJob = 32
	jobs := (b.N + perJob - 1) / perJob
	var stored atomic.Int64
	all := make(chan struct{})
	total := int64(b.N)
	result := engine.Result{Content: "ok"}
	r, err := engine.New(store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return result, nil
	}, engine.Config{
		Workers: workers, JobsTotal: jobs, JobsPerCaller: jobs, MaxBytes: 1 << 40,
		Hooks: engine.Hooks{Target: func(error, time.Duration, int) {
			if stored.Add(1) == total {
				close(all)
			}
		}},
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	c := &engine.Caller{Name: "bench"}
	batches := make([][]engine.Target, jobs)
	for j := range batches {
		n := min(perJob, b.N-j*perJob)
		batches[j] = make([]engine.Target, n)
		for i := range batches[j] {
			batches[j][i] = engine.Target{URL: fmt.Sprintf("https://example.com/%d/%d", j, i)}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for _, ts := range batches {
		if _, _, err := r.Submit(context.Background(), c, "", ts); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("stored %d of %d targets", stored.Load(), total)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "targets/s")
}
