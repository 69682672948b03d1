// Package democluster is siftbatch demo-cluster: three serve --cluster
// processes on 127.0.0.1 (the siftbatch command itself), each with its own
// temporary store, mutual TLS, and a fixture server. Three callers submit
// jobs over the nodes, node n3 is killed (SIGKILL) and brought back, and a
// live view shows what each node answers for each job throughout; a
// summary tells what the kill cost.
//
// The script runs in phases, each a method of demo that waits for its
// condition for at most its limit: start, firstRound, kill, detect,
// restart, verify, then the summary and, without Once, stayUp.
package democluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/bars"
	"github.com/sift/batch/cmd/siftbatch/internal/fixture"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/loopback"
)

// The script: three nodes, the last of which is killed and brought back.
const (
	clusterName   = "siftbatch-demo"
	nodeCount     = 3
	victimIdx     = nodeCount - 1 // the node killed: n3
	roundJobs     = 6             // the first round of jobs, round-robin over callers and nodes
	jobsPerCaller = 2             // serve's --jobs-per-caller: the first round fills every caller's cap
	workers       = 2             // serve's --workers
)

// The bounds of Options.Targets, which the command's flags check.
const (
	MinTargets = 2
	MaxTargets = engine.DefaultTargetsPerJob
)

// Pause is the viewer's moment before the kill and the restart: the
// command's Options.Pause.
const Pause = 1500 * time.Millisecond

// The pace and bounds. Every wait is on a condition, checked every
// checkEvery, and fails after its limit.
const (
	pollEvery      = 400 * time.Millisecond // how often each job is read through each node
	checkEvery     = 100 * time.Millisecond
	retryEvery     = 250 * time.Millisecond // pause before a refused submit is tried again
	refreshEvery   = 200 * time.Millisecond // the live view's refresh
	startLimit     = 60 * time.Second       // a node answers /healthz
	formLimit      = 30 * time.Second       // every node answers every node's job
	detectLimit    = 30 * time.Second       // the survivors answer 503, and admit the dead node's callers
	endLimit       = 90 * time.Second       // every job ends
	stopLimit      = 30 * time.Second       // SIGTERM to every node, then SIGKILL (a node stopped just after a peer's death takes ~10s)
	requestTimeout = 15 * time.Second       // one HTTP request to a node
	slowRead       = time.Second            // a read slower than this shows as "wait"
)

// callers are the demo's callers, each with a key of its own; probe is the
// caller of the jobs that show the cluster has formed (its own: their ends
// count against no caller of the script).
var callers = []string{"alice", "bob", "carol"}

const probe = "probe"

// Options are demo-cluster's.
type Options struct {
	// Once ends the demo after the summary; without it the nodes keep
	// serving until ctx is cancelled.
	Once bool
	// Targets is the number of targets of each job of the first round,
	// MinTargets to MaxTargets.
	Targets int
	// Exe is the siftbatch command, run as serve.
	Exe string
	// Env is added to the nodes' environment (tests: GORACE).
	Env []string
	// Pause is the viewer's moment before the kill and the restart (the
	// command: Pause; tests: 0).
	Pause time.Duration
	// Inspect, if set (tests), is given the temporary directory (the
	// nodes' logs) once every process has stopped, before it is removed.
	Inspect func(dir string)
}

// demo is one run of demo-cluster.
type demo struct {
	o      Options
	out    io.Writer
	dir    string
	start  time.Time
	keys   map[string]string // caller → key; never printed
	nodes  []*node
	fix    *fixture.Server
	client *http.Client
	view   view

	labels atomic.Int64 // the jobs numbered so far

	ports []*loopback.Port // held for the whole run: see setUp

	mu    sync.Mutex // guards procs and jobs
	procs []*proc    // every process started
	jobs  []*job

	pollCtx  context.Context
	stopPoll context.CancelFunc
	polling  sync.WaitGroup
}

