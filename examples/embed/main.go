// Command embed is the smallest complete program that embeds siftbatch, with
// one import: a runner on its own in-memory store (engine.Open), a simulated
// FetchFunc, three jobs from two callers, their progress as it changes, and
// a final table.
//
// The simulated fetch fails some targets, answers one "busy" twice (it
// returns an error wrapping engine.ErrRetryLater, so the runner tries it
// again), and panics on one: the runner stores that target failed with
// "internal error" and goes on.
//
//	go run ./examples/embed
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sift/batch/engine"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run() error {
	// Warnings only, and no stack traces: the panic below is on purpose.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "stack" {
				return slog.Attr{}
			}
			return a
		},
	}))
	// "" keeps the jobs in memory; a directory keeps them across restarts.
	runner, err := engine.Open("", simulate(), engine.Config{
		JobsPerCaller: 2,
		RetryWait:     100 * time.Millisecond,
	}, log)
	if err != nil {
		return err
	}
	defer runner.Close() // closes the runner's store too

	alice := &engine.Caller{Name: "alice"}
	bob := &engine.Caller{Name: "bob"}
	submissions := []struct {
		caller *engine.Caller
		urls   []string
	}{
		{alice, []string{"sim://ok/1", "sim://ok/2", "sim://missing/3", "sim://ok/4"}},
		{bob, []string{"sim://busy/1", "sim://ok/2", "sim://ok/3"}},
		{alice, []string{"sim://ok/1", "sim://panic/2", "sim://ok/3"}},
	}
	ctx := context.Background()
	ids := make([]string, len(submissions))
	for i, s := range submissions {
		targets := make([]engine.Target, len(s.urls))
		for j, u := range s.urls {
			targets[j] = engine.Target{URL: u}
		}
		id, _, err := runner.Submit(ctx, s.caller, "standard", targets)
		if err != nil {
			return fmt.Errorf("submit: %w", err)
		}
		ids[i] = id
		fmt.Printf("submitted job %d for %s: %d targets\n", i+1, s.caller.Name, len(targets))
	}

	// Wait for each job's end: Wait blocks until the job is terminal (or
	// ctx is done), without polling.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, id := range ids {
		job, err := runner.Wait(wctx, id)
		if err != nil {
			return fmt.Errorf("job %d: %w", i+1, err)
		}
		fmt.Printf("job %d (%s): %d/%d stored, %d failed: %s\n", i+1, job.Caller, job.TargetsDone, job.TargetsTotal, job.TargetsFailed, job.Status)
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCALLER\tSTATUS\tTARGET\tOUTCOME")
	for i, id := range ids {
		job, targets, _ := runner.Status(id)
		for _, t := range targets {
			outcome := t.Status
			switch {
			case t.Result != nil:
				outcome += ": " + t.Result.Content
			case t.Hint != "":
				outcome += ": " + t.Error + " (" + t.Hint + ")"
			case t.Error != "":
				outcome += ": " + t.Error
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, job.Caller, job.Status, t.URL, outcome)
		}
	}
	return tw.Flush()
}

// simulate returns a FetchFunc that stands in for real fetching: the URL's
// first path element says what happens.
func simulate() engine.FetchFunc {
	var mu sync.Mutex
	busy := map[string]int{} // busy URL → times answered busy
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		select { // some work
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
		kind := strings.SplitN(strings.TrimPrefix(t.URL, "sim://"), "/", 2)[0]
		switch kind {
		case "missing":
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "check the URL"}
		case "busy":
			mu.Lock()
			busy[t.URL]++
			n := busy[t.URL]
			mu.Unlock()
			if n <= 2 {
				return engine.Result{}, fmt.Errorf("simulated 429: %w", engine.ErrRetryLater)
			}
		case "panic":
			panic("simulated bug in the fetch")
		}
		return engine.Result{Content: "content of " + t.URL + " for " + c.Name}, nil
	}
}
