package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/bars"
	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine"
)

// progressView shows the jobs' progress as it changes.
type progressView interface {
	update(i int, d *job)
	finish(interrupted bool)
}

// linesView prints a line whenever a job changes: for logs and pipes.
type linesView struct {
	w     io.Writer
	start time.Time
	last  []string
}

func (v *linesView) update(i int, d *job) {
	line := fmt.Sprintf("%-12s %2d/%-2d %-9s %s", d.label, d.job.TargetsDone, d.job.TargetsTotal, d.job.Status, running(d))
	if line == v.last[i] {
		return
	}
	v.last[i] = line
	fmt.Fprintf(v.w, "%5.1fs  %s\n", time.Since(v.start).Seconds(), strings.TrimRight(line, " "))
}

func (v *linesView) finish(bool) { fmt.Fprintln(v.w) }

// barsView is a live bar per job, on a terminal.
type barsView struct{ b *bars.Jobs }

func (v *barsView) update(i int, d *job) {
	note := d.job.Status
	if r := running(d); r != "" {
		note += ", " + r
	}
	v.b.Update(i, d.job.TargetsDone, d.job.TargetsTotal, note, d.terminal())
}

func (v *barsView) finish(interrupted bool) { v.b.Finish(interrupted) }

// printSummary prints the table of jobs, the first bytes of a few results
// and every failure, each of them the fixture's doing; panics is how many
// fetches the panic page made panic.
func printSummary(w io.Writer, js []*job, panics int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCALLER\tSTATUS\tDONE/TOTAL\tFAILED\tMS\tID")
	for _, d := range js {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\n", d.short(), d.caller, d.job.Status,
			d.job.TargetsDone, d.job.TargetsTotal, d.job.TargetsFailed, d.finished.Sub(d.submitted).Milliseconds(), d.id)
	}
	_ = tw.Flush()

	// One result of each kind of page that has one: fast, slow, and busy
	// (answered 429 twice, then fetched).
	var firsts []string
	shown := map[string]bool{}
	for _, d := range js {
		for _, t := range d.targets {
			kind := d.kinds[t.Idx]
			if t.Result == nil || shown[kind] {
				continue
			}
			shown[kind] = true
			firsts = append(firsts, fmt.Sprintf("  %s #%d %-5s %q\n", d.short(), t.Idx, kind, firstBytes(t.Result.Content, 60)))
		}
	}
	if len(firsts) > 0 {
		fmt.Fprint(w, "\nFirst bytes of a few results:\n"+strings.Join(firsts, ""))
	}
	var failed []string
	for _, d := range js {
		for _, t := range d.targets {
			if t.Status != engine.TargetFailed {
				continue
			}
			hint := ""
			if t.Hint != "" {
				hint = " (" + t.Hint + ")"
			}
			failed = append(failed, fmt.Sprintf("  %s #%d\t%s\t%s%s\n", d.short(), t.Idx, d.kinds[t.Idx], t.Error, hint))
		}
	}
	if len(failed) == 0 {
		fmt.Fprintln(w, "\nNo target failed: these jobs met none of the fixture's missing, broken or panic pages (more --targets do).")
	} else {
		fmt.Fprintln(w, "\nFailed targets, each on purpose (the fixture serves pages that are missing, broken, or make the fetch panic):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, line := range failed {
			fmt.Fprint(tw, line)
		}
		_ = tw.Flush()
	}
	if panics > 0 {
		fmt.Fprintf(w, "\nThe panic page made %d %s panic on purpose: the runner stored %s failed (\"internal error\") and went on.\n",
			panics, cli.Plural(int(panics), "fetch", "fetches"), cli.Plural(int(panics), "that target", "those targets"))
	}
}
