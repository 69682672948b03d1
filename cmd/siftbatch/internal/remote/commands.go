package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/bars"
	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/client"
)

// maxTargetsFile caps the bytes of a --targets file: serve's own cap of a
// submit body is 256 KiB by default.
const maxTargetsFile = 16 << 20

// Submit is the submit command: it submits URLs (or a file of targets) as
// one job and prints its id.
func Submit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return explain(submit(ctx, args, stdout, stderr))
}

// submit is Submit without [explain].
func submit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("submit", "submit --key-file FILE [--server URL] [--grep RE] [--jq PROG] [--idempotency-key K] [--no-retry] [--json] (URL... | --targets FILE)",
		"Submit URLs to a running serve as one job, and print the job's id (with --json,\nthe API's answer: {\"id\",\"reused\",\"status\",\"location\"}, where \"status\" is the\njob's path, /v1/batch/ID, as \"location\" is: not a status word; get or wait\ngives the job's status). The same targets submitted again while their job is\nreusable answer that job (\"reused\", noted on stderr); a new --idempotency-key\nasks for a fresh one. --grep and --jq apply to every URL;\n--targets reads {\"targets\":[{\"url\",\"options\"}]} or a list of targets, in JSON,\nfrom a file (- for stdin).")
	c := addConn(fs)
	grep := fs.String("grep", "", "keep the lines this RE2 expression matches, for every URL")
	jq := fs.String("jq", "", "run this jq program on each page (JSON pages)")
	file := fs.String("targets", "", "read the targets, in JSON, from this file (- for stdin) instead of URLs")
	key := fs.String("idempotency-key", "", "match the job by this key instead of by its targets")
	noRetry := fs.Bool("no-retry", false, "answer a 429 or 503 (a cap reached, a node away) at once, exit 1, instead of\nwaiting its Retry-After to try again (up to 4 times in all, each wait said on stderr)")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	var targets []client.Target
	switch {
	case *file != "" && len(pos) > 0:
		return cli.CmdUsagef("submit", "give URLs or --targets, not both")
	case *file != "":
		if *grep != "" || *jq != "" {
			return cli.CmdUsagef("submit", "--grep and --jq apply to URLs; put options in the --targets file")
		}
		if targets, err = readTargets(*file, os.Stdin); err != nil {
			return err
		}
	case len(pos) == 0:
		return cli.CmdUsagef("submit", "want at least one URL, or --targets FILE")
	default:
		for _, u := range pos {
			targets = append(targets, client.Target{URL: u, Options: client.Options{Grep: *grep, JQ: *jq}})
		}
	}
	var opts []client.Option
	if *noRetry {
		opts = append(opts, client.WithRetry(1, 0))
	}
	cl, err := c.client(stderr, opts...)
	if err != nil {
		return err
	}
	sub, err := cl.SubmitWith(ctx, targets, client.SubmitOptions{IdempotencyKey: *key})
	if err != nil {
		return err
	}
	if *c.json {
		return printJSON(stdout, sub)
	}
	if sub.Reused {
		fmt.Fprintf(stderr, "job %s reused: an earlier job of the same targets\n", sub.ID)
	}
	_, err = fmt.Fprintln(stdout, sub.ID)
	return err
}

