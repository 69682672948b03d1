package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clustertls"
)

// The demo-cluster's script: three nodes, the last of which is killed and
// brought back.
const (
	dcClusterName   = "siftbatch-demo"
	dcNodes         = 3
	dcVictim        = dcNodes - 1 // the node killed: n3
	dcJobs          = 6           // the first round of jobs, round-robin over callers and nodes
	dcJobsPerCaller = 2           // serve's --jobs-per-caller: the first round fills every caller's cap
	dcWorkers       = 2           // serve's --workers
)

// The demo-cluster's pace and bounds. Every wait is on a condition, checked
// every dcCheck, and fails after its limit.
const (
	dcPoll           = 400 * time.Millisecond // how often each job is read through each node
	dcCheck          = 100 * time.Millisecond
	dcRetry          = 250 * time.Millisecond  // pause before a refused submit is tried again
	dcRefresh        = 200 * time.Millisecond  // the live view's refresh
	dcStartLimit     = 60 * time.Second        // a node answers /healthz
	dcFormLimit      = 30 * time.Second        // every node answers every node's job
	dcDetectLimit    = 30 * time.Second        // the survivors answer 503, and admit the dead node's callers
	dcEndLimit       = 90 * time.Second        // every job ends
	dcStopLimit      = 30 * time.Second        // SIGTERM to every node, then SIGKILL (a node stopped just after a peer's death takes ~10s)
	dcRequestTimeout = 15 * time.Second        // one HTTP request to a node
	dcPause          = 1500 * time.Millisecond // the viewer's moment before the kill and the restart
	dcSlow           = time.Second             // a read slower than this shows as "wait"
)

// dcCallers are the demo-cluster's callers, each with a key of its own;
// dcProbe is the caller of the jobs that show the cluster has formed (its
// own: their ends count against no caller of the script).
var dcCallers = []string{"alice", "bob", "carol"}

const dcProbe = "probe"

// dcOptions are demo-cluster's options.
type dcOptions struct {
	once    bool
	targets int
	exe     string        // the siftbatch command run as serve (runDemoCluster: os.Executable())
	env     []string      // added to the nodes' environment (tests: GORACE)
	pause   time.Duration // before the kill and the restart, for the viewer (tests: 0)
	// inspect, if set (tests), is given the temporary directory (the
	// nodes' logs) once every process has stopped, before it is removed.
	inspect func(dir string)
}

// runDemoCluster is the demo-cluster command.
func runDemoCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo-cluster", "demo-cluster [flags]",
		"Run a cluster of three siftbatch serve --cluster processes on 127.0.0.1 (this\n"+
			"command itself), each with its own temporary store, and a fixture HTTP server.\n"+
			"Three callers submit jobs spread over the nodes; a live view shows which node\n"+
			"holds each job (its id's first 8 hex digits are the node's tag), its progress,\n"+
			"and what each node answers for it. Then node n3 is killed (SIGKILL): n1 and n2\n"+
			"answer 503 \"node unavailable\" for its jobs, go on with their own, and admit its\n"+
			"callers again; n3 is restarted on its store, and its jobs read failed \"restart\"\n"+
			"from every node. A summary tells what the kill cost.\n\n"+
			"Without --once, the three nodes keep serving after the summary until Ctrl-C.\n"+
			"Ctrl-C at any time stops every process (SIGTERM; a second Ctrl-C kills them)\n"+
			"and removes the temporary directory;\n"+
			"if a step fails, the nodes' logs are kept there and the demo says where.")
	once := fs.Bool("once", false, "end after the summary (exit 0 if every step succeeded, 1 if not),\ninstead of keeping the cluster up until Ctrl-C")
	targets := fs.Int("targets", 8, "targets per job of the first round (2 to 32); each takes about a second")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	if *targets < 2 || *targets > engine.DefaultTargetsPerJob {
		return cmdUsageErrorf("demo-cluster", "--targets must be 2 to %d (got %d)", engine.DefaultTargetsPerJob, *targets)
	}
	o := dcOptions{once: *once, targets: *targets, pause: dcPause}
	if o.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("demo-cluster: find this command: %w", err)
	}
	return demoCluster(ctx, o, stdout, stderr)
}

