package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
)

const (
	// demoDeadline bounds a demo whose jobs do not finish: it then fails
	// rather than hang.
	demoDeadline = 2 * time.Minute
	// demoPoll is how often the demo reads each job's status.
	demoPoll = 100 * time.Millisecond
	// demoRetryWait is the runner's pause before a busy page is tried again.
	demoRetryWait = 250 * time.Millisecond
)

// demoCallers submit the demo's jobs, in turn.
var demoCallers = []string{"alice", "bob", "carol"}

// demoJob is one of the demo's jobs as the demo follows it.
type demoJob struct {
	id        string
	caller    string
	label     string
	kinds     []string // the kind of page of each target
	submitted time.Time
	finished  time.Time
	job       engine.Job
	targets   []engine.TargetStatus
}

func (d *demoJob) terminal() bool { return d.job.ID != "" && !engine.IsLive(d.job.Status) }

// runDemo is the demo command.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "demo [flags]",
		"Run jobs from several callers against a fixture HTTP server on 127.0.0.1, with a\nlive progress bar per job, then print a summary. Nothing to set up; the store\nlives in a temporary directory that is removed at the end.")
	jobs := fs.Int("jobs", 4, "number of jobs (1 to 32)")
	targets := fs.Int("targets", 6, "targets per job (1 to 100)")
	workers := fs.Int("workers", 2, "runner workers (1 or 2)")
	data := fs.String("data", "", "keep the store in this directory instead of a temporary one")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	switch {
	case *jobs < 1 || *jobs > 32:
		return cmdUsageErrorf("demo", "--jobs must be 1 to 32 (got %d)", *jobs)
	case *targets < 1 || *targets > 100:
		return cmdUsageErrorf("demo", "--targets must be 1 to 100 (got %d)", *targets)
	case *workers < 1 || *workers > engine.MaxWorkers:
		return cmdUsageErrorf("demo", "--workers must be 1 or %d (got %d)", engine.MaxWorkers, *workers)
	}
	return demo(ctx, demoOptions{jobs: *jobs, targets: *targets, workers: *workers, data: *data}, stdout, stderr)
}

type demoOptions struct {
	jobs, targets, workers int
	data                   string
}

func demo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) (err error) {
	dir := o.data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "siftbatch-demo-"); err != nil {
			return fmt.Errorf("make store directory: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	bars, height := barsFit(stdout)
	// With live bars, log lines wait below until the bars are done.
	var logBuf syncBuffer
	logOut := stderr
	if bars {
		logOut = &logBuf
		defer func() { _, _ = io.Copy(stderr, &logBuf) }()
	}
	// The panic page's panics are the demo's own: they are counted and
	// told in the summary, not logged as errors among the bars.
	var panics deliberate
	log := slog.New(&demoLog{Handler: slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropStack}), panics: &panics})

	store, err := openStore(dir)
	if err != nil {
		return err
	}
	defer store.Close()
	store.SetLogger(log)
	fix, err := startFixture()
	if err != nil {
		return err
	}
	defer fix.close()
	fetch, err := fetcher.New(fetcher.Options{
		AllowPrivate: true, // the fixture is on 127.0.0.1
		Timeout:      10 * time.Second,
		Wrap:         func(next http.RoundTripper) http.RoundTripper { return panicOnDemoHeader(next, &panics) },
	})
	if err != nil {
		return err
	}
	defer fetch.Close()
	runner, err := engine.New(store, fetch.Fetch, engine.Config{
		TargetsPerJob: max(o.targets, engine.DefaultTargetsPerJob),
		JobsPerCaller: (o.jobs + len(demoCallers) - 1) / len(demoCallers),
		JobsTotal:     o.jobs,
		Workers:       o.workers,
		RetryWait:     demoRetryWait,
		RetryFor:      time.Minute,
	}, log)
	if err != nil {
		return fmt.Errorf("start runner: %w", err)
	}
	defer runner.Close()

	where := "a temporary directory"
	if o.data != "" {
		where = o.data
	}
	callers := min(o.jobs, len(demoCallers))
	fmt.Fprintf(stdout, "siftbatch demo: %d %s × %d %s from %d %s, %d %s; fixture server on %s; store in %s\n\n",
		o.jobs, plural(o.jobs, "job", "jobs"), o.targets, plural(o.targets, "target", "targets"),
		callers, plural(callers, "caller", "callers"), o.workers, plural(o.workers, "worker", "workers"), fix.base, where)

	js := make([]*demoJob, o.jobs)
	for j := range js {
		d := &demoJob{caller: demoCallers[j%len(demoCallers)], kinds: make([]string, o.targets)}
		d.label = fmt.Sprintf("job%d %s", j+1, d.caller)
		ts := make([]engine.Target, o.targets)
		for i := range ts {
			d.kinds[i] = demoPattern[(3*j+i)%len(demoPattern)]
			ts[i] = engine.Target{URL: fix.url(d.kinds[i], j, i)}
		}
		d.submitted = time.Now()
		id, _, err := runner.Submit(ctx, &engine.Caller{Name: d.caller}, httpapi.ClassStandard, ts)
		if err != nil {
			return fmt.Errorf("submit %s: %w", d.label, err)
		}
		d.id = id
		js[j] = d
	}

	var view progressView
	if bars {
		view = newBarsView(stdout, js, height)
	} else {
		view = &linesView{w: stdout, start: time.Now(), last: make([]string, len(js))}
	}
	err = follow(ctx, runner, js, view)
	view.finish(err != nil)
	if err != nil {
		return err
	}
	printSummary(stdout, js, panics.count.Load())
	if o.data == "" {
		fmt.Fprintln(stdout, "\nThe temporary store is removed. Keep it with --data DIR, then list it with: siftbatch jobs --data DIR")
		fmt.Fprintln(stdout, "(make install, or go install ./cmd/siftbatch, puts siftbatch on your PATH; or use go run ./cmd/siftbatch)")
	} else {
		fmt.Fprintf(stdout, "\nThe store is kept in %s; list it with: siftbatch jobs --data %s\n", o.data, o.data)
		fmt.Fprintln(stdout, "(make install, or go install ./cmd/siftbatch, puts siftbatch on your PATH; or use go run ./cmd/siftbatch)")
	}
	return nil
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
// terminal, ctx is cancelled, or demoDeadline passes.
func follow(ctx context.Context, runner *engine.Runner, js []*demoJob, view progressView) error {
	tick := time.NewTicker(demoPoll)
	defer tick.Stop()
	deadline := time.NewTimer(demoDeadline)
	defer deadline.Stop()
	for {
		left := 0
		for i, d := range js {
			if d.terminal() {
				continue
			}
			job, targets, ok := runner.Status(d.id)
			if !ok {
				return fmt.Errorf("%s: job %s not found", d.label, d.id)
			}
			d.job, d.targets = job, targets
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
		case <-deadline.C:
			return fmt.Errorf("demo: jobs still running after %s", demoDeadline)
		case <-tick.C:
		}
	}
}