// readTargets reads a --targets file: {"targets":[…]} or […], strictly.
func readTargets(path string, stdin io.Reader) ([]client.Target, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("targets: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTargetsFile+1))
	if err != nil {
		return nil, fmt.Errorf("targets %s: %w", path, err)
	}
	if len(b) > maxTargetsFile {
		return nil, fmt.Errorf("targets %s: more than %d MiB", path, maxTargetsFile>>20)
	}
	b = bytes.TrimSpace(b)
	var body struct {
		Targets []client.Target `json:"targets"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if len(b) > 0 && b[0] == '[' {
		err = dec.Decode(&body.Targets)
	} else {
		err = dec.Decode(&body)
	}
	if err == nil && dec.More() {
		err = errors.New("data after the JSON value")
	}
	if err != nil {
		return nil, fmt.Errorf("targets %s: want {\"targets\":[{\"url\":…,\"options\":{…}}]} or a list of targets: %w", path, err)
	}
	return body.Targets, nil
}

// Get is the get command: a job and its targets, with --results each
// result (streamed, one held at a time), or one target with its result.
func Get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return explain(get(ctx, args, stdout, stderr))
}

// get is Get without [explain].
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("get", "get --key-file FILE [--server URL] [--results] [--json] ID [IDX]",
		"Print a job of yours and its targets: a summary line and a table (with --json,\nthe API's job). With --results, each target's result too, read one at a time\n(with --json, one target a line). With IDX, that one target and its result.")
	c := addConn(fs)
	results := fs.Bool("results", false, "print each target's result")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) == 2 {
		idx, err := strconv.Atoi(pos[1])
		if err != nil || idx < 0 {
			return cli.CmdUsagef("get", "IDX %q: want a target's index, 0 or more", pos[1])
		}
		cl, err := c.client(stderr)
		if err != nil {
			return err
		}
		t, err := cl.Target(ctx, pos[0], idx)
		if err != nil {
			return err
		}
		if *c.json {
			return printJSON(stdout, t)
		}
		return printResult(stdout, t)
	}
	id, err := oneID("get", pos)
	if err != nil {
		return err
	}
	cl, err := c.client(stderr)
	if err != nil {
		return err
	}
	if *results {
		for t, err := range cl.Results(ctx, id) {
			switch {
			case err != nil:
				return err
			case *c.json:
				err = printLine(stdout, t)
			default:
				err = printResult(stdout, t)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	j, err := cl.Job(ctx, id)
	if err != nil {
		return err
	}
	if *c.json {
		return printJSON(stdout, j)
	}
	return printJob(stdout, j)
}

// printJob prints a job's summary and a table of its targets.
func printJob(w io.Writer, j client.Job) error {
	fmt.Fprintln(w, summary(j))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IDX\tSTATUS\tURL\tERROR")
	for _, t := range j.Targets {
		e := t.Error
		switch {
		case e == "":
			e = t.Hint // a pending target that will not run says why
		case t.Hint != "":
			e += " (" + t.Hint + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", t.Idx, t.Status, cleanCell(t.URL), cleanCell(e))
	}
	return tw.Flush()
}

// printResult prints a target's line, then its result's content, if any,
// safe for a terminal (cleanText).
func printResult(w io.Writer, t client.TargetStatus) error {
	line := fmt.Sprintf("--- %d %s %s", t.Idx, t.Status, t.URL)
	if t.Error != "" {
		line += ": " + t.Error
	}
	if t.Hint != "" {
		line += " (" + t.Hint + ")"
	}
	if _, err := fmt.Fprintln(w, cleanCell(line)); err != nil {
		return err
	}
	if t.Result == nil {
		return nil
	}
	content := cleanText(t.Result.Content)
	_, err := io.WriteString(w, content)
	if err == nil && (content == "" || content[len(content)-1] != '\n') {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// Wait is the wait command: it waits for a job to end, with a progress bar
// on a terminal, and prints it.
func Wait(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return explain(wait(ctx, args, stdout, stderr))
}

// wait is Wait without [explain].
func wait(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("wait", "wait --key-file FILE [--server URL] [--timeout D] [--json] ID",
		"Wait until a job of yours has ended (done, partial, failed or cancelled), with\na progress bar on a terminal, then print it as get does. Past --timeout with the\njob still live, it fails (exit 1).")
	c := addConn(fs)
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long (0: never)")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	id, err := oneID("wait", pos)
	if err != nil {
		return err
	}
	if *timeout < 0 {
		return cli.CmdUsagef("wait", "--timeout must not be negative")
	}
	cl, err := c.client(stderr)
	if err != nil {
		return err
	}
	var j client.Job
	if ok, height := bars.Fit(stderr); ok {
		p := &progress{w: stderr, height: height}
		j, err = cl.WaitProgress(ctx, id, *timeout, time.Second, p.update)
		p.finish(interrupted(ctx, err))
	} else {
		j, err = cl.Wait(ctx, id, *timeout)
	}
	switch {
	case err != nil:
		return err
	case !j.Ended():
		return fmt.Errorf("job %s still %s after %s: %d of %d stored", id, j.Status, *timeout, j.TargetsDone, j.TargetsTotal)
	case *c.json:
		return printJSON(stdout, j)
	}
	return printJob(stdout, j)
}

// progress is wait's progress bar, drawn once the job's size is known.
type progress struct {
	w      io.Writer
	height int
	bar    *bars.Jobs
}

// update shows j's progress.
func (p *progress) update(j client.Job) {
	if p.bar == nil {
		p.bar = bars.NewJobs(p.w, []bars.Job{{Label: "job " + j.ID, Total: j.TargetsTotal}}, p.height, j.Status)
	}
	note := j.Status
	if j.TargetsFailed > 0 {
		note += fmt.Sprintf(", %d failed", j.TargetsFailed)
	}
	p.bar.Update(0, j.TargetsDone, j.TargetsTotal, note, j.Ended())
}

// finish stops drawing; interrupted, it removes the bar.
func (p *progress) finish(interrupted bool) {
	if p.bar != nil {
		p.bar.Finish(interrupted)
	}
}

// List is the ls command: a table of the caller's jobs, newest first.
func List(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return explain(list(ctx, args, stdout, stderr))
}

// list is List without [explain].
func list(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("ls", "ls --key-file FILE [--server URL] [--status S] [--limit N] [--json]",
		"List your jobs on a running serve, newest first (with --json, a list of the\nAPI's jobs). DONE/TOTAL counts the targets with a stored outcome, done or\nfailed; FAILED the failed ones; NOT RUN those a job that ended (cancelled, or\nfailed by a restart or a shutdown) left pending, which will never run.")
	c := addConn(fs)
	status := fs.String("status", "", "only jobs of this status: live, queued, running, done, partial, failed, cancelled or terminal")
	limit := fs.Int("limit", 20, "list at most this many jobs (0: all)")
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return err
	}
	if *limit < 0 {
		return cli.CmdUsagef("ls", "--limit must not be negative")
	}
	cl, err := c.client(stderr)
	if err != nil {
		return err
	}
	jobs := []client.Job{}
	more := false
	opt := client.ListOptions{Status: *status}
	if *limit > 0 {
		opt.Limit = min(*limit+1, 100) // one more tells whether there are more
	}
	for j, err := range cl.List(ctx, opt) {
		if err != nil {
			return err
		}
		if *limit > 0 && len(jobs) == *limit {
			more = true
			break
		}
		jobs = append(jobs, j)
	}
	if more {
		fmt.Fprintf(stderr, "the %d newest shown; --limit 0 lists all\n", *limit)
	}
	if *c.json {
		return printJSON(stdout, jobs)
	}
	if len(jobs) == 0 {
		_, err := fmt.Fprintln(stdout, "no jobs")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tDONE/TOTAL\tFAILED\tNOT RUN\tCREATED\tERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%d\t%s\t%s\n", cleanCell(j.ID), j.Status, j.TargetsDone, j.TargetsTotal, j.TargetsFailed,
			j.NotRun(), j.Created().UTC().Format(time.DateTime)+"Z", cleanCell(j.Error))
	}
	return tw.Flush()
}

// Cancel is the cancel command: it cancels a live job of the caller's.
func Cancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return explain(cancel(ctx, args, stdout, stderr))
}

// cancel is Cancel without [explain].
func cancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("cancel", "cancel --key-file FILE [--server URL] [--json] ID",
		"Cancel a live job of yours: its running targets stop, its pending ones never\nstart. A job that has already ended is an error.")
	c := addConn(fs)
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	id, err := oneID("cancel", pos)
	if err != nil {
		return err
	}
	cl, err := c.client(stderr)
	if err != nil {
		return err
	}
	if err := cl.Cancel(ctx, id); err != nil {
		return err
	}
	if *c.json {
		return printJSON(stdout, map[string]any{"id": id, "cancelled": true})
	}
	_, err = fmt.Fprintf(stdout, "job %s cancelled\n", id)
	return err
}
