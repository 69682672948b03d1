package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// ExampleRunner_Submit runs one job to the end and prints its targets.
func ExampleRunner_Submit() {
	store, err := persistence.Open("")
	if err != nil {
		panic(err)
	}
	defer store.Close()

	done := make(chan string, 1)
	fetch := func(_ context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		if strings.HasSuffix(t.URL, "/missing") {
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "check the address"}
		}
		return engine.Result{Content: "hello from " + t.URL, Meta: map[string]any{"for": c.Name}}, nil
	}
	r, err := engine.New(store, fetch, engine.Config{Hooks: engine.Hooks{Job: func(o string) {
		if o != "created" {
			done <- o
		}
	}}}, nil)
	if err != nil {
		panic(err)
	}
	defer r.Close()

	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "agent"}, "", []engine.Target{
		{URL: "https://example.com/a"},
		{URL: "https://example.com/missing"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("job ended:", <-done)
	job, targets, _ := r.Status(id)
	fmt.Println(job.Status, job.TargetsDone, "of", job.TargetsTotal)
	for _, t := range targets {
		if t.Result != nil {
			fmt.Println(t.Idx, t.Status, t.Result.Content, t.Result.Meta["for"])
		} else {
			fmt.Println(t.Idx, t.Status, t.Error, "/", t.Hint)
		}
	}
	// Output:
	// job ended: partial
	// partial 2 of 2
	// 0 done hello from https://example.com/a agent
	// 1 failed not found / check the address
}

// ExampleRunner_Submit_errors shows the errors Submit returns.
func ExampleRunner_Submit_errors() {
	store, _ := persistence.Open("")
	defer store.Close()
	block := make(chan struct{})
	r, _ := engine.New(store, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return engine.Result{}, nil
	}, engine.Config{TargetsPerJob: 2}, nil)
	defer r.Close()
	defer close(block)

	c := &engine.Caller{Name: "agent"}
	one := []engine.Target{{URL: "https://example.com/1"}}
	_, _, err := r.Submit(context.Background(), c, "", nil)
	fmt.Println(errors.Is(err, engine.ErrNoTargets), err)
	_, _, err = r.Submit(context.Background(), c, "", []engine.Target{{URL: ""}})
	fmt.Println(errors.Is(err, engine.ErrInvalid), err)
	_, _, err = r.Submit(context.Background(), c, "", append(one, one[0], one[0]))
	fmt.Println(errors.Is(err, engine.ErrTooManyTargets), err)
	id, _, _ := r.Submit(context.Background(), c, "", one)
	again, reused, _ := r.Submit(context.Background(), c, "", one)
	fmt.Println("same job:", again == id, reused)
	_, _, err = r.Submit(context.Background(), c, "", []engine.Target{{URL: "https://example.com/2"}})
	fmt.Println(errors.Is(err, engine.ErrCallerBusy), err)
	// Output:
	// true no targets
	// true invalid submission: target 0 has an empty URL
	// true too many targets
	// same job: true true
	// true busy
}
