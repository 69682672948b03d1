// Package demo is siftbatch demo: jobs from several callers run against the
// fixture server on a runner with a temporary store, shown live (progress
// bars on a terminal, a line per change otherwise), then a summary.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/bars"
	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/fixture"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
)

const (
	// deadline bounds a demo whose jobs do not finish: it then fails
	// rather than hang.
	deadline = 2 * time.Minute
	// pollEvery is how often the demo reads each job's status.
	pollEvery = 100 * time.Millisecond
	// retryWait is the runner's pause before a busy page is tried again.
	retryWait = 250 * time.Millisecond
)

// The bounds of [Options], which the command's flags check.
const (
	MaxJobs    = 32
	MaxTargets = 100
)

// callers submit the demo's jobs, in turn.
var callers = []string{"alice", "bob", "carol"}

// Options are the demo's: Jobs (1 to MaxJobs) of Targets each (1 to
// MaxTargets) on a runner of Workers; the store in Data, or in a temporary
// directory removed at the end when Data is "". With UI, the dashboard is
// served on a free loopback port while the demo runs, its URL and an
// admin key made for the run printed to stdout (never to the log), and it
// keeps serving after the jobs end until ctx is cancelled (Ctrl-C): Run
// then returns nil.
type Options struct {
	Jobs, Targets, Workers int
	Data                   string
	UI                     bool
}

// job is one of the demo's jobs as the demo follows it.
type job struct {
	id        string
	caller    string
	label     string
	kinds     []string // the kind of page of each target
	submitted time.Time
	finished  time.Time
	job       engine.Job
	targets   []engine.TargetStatus
}

func (d *job) terminal() bool { return d.job.ID != "" && !engine.IsLive(d.job.Status) }

// Run runs the demo, printing its progress and summary to stdout and its
// log (warnings and errors) to stderr. Interrupted (ctx cancelled), it
// stops the runner, removes its temporary store and returns ctx's error.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) (err error) {
	dir := o.Data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "siftbatch-demo-"); err != nil {
			return fmt.Errorf("make store directory: %w", err)
		}
		defer func() {
			if rerr := os.RemoveAll(dir); rerr != nil && (err == nil || errors.Is(err, context.Canceled)) {
				err = fmt.Errorf("remove the temporary store: %w", rerr)
			}
		}()
	}
	showBars, height := bars.Fit(stdout)
	// With live bars, log lines wait below until the bars are done.
	var logBuf syncBuffer
	logOut := stderr
	if showBars {
		logOut = &logBuf
		defer func() { _, _ = io.Copy(stderr, &logBuf) }()
	}
	// The panic page's panics are the demo's own: they are counted and
	// told in the summary, not logged as errors among the bars.
	var panics deliberate
	log := slog.New(&quietLog{Handler: slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropStack}), panics: &panics})

	store, err := cli.OpenStore(dir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && (err == nil || errors.Is(err, context.Canceled)) {
			err = fmt.Errorf("close the store: %w", cerr)
		}
	}()
	store.SetLogger(log)
	fix, err := fixture.Start()
	if err != nil {
		return err
	}
	defer fix.Close()
	fetch, err := fetcher.New(fetcher.Options{
		AllowPrivate: true, // the fixture is on 127.0.0.1
		Timeout:      10 * time.Second,
		Wrap:         func(next http.RoundTripper) http.RoundTripper { return fixture.PanicOnHeader(next, &panics.count) },
	})
	if err != nil {
		return err
	}
	defer fetch.Close()
	cfg := engine.Config{
		TargetsPerJob: max(o.Targets, engine.DefaultTargetsPerJob),
		JobsPerCaller: (o.Jobs + len(callers) - 1) / len(callers),
		JobsTotal:     o.Jobs,
		Workers:       o.Workers,
		RetryWait:     retryWait,
		RetryFor:      time.Minute,
	}
	m, reg := uiMetrics()
	if o.UI {
		cfg.Hooks = m.Hooks() // the dashboard's charts
	}
	runner, err := engine.New(store, fetch.Fetch, cfg, log)
	if err != nil {
		return fmt.Errorf("start runner: %w", err)
	}
	defer runner.Close()
	var dash *ui
	if o.UI {
		m.Attach(runner)
		if dash, err = startUI(runner, cfg, reg, log); err != nil {
			return err
		}
		defer func() {
			if serr := dash.stop(); serr != nil && err == nil {
				err = serr
			}
		}()
	}

	where := "a temporary directory"
	if o.Data != "" {
		where = o.Data
	}
	nCallers := min(o.Jobs, len(callers))
	fmt.Fprintf(stdout, "siftbatch demo: %d %s × %d %s from %d %s, %d %s; fixture server on %s; store in %s\n\n",
		o.Jobs, cli.Plural(o.Jobs, "job", "jobs"), o.Targets, cli.Plural(o.Targets, "target", "targets"),
		nCallers, cli.Plural(nCallers, "caller", "callers"), o.Workers, cli.Plural(o.Workers, "worker", "workers"), fix.Base(), where)
	if dash != nil {
		dash.announce(stdout)
	}

	js, err := submit(ctx, runner, fix, o)
	if err != nil {
		return err
	}
	var view progressView
	if showBars {
		bj := make([]bars.Job, len(js))
		for i, d := range js {
			bj[i] = bars.Job{Label: d.label, Total: len(d.kinds)}
		}
		view = &barsView{bars.NewJobs(stdout, bj, height, engine.StatusQueued)}
	} else {
		view = &linesView{w: stdout, start: time.Now(), last: make([]string, len(js))}
	}
	err = follow(ctx, runner, js, view)
	view.finish(err != nil)
	if err != nil {
		return err
	}
	printSummary(stdout, js, panics.count.Load())
	switch {
	case o.Data == "" && o.UI:
		fmt.Fprintln(stdout, "\nThe temporary store is removed when the demo stops. Keep it with --data DIR, then list it with: siftbatch jobs --data DIR")
	case o.Data == "":
		fmt.Fprintln(stdout, "\nThe temporary store is removed. Keep it with --data DIR, then list it with: siftbatch jobs --data DIR")
	default:
		fmt.Fprintf(stdout, "\nThe store is kept in %s; list it with: siftbatch jobs --data %s\n", o.Data, o.Data)
	}
	fmt.Fprintln(stdout, "(make install, or go install ./cmd/siftbatch, puts siftbatch on your PATH; or use go run ./cmd/siftbatch)")
	if dash != nil {
		return dash.wait(ctx, stdout)
	}
	return nil
}