// dcNode is one of the cluster's nodes, across its restarts.
type dcNode struct {
	name    string
	tag     string // its tag in hex, as its jobs' ids begin
	base    string // http://127.0.0.1:PORT
	args    []string
	logPath string

	proc *dcProc // the process running now (or last), set by the script only
}

// dcProc is one process of a node.
type dcProc struct {
	node   *dcNode
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed once it has exited and err is set
	err    error
	killed bool // killed by the script, on purpose
}

// dcAnswer is what one node answered for one job.
type dcAnswer struct {
	code        int    // the HTTP status; 0 before any answer; -1 no answer (the node is down)
	status      string // the job's, on a 200
	err         string // the job's error on a 200, the answer's error else
	done, total int
	failed      int
}

// String is the answer as the live view shows it.
func (a dcAnswer) String() string {
	switch a.code {
	case 0:
		return "…"
	case -1:
		return "down"
	}
	return strconv.Itoa(a.code)
}

// dcJob is one job as the demo follows it: the pollers set its answers.
type dcJob struct {
	label  string // job1
	caller string
	node   int // the index of the node that holds it (by its id's tag)
	id     string

	mu      sync.Mutex
	answers [dcNodes]dcAnswer
	asked   [dcNodes]time.Time // when the read in flight through each node was sent
	last    dcAnswer           // the last 200, through any node
}

// ask records that a read of j through the node i is sent.
func (j *dcJob) ask(i int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.asked[i] = time.Now()
}

func (j *dcJob) set(i int, a dcAnswer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.answers[i] = a
	j.asked[i] = time.Time{}
	if a.code == http.StatusOK {
		j.last = a
	}
}

func (j *dcJob) state() (last dcAnswer, answers [dcNodes]dcAnswer) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last, j.answers
}

// waiting reports, for each node, whether a read through it has been
// waiting for its answer longer than dcSlow.
func (j *dcJob) waiting() (w [dcNodes]bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, t := range j.asked {
		w[i] = !t.IsZero() && time.Since(t) > dcSlow
	}
	return w
}

// terminal reports whether the job has ended, as last read.
func (j *dcJob) terminal() bool {
	last, _ := j.state()
	return last.status != "" && !engine.IsLive(last.status)
}

// dcDemo is one run of demo-cluster.
type dcDemo struct {
	o      dcOptions
	out    io.Writer
	dir    string
	start  time.Time
	keys   map[string]string // caller → key; never printed
	nodes  []*dcNode
	fix    *fixture
	client *http.Client
	view   dcView

	labels atomic.Int64 // the jobs numbered so far

	mu    sync.Mutex // guards procs and jobs
	procs []*dcProc  // every process started
	jobs  []*dcJob

	pollCtx  context.Context
	stopPoll context.CancelFunc
	polling  sync.WaitGroup
}

// demoCluster runs the script of runDemoCluster with o.
func demoCluster(ctx context.Context, o dcOptions, stdout, stderr io.Writer) (err error) {
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
		_ = os.RemoveAll(dir)
	}()
	transport := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	d := &dcDemo{
		o:      o,
		out:    stdout,
		dir:    dir,
		start:  time.Now(),
		keys:   map[string]string{},
		client: &http.Client{Transport: transport, Timeout: dcRequestTimeout},
	}
	d.pollCtx, d.stopPoll = context.WithCancel(context.Background())
	defer transport.CloseIdleConnections()
	defer func() {
		d.stopPolling()
		if d.view != nil {
			d.view.finish(err != nil)
		}
		if serr := d.stopAll(); serr != nil && err == nil {
			err = serr
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			keep = true
		}
		if o.inspect != nil {
			o.inspect(dir)
		}
	}()
	if d.fix, err = startFixture(); err != nil {
		return err
	}
	defer d.fix.close()
	return d.script(ctx)
}