// Run runs demo-cluster with o, its view on stdout. Interrupted (ctx
// cancelled), it stops every node (SIGTERM) and removes its temporary
// directory, then returns ctx's error; a node that does not stop on
// SIGTERM is killed, and is an error. When a step fails, the nodes' logs
// are kept, and it says where on stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "siftbatch-demo-cluster-")
	if err != nil {
		return fmt.Errorf("make temporary directory: %w", err)
	}
	keep := false
	defer func() {
		if keep {
			fmt.Fprintf(stderr, "siftbatch demo-cluster: the nodes' logs (n1.log, n2.log, n3.log) and stores are kept in %s\n", dir)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil && (err == nil || errors.Is(err, context.Canceled)) {
			err = fmt.Errorf("demo-cluster: remove the temporary directory: %w", rerr)
		}
	}()
	transport := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	d := &demo{
		o:      o,
		out:    stdout,
		dir:    dir,
		start:  time.Now(),
		keys:   map[string]string{},
		client: &http.Client{Transport: transport, Timeout: requestTimeout},
	}
	d.pollCtx, d.stopPoll = context.WithCancel(context.Background())
	defer transport.CloseIdleConnections()
	defer func() {
		d.stopPolling()
		if d.view != nil {
			d.view.finish(err != nil)
		}
		if serr := d.stopAll(); serr != nil && (err == nil || errors.Is(err, context.Canceled)) {
			err = serr
		}
		for _, p := range d.ports {
			p.Close()
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			keep = true
		}
		if o.Inspect != nil {
			o.Inspect(dir)
		}
	}()
	if d.fix, err = fixture.Start(); err != nil {
		return err
	}
	defer d.fix.Close()
	return d.script(ctx)
}

// script is the demo, phase by phase.
func (d *demo) script(ctx context.Context) error {
	if err := d.startNodes(ctx); err != nil {
		return err
	}
	round, err := d.firstRound(ctx)
	if err != nil {
		return err
	}
	k, err := d.kill(ctx, round)
	if err != nil {
		return err
	}
	if err := d.detect(ctx, k); err != nil {
		return err
	}
	if err := d.restart(ctx, k); err != nil {
		return err
	}
	if err := d.verify(ctx); err != nil {
		return err
	}
	d.stopPolling()
	d.view.finish(false)
	d.view = nil
	d.summary(k)
	if d.o.Once {
		return nil
	}
	return d.stayUp(ctx)
}

// startNodes writes the keys and certificates, starts the live view and
// the nodes, and waits until they answer and have formed the cluster.
func (d *demo) startNodes(ctx context.Context) error {
	if err := d.setUp(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "siftbatch demo-cluster: %d serve --cluster processes on 127.0.0.1 (mutual TLS: certificates in %s), callers %s (cap %d live jobs each), a fixture server; logs in %s\n",
		nodeCount, filepath.Join(d.dir, "certs"), strings.Join(callers, ", "), jobsPerCaller, d.dir)
	tags := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		tags[i] = n.name + "=" + n.tag
	}
	fmt.Fprintf(d.out, "A job id's first 8 hex digits are its node's tag: %s.\n", strings.Join(tags, " "))
	fmt.Fprintln(d.out, "Each job's line: its node (@), targets done, status, and what each node answers for it")
	fmt.Fprintln(d.out, "(200; 503: node unavailable; down: no answer; wait: no answer yet after 1s).")
	fmt.Fprintln(d.out)
	if ok, _ := bars.Fit(d.out); ok {
		d.view = &barsView{start: d.start, nodes: d.nodes, live: bars.NewLive(d.out, refreshEvery)}
	} else {
		d.view = &linesView{w: d.out, start: d.start, nodes: d.nodes, last: map[*job]string{}}
	}
	d.polling.Add(1)
	go d.render()

	for _, n := range d.nodes {
		if err := d.startNode(n); err != nil {
			return err
		}
		d.event("started %s (pid %d): API %s", n.name, n.proc.pid, n.base)
	}
	for _, n := range d.nodes {
		if err := d.waitUntil(ctx, startLimit, n.name+" to answer /healthz", func() bool { return d.healthy(ctx, n) }); err != nil {
			return err
		}
	}
	d.event("every node answers /healthz (%.1fs)", time.Since(d.start).Seconds())
	return d.form(ctx)
}