// submit submits the demo's jobs, round-robin over the callers, each
// meeting the kinds of page in its own order.
func submit(ctx context.Context, runner *engine.Runner, fix *fixture.Server, o Options) ([]*job, error) {
	js := make([]*job, o.Jobs)
	for j := range js {
		d := &job{caller: callers[j%len(callers)], kinds: make([]string, o.Targets)}
		d.label = fmt.Sprintf("job%d %s", j+1, d.caller)
		ts := make([]engine.Target, o.Targets)
		for i := range ts {
			d.kinds[i] = fixture.Pattern[(3*j+i)%len(fixture.Pattern)]
			ts[i] = engine.Target{URL: fix.URL(d.kinds[i], j, i)}
		}
		d.submitted = time.Now()
		id, _, err := runner.Submit(ctx, &engine.Caller{Name: d.caller}, httpapi.ClassStandard, ts)
		if err != nil {
			return nil, fmt.Errorf("submit %s: %w", d.label, err)
		}
		d.id = id
		js[j] = d
	}
	return js, nil
}

// dropStack drops the stack trace the runner logs with a panic: the demo's
// panic is on purpose.
func dropStack(_ []string, a slog.Attr) slog.Attr {
	if a.Key == "stack" {
		return slog.Attr{}
	}
	return a
}

// follow polls every job's status into js and the view until all are
// terminal, ctx is cancelled, or the deadline passes.
func follow(ctx context.Context, runner *engine.Runner, js []*job, view progressView) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	limit := time.NewTimer(deadline)
	defer limit.Stop()
	for {
		left := 0
		for i, d := range js {
			if d.terminal() {
				continue
			}
			j, targets, ok := runner.Status(d.id)
			if !ok {
				return fmt.Errorf("%s: job %s not found", d.label, d.id)
			}
			d.job, d.targets = j, targets
			if d.terminal() {
				d.finished = time.Now()
			} else {
				left++
			}
			view.update(i, d)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit.C:
			return fmt.Errorf("demo: jobs still running after %s", deadline)
		case <-tick.C:
		}
	}
}

// running describes the target being fetched, if any.
func running(d *job) string {
	for _, t := range d.targets {
		if t.Status == engine.TargetRunning {
			return fmt.Sprintf("fetching #%d %s", t.Idx, d.kinds[t.Idx])
		}
	}
	return ""
}

// firstBytes returns at most n bytes of s, cut at a rune boundary.
func firstBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// short is a job's short label, "job3".
func (d *job) short() string { return strings.Fields(d.label)[0] }