// script is the demo: each step waits for its condition, at most its limit.
func (d *dcDemo) script(ctx context.Context) error {
	if err := d.setUp(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "siftbatch demo-cluster: %d serve --cluster processes on 127.0.0.1 (mutual TLS: certificates in %s), callers %s (cap %d live jobs each), a fixture server; logs in %s\n",
		dcNodes, filepath.Join(d.dir, "certs"), strings.Join(dcCallers, ", "), dcJobsPerCaller, d.dir)
	tags := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		tags[i] = n.name + "=" + n.tag
	}
	fmt.Fprintf(d.out, "A job id's first 8 hex digits are its node's tag: %s.\n", strings.Join(tags, " "))
	fmt.Fprintln(d.out, "Each job's line: its node (@), targets done, status, and what each node answers for it")
	fmt.Fprintln(d.out, "(200; 503: node unavailable; down: no answer; wait: no answer yet after 1s).")
	fmt.Fprintln(d.out)
	bars, _ := barsFit(d.out)
	if bars {
		d.view = newDCBars(d.out, d.start, d.nodes)
	} else {
		d.view = &dcLines{w: d.out, start: d.start, nodes: d.nodes, last: map[*dcJob]string{}}
	}
	d.polling.Add(1)
	go d.render()

	// The nodes start, and find each other.
	for _, n := range d.nodes {
		if err := d.startNode(n); err != nil {
			return err
		}
		d.event("started %s (pid %d): API %s", n.name, n.proc.pid, n.base)
	}
	for _, n := range d.nodes {
		if err := d.waitUntil(ctx, dcStartLimit, n.name+" to answer /healthz", func() bool { return d.healthy(ctx, n) }); err != nil {
			return err
		}
	}
	d.event("every node answers /healthz (%.1fs)", time.Since(d.start).Seconds())
	if err := d.form(ctx); err != nil {
		return err
	}

	// The first round: each caller's cap filled, over two nodes.
	round := make([]*dcJob, dcJobs)
	for k := range round {
		caller, node := dcCallers[k%len(dcCallers)], (k+k/len(dcCallers))%dcNodes
		j, err := d.submitJob(ctx, dcFormLimit, caller, node, d.o.targets)
		if err != nil {
			return err
		}
		round[k] = j
	}
	victim := d.nodes[dcVictim]
	var onVictim []*dcJob
	for _, j := range round {
		if j.node == dcVictim {
			onVictim = append(onVictim, j)
		}
	}
	if err := d.waitUntil(ctx, dcFormLimit, "every job to be read through every node, and "+victim.name+"'s to run", func() bool {
		for _, j := range round {
			last, answers := j.state()
			for _, a := range answers {
				if a.code != http.StatusOK {
					return false
				}
			}
			if j.node == dcVictim && last.done == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	d.event("every node answers 200 for every job; %s's are running", victim.name)
	if err := d.pauseFor(ctx); err != nil {
		return err
	}

	// The kill.
	callers := callersOf(onVictim)
	doneAtKill := d.survivorsDone(round)
	killed := time.Now()
	if err := d.kill(victim); err != nil {
		return err
	}
	d.event("killed %s with SIGKILL (pid %d): it held %s, of %s", victim.name, victim.proc.pid, jobLabels(onVictim), strings.Join(callers, " and "))

	// n3's callers submit again on the survivors, while the survivors come
	// to answer 503 for n3's jobs.
	admits := make(chan dcAdmitted, len(callers))
	for i, caller := range callers {
		node := i % dcVictim // a survivor
		go func() {
			j, err := d.submitJob(ctx, dcDetectLimit, caller, node, max(d.o.targets/2, 2))
			at := time.Now()
			if err == nil {
				d.event("%s admitted again on %s, %.1fs after the kill", caller, d.nodes[node].name, at.Sub(killed).Seconds())
			}
			admits <- dcAdmitted{j, at, err}
		}()
	}
	var unavailableAt time.Time
	err := d.waitUntil(ctx, dcDetectLimit, "the survivors to answer 503 for "+victim.name+"'s jobs", func() bool {
		for _, j := range onVictim {
			_, answers := j.state()
			for i := range dcVictim {
				if answers[i].code != http.StatusServiceUnavailable || answers[i].err != "node unavailable" {
					return false
				}
			}
		}
		return true
	})
	if err == nil {
		unavailableAt = time.Now()
		d.event(`%s answer 503 "node unavailable" for %s's jobs, %.1fs after the kill`, d.survivorNames(), victim.name, unavailableAt.Sub(killed).Seconds())
	}
	var again []dcAdmitted
	for range callers {
		a := <-admits
		if a.err != nil && err == nil {
			err = a.err
		}
		if a.err == nil {
			again = append(again, a)
		}
	}
	if err != nil {
		return err
	}
	d.event("meanwhile %s went on with their own jobs: %d targets fetched since the kill", d.survivorNames(), d.survivorsDone(round)-doneAtKill)
	if err := d.pauseFor(ctx); err != nil {
		return err
	}

	// The restart: restart reaping fails n3's live jobs "restart".
	restarted := time.Now()
	if err := d.startNode(victim); err != nil {
		return err
	}
	d.event("restarted %s on its store (pid %d)", victim.name, victim.proc.pid)
	if err := d.waitUntil(ctx, dcStartLimit, victim.name+" to answer /healthz again", func() bool { return d.healthy(ctx, victim) }); err != nil {
		return err
	}
	if err := d.waitUntil(ctx, dcDetectLimit, victim.name+"'s jobs to read failed \"restart\" through every node", func() bool {
		for _, j := range onVictim {
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
	readable := time.Now()
	d.event(`%s's jobs %s read failed "restart" on every node, %.1fs after the restart`, victim.name, jobLabels(onVictim), readable.Sub(restarted).Seconds())

	// Every job ends.
	if err := d.waitUntil(ctx, dcEndLimit, "every job to end", func() bool {
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
		// The fixture's slow and fast pages never fail: a survivor's job
		// not done lost something.
		if last, _ := j.state(); j.node != dcVictim && (last.status != engine.StatusDone || last.done != last.total) {
			return fmt.Errorf("demo-cluster: %s on %s ended %s, %d/%d targets done; want done", j.label, d.nodes[j.node].name, last.status, last.done, last.total)
		}
	}
	d.stopPolling()
	d.view.finish(false)
	d.view = nil
	d.summary(victim, killed, unavailableAt, again, restarted, readable)
	if d.o.once {
		return nil
	}
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
		return nil // the demo is over: a stop is no failure
	case <-d.exitedUnexpectedly(wctx):
		return d.check()
	}
}

// setUp writes the keys file and the cluster's certificates, picks the
// ports, and describes the nodes.
func (d *dcDemo) setUp() error {
	var keys strings.Builder
	for _, c := range append(slices.Clone(dcCallers), dcProbe) {
		b := make([]byte, 16)
		_, _ = rand.Read(b) // never fails
		d.keys[c] = "sbdemo-" + c + "-" + hex.EncodeToString(b)
		fmt.Fprintf(&keys, "%s %s\n", c, d.keys[c])
	}
	keysPath := filepath.Join(d.dir, "keys")
	if err := os.WriteFile(keysPath, []byte(keys.String()), 0o600); err != nil {
		return fmt.Errorf("write keys: %w", err)
	}
	// The cluster's mutual TLS: a CA and each node's key pair, made fresh
	// in the temporary directory, gone with it.
	certs := filepath.Join(d.dir, "certs")
	names := make([]string, dcNodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i+1)
	}
	if err := clustertls.Write(certs, names, nil); err != nil {
		return fmt.Errorf("make the cluster's certificates: %w", err)
	}
	ports, err := freeLoopbackPorts(3 * dcNodes)
	if err != nil {
		return err
	}
	peers := make([]string, dcNodes)
	for i := range peers {
		peers[i] = fmt.Sprintf("127.0.0.1:%d", ports[2*dcNodes+i])
	}
	for i, name := range names {
		api := fmt.Sprintf("127.0.0.1:%d", ports[i])
		d.nodes = append(d.nodes, &dcNode{
			name:    name,
			tag:     hex.EncodeToString(cluster.Tag(name)),
			base:    "http://" + api,
			logPath: filepath.Join(d.dir, name+".log"),
			args: []string{"serve", "--keys", keysPath, "--data", filepath.Join(d.dir, name), "--addr", api,
				"--allow-private", "--log-level", "info",
				"--jobs-per-caller", strconv.Itoa(dcJobsPerCaller), "--workers", strconv.Itoa(dcWorkers),
				"--cluster", dcClusterName, "--node", name,
				"--cluster-addr", fmt.Sprintf("127.0.0.1:%d", ports[dcNodes+i]),
				"--manage-addr", peers[i], "--peers", strings.Join(peers, ","),
				"--cluster-ca", filepath.Join(certs, "ca.crt"),
				"--cluster-cert", filepath.Join(certs, name+".crt"), "--cluster-key", filepath.Join(certs, name+".key")},
		})
	}
	return nil
}

// freeLoopbackPorts returns n distinct ports free on 127.0.0.1 just now.
func freeLoopbackPorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a port: %w", err)
		}
		defer l.Close() // held until all are picked: no port twice
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// startNode starts n's process; its output goes to its log file.
func (d *dcDemo) startNode(n *dcNode) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: open log: %w", n.name, err)
	}
	defer logf.Close() // the child has its own
	cmd := exec.Command(d.o.exe, n.args...)
	cmd.Env = append(os.Environ(), d.o.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	ownChild(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	p := &dcProc{node: n, cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	n.proc = p
	return nil
}

// kill kills n's process with SIGKILL and waits for it to be gone.
func (d *dcDemo) kill(n *dcNode) error {
	p := n.proc
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", n.name, err)
	}
	<-p.exited
	return nil
}

// stopAll stops every process still running, one after the other: SIGTERM,
// then SIGKILL once dcStopLimit has passed, or at once on another
// interrupt (a second Ctrl-C). It says which stopped, by pid. Its error is a node killed at the limit.
func (d *dcDemo) stopAll() (err error) {
	d.mu.Lock()
	procs := slices.Clone(d.procs)
	d.mu.Unlock()
	if len(procs) == 0 {
		return nil
	}
	var running []*dcProc
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			running = append(running, p)
		}
	}
	if len(running) > 0 {
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		fmt.Fprintf(d.out, "\nStopping the nodes one by one (SIGTERM; SIGKILL after %s in all, or at once on Ctrl-C)…\n", dcStopLimit)
		limit := time.NewTimer(dcStopLimit)
		defer limit.Stop()
		var forced []string
		late := false // killed at the limit, not on the user's Ctrl-C
		// One by one: nodes stopped together each see the others vanish,
		// and protoactor's shutdown then retries them for up to ~10s.
		for i, p := range running {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
				continue
			case <-limit.C:
				late = true
			case <-again:
			}
			for _, q := range running[i:] {
				select {
				case <-q.exited:
				default:
					forced = append(forced, q.node.name)
					_ = q.cmd.Process.Kill()
					<-q.exited
				}
			}
			break
		}
		if len(forced) > 0 {
			fmt.Fprintf(d.out, "Killed (SIGKILL) %s: not stopped on SIGTERM.\n", strings.Join(forced, ", "))
		}
		if late {
			err = fmt.Errorf("demo-cluster: %s did not stop within %s of SIGTERM", strings.Join(forced, ", "), dcStopLimit)
		}
	}
	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = fmt.Sprintf("%s pid %d", p.node.name, p.pid)
	}
	fmt.Fprintf(d.out, "Stopped every node process: %s.\n", strings.Join(pids, ", "))
	return err
}

