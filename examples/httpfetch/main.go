// Command httpfetch runs siftbatch with a real HTTP fetcher against a small
// server on 127.0.0.1: a page, a missing page, a page that is busy once, and
// a slow page, all in one job. It waits for the job and prints each target.
//
// The fetcher here is deliberately small; the siftbatch command's fetcher
// adds a deadline, a body cap and a guard against private addresses.
//
//	go run ./examples/httpfetch
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/sift/batch/engine"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpfetch:", err)
		os.Exit(1)
	}
}

func run() error {
	base, stop, err := serve()
	if err != nil {
		return err
	}
	defer stop()

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner, err := engine.Open("", fetcher(client), engine.Config{RetryWait: 200 * time.Millisecond}, log)
	if err != nil {
		return err
	}
	defer runner.Close()

	targets := []engine.Target{
		{URL: base + "/hello"},
		{URL: base + "/nowhere"},
		{URL: base + "/busy"},
		{URL: base + "/slow"},
	}
	id, _, err := runner.Submit(context.Background(), &engine.Caller{Name: "example"}, "standard", targets)
	if err != nil {
		return err
	}
	fmt.Println("job", id)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job, err := runner.Wait(ctx, id) // until the job ends: no polling
	if err != nil {
		return err
	}
	_, ts, _ := runner.Status(id)
	fmt.Printf("status %s, %d/%d targets stored, %d failed\n", job.Status, job.TargetsDone, job.TargetsTotal, job.TargetsFailed)
	for _, t := range ts {
		if t.Result != nil {
			fmt.Printf("  #%d %-32s %s: %q\n", t.Idx, t.URL, t.Status, t.Result.Content)
		} else {
			fmt.Printf("  #%d %-32s %s: %s (%s)\n", t.Idx, t.URL, t.Status, t.Error, t.Hint)
		}
	}
	return nil
}

// fetcher returns a FetchFunc that GETs the target: a 429 or 503 is busy
// (the runner tries again), another error status fails the target with a
// hint.
func fetcher(client *http.Client) engine.FetchFunc {
	return func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
		if err != nil {
			return engine.Result{}, &engine.TargetError{Status: 422, Msg: "bad url", Hint: "give an absolute http(s) URL"}
		}
		resp, err := client.Do(req)
		if err != nil {
			return engine.Result{}, &engine.TargetError{Status: 502, Msg: "connection failed", Hint: "try again later"}
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			return engine.Result{}, fmt.Errorf("HTTP %d: %w", resp.StatusCode, engine.ErrRetryLater)
		case resp.StatusCode >= 400:
			return engine.Result{}, &engine.TargetError{Status: resp.StatusCode, Msg: resp.Status, Hint: "check the URL"}
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return engine.Result{}, &engine.TargetError{Status: 502, Msg: "read failed", Hint: "try again later"}
		}
		return engine.Result{Content: string(body), Meta: map[string]any{"status": resp.StatusCode}}, nil
	}
}

// serve starts the example's server on a free loopback port.
func serve() (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var busy atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello from the example server")
	})
	mux.HandleFunc("GET /busy", func(w http.ResponseWriter, _ *http.Request) {
		if busy.Add(1) == 1 {
			http.Error(w, "busy", http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "not busy any more")
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "worth the wait")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}
