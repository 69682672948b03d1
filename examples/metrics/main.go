// Command metrics wires siftbatch's Hooks to Prometheus counters, gauges
// and histograms, runs two jobs with a simulated fetch, and prints what a
// scrape of the registry would show.
//
//	go run ./examples/metrics
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// hooks registers the metrics on reg and returns the Hooks that feed them.
func hooks(reg prometheus.Registerer) engine.Hooks {
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siftbatch_jobs_total", Help: "Jobs by outcome.",
	}, []string{"outcome"})
	targets := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "siftbatch_targets_total", Help: "Stored targets by result.",
	}, []string{"result"})
	targetSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "siftbatch_target_seconds", Help: "Time to fetch and store one target.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5},
	})
	jobSeconds := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "siftbatch_job_seconds", Help: "Time from submit to a terminal status.",
		Buckets: []float64{0.1, 0.5, 1, 5, 30},
	})
	live := prometheus.NewGauge(prometheus.GaugeOpts{Name: "siftbatch_live_jobs", Help: "Jobs queued or running."})
	inflight := prometheus.NewGauge(prometheus.GaugeOpts{Name: "siftbatch_inflight_targets", Help: "Targets being fetched."})
	reg.MustRegister(jobs, targets, targetSeconds, jobSeconds, live, inflight)

	return engine.Hooks{
		Job: func(outcome string) { jobs.WithLabelValues(outcome).Inc() },
		Target: func(err error, d time.Duration, _ int) {
			result := "done"
			if err != nil {
				result = "failed"
			}
			targets.WithLabelValues(result).Inc()
			targetSeconds.Observe(d.Seconds())
		},
		JobSeconds: func(d time.Duration) { jobSeconds.Observe(d.Seconds()) },
		Depth:      func(n int) { live.Set(float64(n)) },
		Inflight:   func(n int) { inflight.Set(float64(n)) },
	}
}

func run() error {
	reg := prometheus.NewRegistry()
	store, err := persistence.Open("")
	if err != nil {
		return err
	}
	defer store.Close()
	fetch := func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
		if strings.HasSuffix(t.URL, "/fail") {
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "check the URL"}
		}
		return engine.Result{Content: "ok"}, nil
	}
	runner, err := engine.New(store, fetch, engine.Config{Hooks: hooks(reg), JobsPerCaller: 2}, nil)
	if err != nil {
		return err
	}
	defer runner.Close()

	caller := &engine.Caller{Name: "example"}
	var ids []string
	for _, urls := range [][]string{
		{"sim://a/ok", "sim://a/ok2", "sim://a/fail"},
		{"sim://b/ok", "sim://b/ok2"},
	} {
		ts := make([]engine.Target, len(urls))
		for i, u := range urls {
			ts[i] = engine.Target{URL: u}
		}
		id, _, err := runner.Submit(context.Background(), caller, "standard", ts)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := wait(runner, ids, 10*time.Second); err != nil {
		return err
	}

	// Scrape the registry the way Prometheus would.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "siftbatch_") && !strings.Contains(line, "_bucket") {
			fmt.Println(line)
		}
	}
	return nil
}

// wait polls the jobs until none is queued or running.
func wait(r *engine.Runner, ids []string, limit time.Duration) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(limit)
	for {
		live := 0
		for _, id := range ids {
			job, _, ok := r.Status(id)
			if !ok {
				return errors.New("job vanished")
			}
			if job.Status == "queued" || job.Status == "running" {
				live++
			}
		}
		if live == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-timeout:
			return fmt.Errorf("jobs still running after %s", limit)
		}
	}
}