// check returns an error if a node's process has exited without being
// killed by the script.
func (d *dcDemo) check() error {
	for _, n := range d.nodes {
		p := n.proc
		if p == nil || p.killed {
			continue
		}
		select {
		case <-p.exited:
			return fmt.Errorf("demo-cluster: %s exited by itself (%v); its log is %s", n.name, p.err, n.logPath)
		default:
		}
	}
	return nil
}

// exitedUnexpectedly returns a channel closed when a node's process exits
// without being killed by the script, watched until ctx is done.
func (d *dcDemo) exitedUnexpectedly(ctx context.Context) <-chan struct{} {
	c := make(chan struct{})
	var once sync.Once
	for _, n := range d.nodes {
		if p := n.proc; p != nil && !p.killed {
			go func() {
				select {
				case <-p.exited:
					once.Do(func() { close(c) })
				case <-ctx.Done():
				}
			}()
		}
	}
	return c
}

// waitUntil checks cond every dcCheck until it holds; it fails after
// limit, when ctx is done, or when a node exits by itself.
func (d *dcDemo) waitUntil(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	return d.waitEvery(ctx, dcCheck, limit, what, cond)
}

// waitEvery is waitUntil, cond checked every period.
func (d *dcDemo) waitEvery(ctx context.Context, period, limit time.Duration, what string, cond func() bool) error {
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

// pauseFor gives the viewer a moment (o.pause) before the next step.
func (d *dcDemo) pauseFor(ctx context.Context) error {
	if d.o.pause <= 0 {
		return nil
	}
	t := time.NewTimer(d.o.pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// healthy reports whether n answers /healthz 200.
func (d *dcDemo) healthy(ctx context.Context, n *dcNode) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.base+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// form submits one small job to each node, then waits until every node
// answers 200 for every other node's: the cluster has formed.
func (d *dcDemo) form(ctx context.Context) error {
	ids := make([]string, dcNodes)
	for i, n := range d.nodes {
		id, err := d.submit(ctx, dcFormLimit, n, dcProbe, []string{d.fix.url(pageFast, 99, i)}, nil)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	if err := d.waitUntil(ctx, dcFormLimit, "every node to answer for every node's job (the cluster to form)", func() bool {
		for i, id := range ids {
			for k, n := range d.nodes {
				if k != i && d.read(ctx, n, dcProbe, id).code != http.StatusOK {
					return false
				}
			}
		}
		return true
	}); err != nil {
		return err
	}
	d.event("the cluster has formed (%.1fs): every node answers 200 for a job of every other node", time.Since(d.start).Seconds())
	return nil
}

// submitJob submits a job of targets pages from caller to the node i,
// trying again while it is refused (429, 503) for at most limit; then the
// live view follows it, read through every node.
func (d *dcDemo) submitJob(ctx context.Context, limit time.Duration, caller string, i, targets int) (*dcJob, error) {
	k := int(d.labels.Add(1)) - 1
	label := fmt.Sprintf("job%d", k+1)
	urls := make([]string, targets)
	for t := range urls {
		kind := pageSlow
		if t%3 == 2 {
			kind = pageFast
		}
		urls[t] = d.fix.url(kind, k, t)
	}
	n := d.nodes[i]
	refused := func(code int, msg string) {
		d.event("%s %s → %s: %d %q, trying again", label, caller, n.name, code, msg)
	}
	id, err := d.submit(ctx, limit, n, caller, urls, refused)
	if err != nil {
		return nil, err
	}
	holder := -1
	for h, m := range d.nodes {
		if strings.HasPrefix(id, m.tag) {
			holder = h
		}
	}
	if holder != i {
		return nil, fmt.Errorf("demo-cluster: %s submitted to %s has id %s, not of %s's tag %s", label, n.name, id, n.name, n.tag)
	}
	j := &dcJob{label: label, caller: caller, node: holder, id: id}
	d.mu.Lock()
	d.jobs = append(d.jobs, j)
	d.mu.Unlock()
	d.view.add(j)
	d.event("%s %s → %s: 202, id %s… (%s's tag)", label, caller, n.name, id[:12], n.name)
	for h := range d.nodes {
		d.polling.Add(1)
		go func() {
			defer d.polling.Done()
			d.poll(j, h)
		}()
	}
	return j, nil
}

// submit posts a job of urls from caller to n until it is admitted (202),
// for at most limit; refused, if not nil, is told each new refusal.
func (d *dcDemo) submit(ctx context.Context, limit time.Duration, n *dcNode, caller string, urls []string, refused func(code int, msg string)) (string, error) {
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	body, err := json.Marshal(map[string]any{"targets": ts})
	if err != nil {
		return "", err
	}
	var id string
	var last string
	err = d.waitEvery(ctx, dcRetry, limit, caller+"'s job to be admitted by "+n.name, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.base+"/v1/batch", strings.NewReader(string(body)))
		if err != nil {
			return false
		}
		req.Header.Set("Authorization", "Bearer "+d.keys[caller])
		req.Header.Set("Content-Type", "application/json")
		code, out, err := d.do(req)
		if err != nil {
			return false
		}
		var answer struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(out, &answer)
		if code == http.StatusAccepted && answer.ID != "" {
			id = answer.ID
			return true
		}
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			if seen := fmt.Sprint(code, answer.Error); seen != last && refused != nil {
				refused(code, answer.Error)
				last = seen
			}
			return false
		}
		id, last = "", fmt.Sprintf("%d %s", code, answer.Error)
		return false
	})
	if err != nil {
		if last != "" {
			err = fmt.Errorf("%w (last answer: %s)", err, last)
		}
		return "", err
	}
	return id, nil
}

// do sends req and reads the answer.
func (d *dcDemo) do(req *http.Request) (int, []byte, error) {
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// read is what n answers for the job id of caller.
func (d *dcDemo) read(ctx context.Context, n *dcNode, caller, id string) dcAnswer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.base+"/v1/batch/"+id, nil)
	if err != nil {
		return dcAnswer{code: -1}
	}
	req.Header.Set("Authorization", "Bearer "+d.keys[caller])
	code, out, err := d.do(req)
	if err != nil {
		return dcAnswer{code: -1}
	}
	var job struct {
		Status        string `json:"status"`
		Error         string `json:"error"`
		TargetsTotal  int    `json:"targets_total"`
		TargetsDone   int    `json:"targets_done"`
		TargetsFailed int    `json:"targets_failed"`
	}
	_ = json.Unmarshal(out, &job)
	return dcAnswer{code: code, status: job.Status, err: job.Error, done: job.TargetsDone, total: job.TargetsTotal, failed: job.TargetsFailed}
}

