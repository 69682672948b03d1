// Command metrics feeds siftbatch's Prometheus metrics (package
// engine/metrics) from a runner, next to a hook of its own joined with
// metrics.Join, counts an HTTP route with the metrics' middleware, runs two
// jobs with a simulated fetch, and prints what a scrape of the registry
// shows.
//
//	go run ./examples/metrics
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/metrics"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	// The metrics, on the program's registry.
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

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
	// The program's own hook, beside the metrics'.
	var ended atomic.Int64
	mine := engine.Hooks{JobSeconds: func(time.Duration) { ended.Add(1) }}
	runner, err := engine.Open("", fetch, engine.Config{Hooks: metrics.Join(m.Hooks(), mine), JobsPerCaller: 2}, nil)
	if err != nil {
		return err
	}
	defer runner.Close()
	m.Attach(runner) // siftbatch_hook_panics_total reads the runner's count

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
		id, _, err := runner.Submit(context.Background(), caller, "", ts)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if _, err := runner.Wait(ctx, id); err != nil {
			return err
		}
	}
	runner.Close() // every hook has run once Close returns
	fmt.Fprintln(out, "jobs ended, by the program's own hook:", ended.Load())

	// A route of the program's, counted under a fixed label, and the
	// registry, scraped the way Prometheus would.
	mux := http.NewServeMux()
	mux.Handle("GET /hello/{name}", m.Middleware("GET /hello/{name}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for _, path := range []string{"/hello/ann", "/hello/bob", "/metrics"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if path != "/metrics" {
			continue
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "siftbatch_") && !strings.Contains(line, "_bucket") {
				fmt.Fprintln(out, line)
			}
		}
	}
	return nil
}
