package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/fixture"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
)

// BenchmarkFetch_FixturePages measures one fetch of each kind of the demo's
// fixture page through serve's fetcher (a real HTTP GET on loopback), as
// the runner times it, and reports the median and the slowest: the
// figures the target-time histogram's buckets were chosen from
// (docs/observability/README.md, "Histogram buckets"). A page answered
// at once (404, 500, the 429 of a busy page) takes the fetcher's own
// time; fast and slow pages add the fixture's delays (120 and 900 ms);
// "fast+grep" runs a grep filter in a filter process.
//
//	go test -run '^$' -bench '^BenchmarkFetch_FixturePages$' -benchtime 20x ./cmd/siftbatch
func BenchmarkFetch_FixturePages(b *testing.B) {
	site, err := fixture.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer site.Close()
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true, FilterProcs: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	caller := &engine.Caller{Name: "bench"}
	for _, c := range []struct {
		name, kind string
		o          engine.Options
	}{
		{"missing", fixture.Missing, engine.Options{}},
		{"broken", fixture.Broken, engine.Options{}},
		{"busy429", fixture.Busy, engine.Options{}},
		{"fast", fixture.Fast, engine.Options{}},
		{"fast+grep", fixture.Fast, engine.Options{Grep: "Lorem"}},
		{"slow", fixture.Slow, engine.Options{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				// A busy page answers 429 its first BusyTimes times: a new
				// name each time measures that answer.
				t := engine.Target{URL: site.URL(c.kind, 1000+i, i), Options: c.o}
				start := time.Now()
				_, _ = f.Fetch(context.Background(), caller, t)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
}
