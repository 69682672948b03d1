package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/metrics"
)

// uiAdmin is the name the demo's admin key signs in as.
const uiAdmin = "admin"

// uiStopWait bounds the dashboard server's graceful stop.
const uiStopWait = 3 * time.Second

// ui is the dashboard the demo serves with --ui, on a loopback port of
// its own, signed into with a key made for the run.
type ui struct {
	url  string
	key  string
	dash *dashboard.Handler
	srv  *http.Server
	done chan error
}

// uiMetrics are the runner's metrics, for the dashboard's charts: Hooks
// go into the runner's Config, Attach once it runs.
func uiMetrics() (*metrics.Metrics, *prometheus.Registry) {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	return m, reg
}

// startUI serves the dashboard of runner on 127.0.0.1 at a free port,
// with one key, made at random for this run, of class admin. The key is
// returned to be printed to stdout: it is never logged.
func startUI(runner *engine.Runner, cfg engine.Config, reg prometheus.Gatherer, log *slog.Logger) (*ui, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("make the dashboard's key: %w", err)
	}
	key := "demo-" + hex.EncodeToString(raw)
	keys, err := httpapi.ReadKeys(strings.NewReader(uiAdmin + " " + key + " " + httpapi.ClassAdmin + "\n"))
	if err != nil {
		return nil, fmt.Errorf("dashboard keys: %w", err)
	}
	dash, err := dashboard.New(runner, keys, dashboard.Options{Config: cfg, Gatherer: reg, Log: log})
	if err != nil {
		return nil, fmt.Errorf("start the dashboard: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		dash.Close()
		return nil, fmt.Errorf("listen for the dashboard: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dash)
	mux.Handle("/{$}", http.RedirectHandler(dashboard.Prefix, http.StatusSeeOther))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	srv.RegisterOnShutdown(dash.Close) // the event streams end at once
	u := &ui{url: "http://" + ln.Addr().String() + dashboard.Prefix, key: key, dash: dash, srv: srv, done: make(chan error, 1)}
	go func() { u.done <- srv.Serve(ln) }()
	return u, nil
}

// announce prints where the dashboard is and the key to sign in with.
func (u *ui) announce(w io.Writer) {
	fmt.Fprintf(w, "Dashboard: %s\nSign in with the admin key of this run: %s\n(the key is made anew each run and printed only here)\n\n", u.url, u.key)
}

// wait keeps serving until ctx is cancelled (Ctrl-C) or the server fails.
func (u *ui) wait(ctx context.Context, w io.Writer) error {
	fmt.Fprintf(w, "\nThe dashboard keeps serving at %s: press Ctrl-C to stop.\n", u.url)
	select {
	case <-ctx.Done():
		return nil
	case err := <-u.done:
		return fmt.Errorf("dashboard server: %w", err)
	}
}

// stop stops the server (its event streams first) and the dashboard.
func (u *ui) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), uiStopWait)
	defer cancel()
	err := u.srv.Shutdown(ctx)
	u.dash.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		err = u.srv.Close()
	}
	if err != nil {
		return fmt.Errorf("stop the dashboard: %w", err)
	}
	return nil
}
