package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/metrics"
)

// ExampleNew feeds the metrics from a runner, next to the embedder's own
// hook, and prints the job series of a scrape.
func ExampleNew() {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: "page"}, nil
	}
	mine := engine.Hooks{JobSeconds: func(time.Duration) { fmt.Println("a job ended") }}
	r, err := engine.Open("", fetch, engine.Config{Hooks: metrics.Join(m.Hooks(), mine)}, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	m.Attach(r)
	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "agent"}, "", []engine.Target{{URL: "https://example.com/"}})
	if err != nil {
		panic(err)
	}
	if _, err := r.Wait(context.Background(), id); err != nil {
		panic(err)
	}
	r.Close() // every hook has run once Close returns

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var text strings.Builder
	for _, f := range families {
		if f.GetName() == "siftbatch_jobs_total" {
			_, _ = expfmt.MetricFamilyToText(&text, f)
		}
	}
	for _, line := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(line, "siftbatch_") {
			fmt.Println(line)
		}
	}
	// Output:
	// a job ended
	// siftbatch_jobs_total{outcome="cancelled"} 0
	// siftbatch_jobs_total{outcome="created"} 1
	// siftbatch_jobs_total{outcome="done"} 1
	// siftbatch_jobs_total{outcome="failed"} 0
	// siftbatch_jobs_total{outcome="partial"} 0
	// siftbatch_jobs_total{outcome="reused"} 0
}
