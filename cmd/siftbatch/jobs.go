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
	"github.com/sift/batch/persistence"
)

// runJobs is the jobs command: a table of the jobs stored in a directory.
func runJobs(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("jobs", "jobs [--data DIR]",
		"List the jobs stored in a store directory, oldest first. DONE/TOTAL counts the\ntargets with a stored outcome, done or failed; FAILED the failed ones. LAST\nACTIVE is a job's last stored target or read: it stays readable for the --ttl\nof the serve that stored it (24h by default) after that. The store must not be\nin use by a running serve.")
	data := fs.String("data", defaultDataDir, "store directory")
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return err
	}
	store, err := cli.OpenForInspection(*data)
	if err != nil {
		return err
	}
	defer store.Close()
	var jobs []persistence.JobRecord
	if err := store.Jobs(func(j persistence.JobRecord) bool {
		jobs = append(jobs, j)
		return true
	}); err != nil {
		return err
	}
	if len(jobs) == 0 {
		fmt.Fprintf(stdout, "no jobs in %s\n", *data)
		return nil
	}
	slices.SortStableFunc(jobs, func(a, b persistence.JobRecord) int {
		return cmp.Or(cmp.Compare(a.Created, b.Created), cmp.Compare(a.ID, b.ID))
	})
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCALLER\tSTATUS\tDONE/TOTAL\tFAILED\tCREATED\tLAST ACTIVE\tERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\n", j.ID, j.Caller, j.Status,
			j.TargetsDone, j.TargetsTotal, j.TargetsFailed, formatNanos(j.Created), formatNanos(j.Lease), j.Error)
	}
	return tw.Flush()
}

// formatNanos formats unix nanoseconds as UTC, to the second.
func formatNanos(n int64) string {
	if n == 0 {
		return "-"
	}
	return time.Unix(0, n).UTC().Format(time.DateTime) + "Z"
}