// poll reads j through the node i every dcPoll until the polling stops.
func (d *dcDemo) poll(j *dcJob, i int) {
	tick := time.NewTicker(dcPoll)
	defer tick.Stop()
	for {
		j.ask(i)
		a := d.read(d.pollCtx, d.nodes[i], j.caller, j.id)
		if d.pollCtx.Err() != nil {
			return
		}
		j.set(i, a)
		select {
		case <-d.pollCtx.Done():
			return
		case <-tick.C:
		}
	}
}

// stopPolling stops the pollers and the view's refresh, and waits for them.
func (d *dcDemo) stopPolling() {
	d.stopPoll()
	d.polling.Wait()
}

// render refreshes the view every dcRefresh until the polling stops.
func (d *dcDemo) render() {
	defer d.polling.Done()
	tick := time.NewTicker(dcRefresh)
	defer tick.Stop()
	view := d.view
	for {
		select {
		case <-d.pollCtx.Done():
			view.refresh()
			return
		case <-tick.C:
			view.refresh()
		}
	}
}

// event shows a step of the script.
func (d *dcDemo) event(format string, args ...any) {
	d.view.event(fmt.Sprintf(format, args...))
}

func (d *dcDemo) allJobs() []*dcJob {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.jobs)
}

// survivorNames is "n1 and n2".
func (d *dcDemo) survivorNames() string {
	var names []string
	for i, n := range d.nodes {
		if i != dcVictim {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, " and ")
}

// survivorsDone is how many targets the jobs of js not on the victim have
// done, as last read.
func (d *dcDemo) survivorsDone(js []*dcJob) int {
	sum := 0
	for _, j := range js {
		if j.node != dcVictim {
			last, _ := j.state()
			sum += last.done
		}
	}
	return sum
}

// callersOf returns the callers of js, each once, in order.
func callersOf(js []*dcJob) []string {
	var cs []string
	for _, j := range js {
		if !slices.Contains(cs, j.caller) {
			cs = append(cs, j.caller)
		}
	}
	return cs
}

// jobLabels is "job3 and job5".
func jobLabels(js []*dcJob) string {
	ls := make([]string, len(js))
	for i, j := range js {
		ls[i] = j.label
	}
	return strings.Join(ls, " and ")
}

// dcAdmitted is a job submitted after the kill: when it was admitted.
type dcAdmitted struct {
	job *dcJob
	at  time.Time
	err error
}

// summary prints every job, the jobs per node, and what the kill cost.
func (d *dcDemo) summary(victim *dcNode, killed, unavailable time.Time, again []dcAdmitted, restarted, readable time.Time) {
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
		fmt.Fprintf(d.out, "  %s (tag %s): %d %s: %s\n", n.name, n.tag, total, plural(total, "job", "jobs"), strings.Join(parts, ", "))
	}
	fmt.Fprintf(d.out, "\nWhat killing %s cost (the automanaged provider: each node polls the others every 2 s):\n", victim.name)
	fmt.Fprintf(d.out, "  kill → %s answer 503 \"node unavailable\" for its jobs: %.1fs\n", d.survivorNames(), unavailable.Sub(killed).Seconds())
	for _, a := range again {
		fmt.Fprintf(d.out, "  kill → %s, whose job on %s was live, admitted again on %s: %.1fs\n", a.job.caller, victim.name, d.nodes[a.job.node].name, a.at.Sub(killed).Seconds())
	}
	fmt.Fprintf(d.out, "  restart → its jobs readable from every node, failed \"restart\" (restart reaping): %.1fs\n", readable.Sub(restarted).Seconds())
	fmt.Fprintf(d.out, "  nothing of %s's was lost: every job they hold ended done, every target fetched\n", d.survivorNames())
}