// progressView shows the jobs' progress as it changes.
type progressView interface {
	update(i int, d *demoJob)
	finish(interrupted bool)
}

// running describes the target being fetched, if any.
func running(d *demoJob) string {
	for _, t := range d.targets {
		if t.Status == engine.TargetRunning {
			return fmt.Sprintf("fetching #%d %s", t.Idx, d.kinds[t.Idx])
		}
	}
	return ""
}

// linesView prints a line whenever a job changes: for logs and pipes.
type linesView struct {
	w     io.Writer
	start time.Time
	last  []string
}

func (v *linesView) update(i int, d *demoJob) {
	line := fmt.Sprintf("%-12s %2d/%-2d %-9s %s", d.label, d.job.TargetsDone, d.job.TargetsTotal, d.job.Status, running(d))
	if line == v.last[i] {
		return
	}
	v.last[i] = line
	fmt.Fprintf(v.w, "%5.1fs  %s\n", time.Since(v.start).Seconds(), strings.TrimRight(line, " "))
}

func (v *linesView) finish(bool) { fmt.Fprintln(v.w) }

// printSummary prints the table of jobs, the first bytes of a few results
// and every failure, each of them the fixture's doing; panics is how many
// fetches the panic page made panic.
func printSummary(w io.Writer, js []*demoJob, panics int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCALLER\tSTATUS\tDONE/TOTAL\tFAILED\tSECONDS\tID")
	for _, d := range js {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%.1f\t%s\n", strings.Fields(d.label)[0], d.caller, d.job.Status,
			d.job.TargetsDone, d.job.TargetsTotal, d.job.TargetsFailed, d.finished.Sub(d.submitted).Seconds(), d.id)
	}
	_ = tw.Flush()

	// One result of each kind of page that has one: fast, slow, and busy
	// (answered 429 twice, then fetched).
	fmt.Fprintln(w, "\nFirst bytes of a few results:")
	shown := map[string]bool{}
	for _, d := range js {
		for _, t := range d.targets {
			kind := d.kinds[t.Idx]
			if t.Result == nil || shown[kind] {
				continue
			}
			shown[kind] = true
			fmt.Fprintf(w, "  %s #%d %-5s %q\n", strings.Fields(d.label)[0], t.Idx, kind, firstBytes(t.Result.Content, 60))
		}
	}
	fmt.Fprintln(w, "\nFailed targets, each on purpose (the fixture serves pages that are missing, broken, or make the fetch panic):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, d := range js {
		for _, t := range d.targets {
			if t.Status != engine.TargetFailed {
				continue
			}
			hint := ""
			if t.Hint != "" {
				hint = " (" + t.Hint + ")"
			}
			fmt.Fprintf(tw, "  %s #%d\t%s\t%s%s\n", strings.Fields(d.label)[0], t.Idx, d.kinds[t.Idx], t.Error, hint)
		}
	}
	_ = tw.Flush()
	if panics > 0 {
		fmt.Fprintf(w, "\nThe panic page made %d %s panic on purpose: the runner stored %s failed (\"internal error\") and went on.\n",
			panics, plural(int(panics), "fetch", "fetches"), plural(int(panics), "that target", "those targets"))
	}
}

// plural returns one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Read(p)
}

// String returns what was written and not yet read.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
