package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// statusFilters are the values of jobs --status, as the API's ?status=
// takes them: a job status, or live (queued or running) or terminal (the
// others).
var statusFilters = map[string]func(string) bool{
	"live":     engine.IsLive,
	"terminal": func(s string) bool { return !engine.IsLive(s) },
}

func init() {
	for _, st := range []string{engine.StatusQueued, engine.StatusRunning, engine.StatusDone, engine.StatusPartial, engine.StatusFailed, engine.StatusCancelled} {
		statusFilters[st] = func(s string) bool { return s == st }
	}
}

// runJobs is the jobs command: a table of the jobs stored in a directory.
func runJobs(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("jobs", "jobs [--data DIR] [--status S] [--caller NAME]",
		"List the jobs stored in a store directory, newest first (as the API lists\nthem). DONE/TOTAL counts the targets with a stored outcome, done or failed;\nFAILED the failed ones; NOT RUN those a job that ended (cancelled, or failed by\na restart or a shutdown) left pending, which will never run. LAST ACTIVE is a job's last stored target or read: it\nstays readable for the --ttl of the serve that stored it (24h by default)\nafter that. The store must not be in use by a running serve.")
	data := fs.String("data", cli.DefaultDataDir, "store directory")
	status := fs.String("status", "", "only the jobs with this status: queued, running, done, partial, failed, cancelled,\nor live (queued or running) or terminal (the others)")
	caller := fs.String("caller", "", "only the jobs of the caller with this name")
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return err
	}
	match := func(string) bool { return true }
	if *status != "" {
		var ok bool
		if match, ok = statusFilters[*status]; !ok {
			return cli.CmdUsagef("jobs", "--status %q is none of live, queued, running, done, partial, failed, cancelled, terminal", *status)
		}
	}
	store, err := cli.OpenForInspection(*data)
	if err != nil {
		return err
	}
	defer store.Close()
	var jobs []persistence.JobRecord
	if err := store.Jobs(func(j persistence.JobRecord) bool {
		if match(j.Status) && (*caller == "" || j.Caller == *caller) {
			jobs = append(jobs, j)
		}
		return true
	}); err != nil {
		return err
	}
	if len(jobs) == 0 {
		if *status != "" || *caller != "" {
			fmt.Fprintf(stdout, "no jobs in %s that match\n", *data)
			return nil
		}
		fmt.Fprintf(stdout, "no jobs in %s\n", *data)
		return nil
	}
	slices.SortStableFunc(jobs, newestFirst)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCALLER\tSTATUS\tDONE/TOTAL\tFAILED\tNOT RUN\tCREATED\tLAST ACTIVE\tERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\t%s\t%s\n", j.ID, j.Caller, j.Status,
			j.TargetsDone, j.TargetsTotal, j.TargetsFailed, engine.NotRun(j.Status, j.TargetsTotal, j.TargetsDone),
			formatNanos(j.Created), formatNanos(j.Lease), j.Error)
	}
	return tw.Flush()
}

// newestFirst orders jobs as the API lists them: by creation time, then
// id, both descending.
func newestFirst(a, b persistence.JobRecord) int {
	return cmp.Or(cmp.Compare(b.Created, a.Created), cmp.Compare(b.ID, a.ID))
}

// formatNanos formats unix nanoseconds as UTC, to the second.
func formatNanos(n int64) string {
	if n == 0 {
		return "-"
	}
	return time.Unix(0, n).UTC().Format(time.DateTime) + "Z"
}