// dcView shows the jobs and the script's steps as they happen. Its methods
// are safe for concurrent use.
type dcView interface {
	add(j *dcJob)
	event(msg string)
	refresh()
	finish(failed bool)
}

// dcLine is a job's line in the live view: its holder, progress, status,
// and each node's answer for it.
func dcLine(nodes []*dcNode, j *dcJob) string {
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

// dcLines prints a line whenever a job's changes, and each step: for logs
// and pipes.
type dcLines struct {
	w     io.Writer
	start time.Time
	nodes []*dcNode

	mu   sync.Mutex
	jobs []*dcJob
	last map[*dcJob]string
}

func (v *dcLines) add(j *dcJob) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.jobs = append(v.jobs, j)
}

func (v *dcLines) event(msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.w, "%5.1fs  ▶ %s\n", time.Since(v.start).Seconds(), msg)
}

func (v *dcLines) refresh() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, j := range v.jobs {
		line := dcLine(v.nodes, j)
		if line == v.last[j] {
			continue
		}
		v.last[j] = line
		fmt.Fprintf(v.w, "%5.1fs    %s\n", time.Since(v.start).Seconds(), strings.TrimRight(line, " "))
	}
}

func (v *dcLines) finish(bool) {}

// dcBars shows a live bar per job on a terminal, the steps printed above.
type dcBars struct {
	start time.Time
	nodes []*dcNode
	p     *mpb.Progress

	mu   sync.Mutex
	jobs []*dcJob
	bars []*mpb.Bar
	done atomic.Bool
}