// firstRound fills each caller's cap over the nodes, and waits until every
// job reads 200 through every node and the victim's have begun.
func (d *demo) firstRound(ctx context.Context) ([]*job, error) {
	round := make([]*job, roundJobs)
	for k := range round {
		caller, i := callers[k%len(callers)], (k+k/len(callers))%nodeCount
		j, err := d.submitJob(ctx, formLimit, caller, i, d.o.Targets)
		if err != nil {
			return nil, err
		}
		round[k] = j
	}
	victim := d.nodes[victimIdx]
	if err := d.waitUntil(ctx, formLimit, "every job to be read through every node, and "+victim.name+"'s to run", func() bool {
		for _, j := range round {
			last, answers := j.state()
			for _, a := range answers {
				if a.code != http.StatusOK {
					return false
				}
			}
			if j.node == victimIdx && last.done == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	d.event("every node answers 200 for every job; %s's are running", victim.name)
	return round, d.pauseFor(ctx)
}

// timeline is what the kill cost, phase by phase.
type timeline struct {
	victim     *node
	round      []*job
	onVictim   []*job   // the round's jobs the victim held
	callers    []string // their callers
	doneAtKill int      // the survivors' targets done at the kill

	killed      time.Time
	unavailable time.Time  // the survivors answer 503 for the victim's jobs
	again       []admitted // the victim's callers' jobs admitted after the kill
	restarted   time.Time
	readable    time.Time // the victim's jobs read failed "restart" everywhere
}

// admitted is a job submitted after the kill: when it was admitted.
type admitted struct {
	job *job
	at  time.Time
	err error
}

// kill kills the victim (SIGKILL) while its jobs run.
func (d *demo) kill(ctx context.Context, round []*job) (*timeline, error) {
	k := &timeline{victim: d.nodes[victimIdx], round: round}
	for _, j := range round {
		if j.node == victimIdx {
			k.onVictim = append(k.onVictim, j)
		}
	}
	k.callers = callersOf(k.onVictim)
	k.doneAtKill = d.survivorsDone(round)
	k.killed = time.Now()
	if err := d.killNode(k.victim); err != nil {
		return nil, err
	}
	d.fix.Release() // the victim's held pages: nobody waits for them now
	d.event("killed %s with SIGKILL (pid %d): it held %s, of %s", k.victim.name, k.victim.proc.pid, jobLabels(k.onVictim), strings.Join(k.callers, " and "))
	return k, nil
}

// detect has the victim's callers submit again on the survivors, while the
// survivors come to answer 503 for the victim's jobs; it waits for both.
func (d *demo) detect(ctx context.Context, k *timeline) error {
	admits := make(chan admitted, len(k.callers))
	for i, caller := range k.callers {
		n := i % victimIdx // a survivor
		go func() {
			j, err := d.submitJob(ctx, detectLimit, caller, n, max(d.o.Targets/2, MinTargets))
			at := time.Now()
			if err == nil {
				d.event("%s admitted again on %s, %.1fs after the kill", caller, d.nodes[n].name, at.Sub(k.killed).Seconds())
			}
			admits <- admitted{j, at, err}
		}()
	}
	err := d.waitUntil(ctx, detectLimit, "the survivors to answer 503 for "+k.victim.name+"'s jobs", func() bool {
		for _, j := range k.onVictim {
			_, answers := j.state()
			for i := range victimIdx {
				if answers[i].code != http.StatusServiceUnavailable || answers[i].err != "node unavailable" {
					return false
				}
			}
		}
		return true
	})
	if err == nil {
		k.unavailable = time.Now()
		d.event(`%s answer 503 "node unavailable" for %s's jobs, %.1fs after the kill`, d.survivorNames(), k.victim.name, k.unavailable.Sub(k.killed).Seconds())
	}
	for range k.callers {
		a := <-admits
		if a.err != nil && err == nil {
			err = a.err
		}
		if a.err == nil {
			k.again = append(k.again, a)
		}
	}
	if err != nil {
		return err
	}
	d.event("meanwhile %s went on with their own jobs: %d targets fetched since the kill", d.survivorNames(), d.survivorsDone(k.round)-k.doneAtKill)
	return d.pauseFor(ctx)
}

// restart starts the victim again on its store: restart reaping fails its
// live jobs "restart", which every node then reads.
func (d *demo) restart(ctx context.Context, k *timeline) error {
	victim := k.victim
	k.restarted = time.Now()
	if err := d.startNode(victim); err != nil {
		return err
	}
	d.event("restarted %s on its store (pid %d)", victim.name, victim.proc.pid)
	if err := d.waitUntil(ctx, startLimit, victim.name+" to answer /healthz again", func() bool { return d.healthy(ctx, victim) }); err != nil {
		return err
	}
	if err := d.waitUntil(ctx, detectLimit, victim.name+"'s jobs to read failed \"restart\" through every node", func() bool {
		for _, j := range k.onVictim {
			_, answers := j.state()
			for _, a := range answers {
				if a.code != http.StatusOK || a.status != engine.StatusFailed || a.err != "restart" {
					return false
				}
			}
		}
		return true
	}); err != nil {
		return err
	}
	k.readable = time.Now()
	d.event(`%s's jobs %s read failed "restart" on every node, %.1fs after the restart`, victim.name, jobLabels(k.onVictim), k.readable.Sub(k.restarted).Seconds())
	return nil
}

// verify waits until every job has ended, and checks that the survivors
// lost nothing: the fixture's slow and fast pages never fail, so a
// survivor's job not done lost something.
func (d *demo) verify(ctx context.Context) error {
	if err := d.waitUntil(ctx, endLimit, "every job to end", func() bool {
		for _, j := range d.allJobs() {
			if !j.terminal() {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	d.event("every job has ended")
	for _, j := range d.allJobs() {
		if last, _ := j.state(); j.node != victimIdx && (last.status != engine.StatusDone || last.done != last.total) {
			return fmt.Errorf("demo-cluster: %s on %s ended %s, %d/%d targets done; want done", j.label, d.nodes[j.node].name, last.status, last.done, last.total)
		}
	}
	return nil
}

// stayUp keeps the cluster serving until ctx is cancelled (nil: the demo
// is over, a stop is no failure) or a node exits by itself.
func (d *demo) stayUp(ctx context.Context) error {
	fmt.Fprintln(d.out, "\nThe cluster is still up: try a node's dashboard or API:")
	for _, n := range d.nodes {
		fmt.Fprintf(d.out, "  %s  %s/ui/\n", n.name, n.base)
	}
	fmt.Fprintf(d.out, "(the callers' keys are in %s)\n", filepath.Join(d.dir, "keys"))
	fmt.Fprintln(d.out, "Ctrl-C to stop: every node is stopped and the temporary directory removed. (--once ends here by itself.)")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case <-ctx.Done():
		return nil
	case <-d.exitedUnexpectedly(wctx):
		return d.check()
	}
}

// waitUntil checks cond every checkEvery until it holds; it fails after
// limit, when ctx is done, or when a node exits by itself.
func (d *demo) waitUntil(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	return d.waitEvery(ctx, checkEvery, limit, what, cond)
}

// waitEvery is waitUntil, cond checked every period.
func (d *demo) waitEvery(ctx context.Context, period, limit time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for !cond() {
		if err := d.check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("demo-cluster: waited %s for %s", limit, what)
		case <-tick.C:
		}
	}
	return nil
}

// pauseFor gives the viewer a moment (o.Pause) before the next step.
func (d *demo) pauseFor(ctx context.Context) error {
	if d.o.Pause <= 0 {
		return nil
	}
	t := time.NewTimer(d.o.Pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
