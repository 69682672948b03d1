package democluster

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/bars"
	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine"
)

// view shows the jobs and the script's steps as they happen. Its methods
// are safe for concurrent use.
type view interface {
	add(j *job)
	event(msg string)
	refresh()
	finish(failed bool)
}

// line is a job's line in the live view: its holder, progress, status,
// and each node's answer for it.
func line(nodes []*node, j *job) string {
	last, answers := j.state()
	status := last.status
	if status == "" {
		status = engine.StatusQueued
	}
	if last.err != "" {
		status += fmt.Sprintf(" %q", last.err)
	}
	waiting := j.waiting()
	var b strings.Builder
	for i, a := range answers {
		shown := a.String()
		if waiting[i] {
			shown = "wait"
		}
		fmt.Fprintf(&b, "  %s:%-4s", nodes[i].name, shown)
	}
	return fmt.Sprintf("%-5s %-5s @%s %2d/%-2d %-18s%s", j.label, j.caller, nodes[j.node].name, last.done, last.total, status, b.String())
}

// linesView prints a line whenever a job's changes, and each step: for
// logs and pipes.
type linesView struct {
	w     io.Writer
	start time.Time
	nodes []*node

	mu   sync.Mutex
	jobs []*job
	last map[*job]string
}

func (v *linesView) add(j *job) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.jobs = append(v.jobs, j)
}

func (v *linesView) event(msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.w, "%5.1fs  ▶ %s\n", time.Since(v.start).Seconds(), msg)
}

func (v *linesView) refresh() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, j := range v.jobs {
		l := line(v.nodes, j)
		if l == v.last[j] {
			continue
		}
		v.last[j] = l
		fmt.Fprintf(v.w, "%5.1fs    %s\n", time.Since(v.start).Seconds(), strings.TrimRight(l, " "))
	}
}

func (v *linesView) finish(bool) {}

// barsView shows a live bar per job on a terminal, the steps printed above.
type barsView struct {
	start time.Time
	nodes []*node
	live  *bars.Live

	mu   sync.Mutex
	jobs []*job
	idx  []int
}

func (v *barsView) add(j *job) {
	holder := "@" + v.nodes[j.node].name
	i := v.live.Add(
		func() string { return fmt.Sprintf("%-5s %-5s %s", j.label, j.caller, holder) },
		func() string {
			_, rest, _ := strings.Cut(line(v.nodes, j), holder+" ")
			return rest
		})
	v.mu.Lock()
	defer v.mu.Unlock()
	v.jobs = append(v.jobs, j)
	v.idx = append(v.idx, i)
}

func (v *barsView) event(msg string) {
	v.live.Print(fmt.Sprintf("%5.1fs  ▶ %s", time.Since(v.start).Seconds(), msg))
}

func (v *barsView) refresh() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, j := range v.jobs {
		last, _ := j.state()
		v.live.Set(v.idx[k], last.done, last.total)
	}
}

// finish stops drawing; failed, it removes the bars from the screen.
func (v *barsView) finish(failed bool) {
	v.refresh()
	v.live.Finish(failed)
}

// summary prints every job, the jobs per node, and what the kill cost.
func (d *demo) summary(k *timeline) {
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tCALLER\tNODE\tSTATUS\tDONE/TOTAL\tFAILED\tID")
	perNode := make([]map[string]int, len(d.nodes))
	for i := range perNode {
		perNode[i] = map[string]int{}
	}
	for _, j := range d.allJobs() {
		last, _ := j.state()
		status := last.status
		if last.err != "" {
			status += fmt.Sprintf(" %q", last.err)
		}
		perNode[j.node][status]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", j.label, j.caller, d.nodes[j.node].name, status, last.done, last.total, last.failed, j.id)
	}
	_ = tw.Flush()
	fmt.Fprintln(d.out, "\nJobs per node:")
	for i, n := range d.nodes {
		var parts []string
		total := 0
		for _, st := range slices.Sorted(maps.Keys(perNode[i])) {
			parts = append(parts, fmt.Sprintf("%d %s", perNode[i][st], st))
			total += perNode[i][st]
		}
		fmt.Fprintf(d.out, "  %s (tag %s): %d %s: %s\n", n.name, n.tag, total, cli.Plural(total, "job", "jobs"), strings.Join(parts, ", "))
	}
	fmt.Fprintf(d.out, "\nWhat killing %s cost (the automanaged provider: each node polls the others every 2 s):\n", k.victim.name)
	fmt.Fprintf(d.out, "  kill → %s answer 503 \"node unavailable\" for its jobs: %.1fs\n", d.survivorNames(), k.unavailable.Sub(k.killed).Seconds())
	for _, a := range k.again {
		fmt.Fprintf(d.out, "  kill → %s, whose job on %s was live, admitted again on %s: %.1fs\n", a.job.caller, k.victim.name, d.nodes[a.job.node].name, a.at.Sub(k.killed).Seconds())
	}
	fmt.Fprintf(d.out, "  restart → its jobs readable from every node, failed \"restart\" (restart reaping): %.1fs\n", k.readable.Sub(k.restarted).Seconds())
	fmt.Fprintf(d.out, "  nothing of %s's was lost: every job they hold ended done, every target fetched\n", d.survivorNames())
}
