package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/persistence"
)

// BenchmarkCluster_Submit: Runner.Submit of a one-target job on a node of
// a 3-node cluster (its caller's grain asked first, on whichever node owns
// it) vs on a single runner, alternating in one run. Each op submits new
// targets (no reuse) for one of 16 callers, under caps that never refuse.
//
//	go test -run '^$' -bench '^BenchmarkCluster_Submit$' -benchtime 200x -count 5 ./engine/cluster
func BenchmarkCluster_Submit(b *testing.B) {
	cfg := engine.Config{JobsPerCaller: 1 << 20, JobsTotal: 1 << 20, TargetsPerJob: 64}
	tc := clustertest.Start(b, clustertest.Options{Config: cfg}, "a", "b", "c")
	a := tc.Node("a")

	store, err := persistence.Open("")
	if err != nil {
		b.Fatal(err)
	}
	single, err := engine.New(store, clustertest.Fetch(tc.Hold), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		single.Close()
		_ = store.Close()
	})
	ctx := context.Background()
	submit := func(r *engine.Runner, i int) {
		c := &engine.Caller{Name: fmt.Sprintf("caller%d", i%16)}
		if _, _, err := r.Submit(ctx, c, "", []engine.Target{{URL: fmt.Sprintf("https://example.com/%d", i)}}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 32 { // every caller's grain activated, both runners warm
		submit(a.Runner, i)
		submit(single, i)
	}
	var inCluster, alone time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		submit(a.Runner, 1000+2*i)
		t1 := time.Now()
		submit(single, 1000+2*i+1)
		inCluster += t1.Sub(t0)
		alone += time.Since(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(inCluster.Nanoseconds())/float64(b.N), "ns/cluster-submit")
	b.ReportMetric(float64(alone.Nanoseconds())/float64(b.N), "ns/single-submit")
	b.ReportMetric(float64(inCluster)/float64(alone), "x-cluster/single")
}
