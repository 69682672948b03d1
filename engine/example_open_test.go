package engine_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sift/batch/engine"
)

// An embedder's program: one import, a runner on its own in-memory store
// (a directory keeps the jobs across restarts), a job, its results.
func ExampleOpen() {
	fetch := func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		return engine.Result{Content: "fetched " + t.URL}, nil
	}
	r, err := engine.Open("", fetch, engine.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close() // closes the store too

	ctx := context.Background()
	id, _, err := r.Submit(ctx, &engine.Caller{Name: "agent"}, "", []engine.Target{
		{URL: "https://example.com/a"}, {URL: "https://example.com/b"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	job, err := r.Wait(ctx, id)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.Status, job.TargetsDone, "of", job.TargetsTotal)
	_, targets, _ := r.Status(id)
	for _, t := range targets {
		fmt.Println(t.Idx, t.Status, t.Result.Content)
	}
	// Output:
	// done 2 of 2
	// 0 done fetched https://example.com/a
	// 1 done fetched https://example.com/b
}
