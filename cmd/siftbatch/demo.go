package main

import (
	"context"
	"io"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/demo"
	"github.com/sift/batch/engine"
)

// runDemo is the demo command: its flags, then [demo.Run].
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("demo", "demo [flags]",
		"Run jobs from several callers against a fixture HTTP server on 127.0.0.1, with a\nlive progress bar per job, then print a summary. Nothing to set up; the store\nlives in a temporary directory that is removed at the end. Ctrl-C stops it\ncleanly (exit 0).")
	var o demo.Options
	fs.IntVar(&o.Jobs, "jobs", 4, "number of jobs (1 to 32)")
	fs.IntVar(&o.Targets, "targets", 6, "targets per job (1 to 100)")
	fs.IntVar(&o.Workers, "workers", 2, "runner workers (1 or 2)")
	fs.StringVar(&o.Data, "data", "", "keep the store in this directory instead of a temporary one")
	fs.BoolVar(&o.UI, "ui", false, "serve the dashboard on a free loopback port while the demo runs (its URL and an admin key for\nthis run are printed), and keep serving after the jobs end until Ctrl-C")
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return err
	}
	switch {
	case o.Jobs < 1 || o.Jobs > demo.MaxJobs:
		return cli.CmdUsagef("demo", "--jobs must be 1 to %d (got %d)", demo.MaxJobs, o.Jobs)
	case o.Targets < 1 || o.Targets > demo.MaxTargets:
		return cli.CmdUsagef("demo", "--targets must be 1 to %d (got %d)", demo.MaxTargets, o.Targets)
	case o.Workers < 1 || o.Workers > engine.MaxWorkers:
		return cli.CmdUsagef("demo", "--workers must be 1 or %d (got %d)", engine.MaxWorkers, o.Workers)
	}
	return demo.Run(ctx, o, stdout, stderr)
}