func newDCBars(w io.Writer, start time.Time, nodes []*dcNode) *dcBars {
	return &dcBars{start: start, nodes: nodes, p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(20), mpb.WithRefreshRate(dcRefresh))}
}

func (v *dcBars) add(j *dcJob) {
	// Total 0: the bar never completes by itself (its job's answers go on
	// changing after it ends); finish ends it.
	bar := v.p.AddBar(0,
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			return fmt.Sprintf("%-5s %-5s @%s", j.label, j.caller, v.nodes[j.node].name)
		}, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			line := dcLine(v.nodes, j)
			_, rest, _ := strings.Cut(line, "@"+v.nodes[j.node].name+" ")
			return rest
		})),
	)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.jobs = append(v.jobs, j)
	v.bars = append(v.bars, bar)
}

func (v *dcBars) event(msg string) {
	if v.done.Load() {
		return
	}
	_, _ = fmt.Fprintf(v.p, "%5.1fs  ▶ %s\n", time.Since(v.start).Seconds(), msg)
}

func (v *dcBars) refresh() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, j := range v.jobs {
		last, _ := j.state()
		if last.total > 0 {
			v.bars[i].SetTotal(int64(last.total), false)
			v.bars[i].SetCurrent(int64(last.done))
		}
	}
}

// finish stops drawing; failed, it removes the bars from the screen.
func (v *dcBars) finish(failed bool) {
	v.refresh()
	v.done.Store(true)
	v.mu.Lock()
	for _, b := range v.bars {
		b.Abort(failed)
	}
	v.mu.Unlock()
	v.p.Wait()
}
