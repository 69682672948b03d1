package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// The flags the harness sets on every node, and why:
//   - --jobs-per-caller 2: small, so that the clients reach it;
//   - --retry-for 3s and --fetch-timeout 2s: a job whose pages its node
//     cannot reach fails within seconds, not minutes;
//   - --allow-private: the fixture site is at the hub's 10.x address;
//   - the fixture's pages take pageDelay each, so that jobs are live for
//     a while.
const (
	jobsPerCaller = 2
	retryFor      = 3 * time.Second
	fetchTimeout  = 2 * time.Second
	pageDelay     = 200 * time.Millisecond
	pagesPerJob   = 2
	// jobWork bounds a job's life without a fault: each page's fetch at
	// most fetchTimeout, and a wait for a worker.
	jobWork = pagesPerJob*fetchTimeout + 3*time.Second
	// viewLag is how late the observer may record a node's members: the
	// node asks new members who they are (at most 2 s) before it logs.
	viewLag = 2500 * time.Millisecond
	// opTimeout bounds one client request.
	opTimeout = 5 * time.Second
	// The phases of a fault's run: the clients run before the fault,
	// during it and after the heal for these long.
	before = 2 * time.Second
	after  = 4 * time.Second
	// during is each fault's length: longer than the membership's
	// timeout (a poll every 2 s, answered within 2 s).
	during = 5 * time.Second
	// healBound is how long after the heal every job acknowledged before
	// it must be readable through every node: the issue's "within
	// seconds", with room for a loaded machine.
	healBound = 20 * time.Second
)

var callers = []string{"c1", "c2", "c3", "c4"}

// keyOf is caller c's API key.
func keyOf(c string) string { return c + "-f4u1t5-k3y-20261201" }

// harnessSetup is the binary and certificates, made once per test binary.
var harnessSetup struct {
	once  sync.Once
	dir   string
	bin   string
	certs string
	err   error
}

// requireHarness skips unless the tier faults is asked for and the test
// runs as root with ip and iptables; then it builds siftbatch and the
// cluster's certificates (once), and returns the binary and the
// certificates' directory.
func requireHarness(t *testing.T) (bin, certs string) {
	t.Helper()
	testkit.RequireTier(t, "faults")
	if os.Geteuid() != 0 {
		t.Skip("faults: network namespaces need root")
	}
	for _, tool := range []string{"ip", "iptables", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("faults: %s not found (apt-get install -y iproute2 iptables)", tool)
		}
	}
	s := &harnessSetup
	s.once.Do(func() {
		removeStale()
		s.dir, s.err = testkit.RunDir("siftbatch-faults")
		if s.err != nil {
			return
		}
		s.bin = filepath.Join(s.dir, "siftbatch")
		if out, err := exec.Command("go", "build", "-o", s.bin, "github.com/sift/batch/cmd/siftbatch").CombinedOutput(); err != nil {
			s.err = fmt.Errorf("go build: %v: %s", err, out)
			return
		}
		s.certs = filepath.Join(s.dir, "certs")
		hosts := []string{harnessHost}
		for i := 1; i <= 3; i++ {
			hosts = append(hosts, nodeIP(i))
		}
		if out, err := exec.Command(s.bin, "cluster-certs", "--dir", s.certs, "--nodes", "n1,n2,n3", "--hosts", strings.Join(hosts, ",")).CombinedOutput(); err != nil {
			s.err = fmt.Errorf("cluster-certs: %v: %s", err, out)
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.bin, s.certs
}

// removeStale deletes the namespaces of harness runs whose process is
// gone (a test binary killed before its cleanups ran).
func removeStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && syscall.Kill(n, 0) != nil {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	}
}

// node is one serve process in its namespace.
type node struct {
	name   string
	i      int
	cmd    *exec.Cmd
	log    *testkit.SyncBuffer
	exited chan struct{}
}

// base is the node's API.
func (n *node) base() string { return fmt.Sprintf("http://%s:%d", nodeIP(n.i), apiPort) }

// rig is one test's cluster, its clients' HTTP client, and its records.
type rig struct {
	t       *testing.T
	nw      *network
	nodes   []*node
	proxies []*delayProxy // with the delay proxies only
	client  *http.Client
	site    string // the fixture's base URL
	hist    History
	views   Views
	names   map[string]string // a member's address → its node's name

	mu      sync.Mutex
	ready   map[string]bool   // the lanes (caller/node) whose submit was answered 202 or 429
	acked   map[string]string // job id → its caller
	order   []string          // the acknowledged ids, in order
	seq     int
	pairSeq int
}

// testNumber numbers the rigs of this process: their namespaces' names.
var testNumber struct {
	mu sync.Mutex
	n  int
}

// newRig starts three nodes, each in its namespace, and waits until each
// sees all three. With proxied, the nodes' cluster traffic goes through
// the harness's delay proxies (each node advertises its proxy).
func newRig(t *testing.T, proxied bool) *rig {
	bin, certs := requireHarness(t)
	testNumber.mu.Lock()
	testNumber.n++
	id := testNumber.n
	testNumber.mu.Unlock()
	r := &rig{t: t, nw: newNetwork(t, id, 3), names: map[string]string{}, acked: map[string]string{}, ready: map[string]bool{}}

	dir := t.TempDir()   // removed after the nodes have stopped
	t.Cleanup(r.stopAll) // before the namespaces are deleted
	// The fixture site, in the hub: each page takes pageDelay.
	siteLn := r.nw.listen(0)
	site := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-time.After(pageDelay):
		case <-req.Context().Done():
			return
		}
		fmt.Fprintf(w, "page %s", req.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = site.Serve(siteLn) }()
	t.Cleanup(func() { _ = site.Close() })
	r.site = "http://" + siteLn.Addr().String()

	transport := &http.Transport{DialContext: r.nw.dial, MaxIdleConnsPerHost: 8}
	t.Cleanup(transport.CloseIdleConnections)
	r.client = &http.Client{Transport: transport, Timeout: opTimeout}

	keys := filepath.Join(dir, "keys")
	var kb strings.Builder
	for _, c := range callers {
		fmt.Fprintf(&kb, "%s %s\n", c, keyOf(c))
	}
	if err := os.WriteFile(keys, []byte(kb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var peers []string
	for i := 1; i <= 3; i++ {
		peers = append(peers, fmt.Sprintf("%s:%d", nodeIP(i), managePort))
	}
	// Every address first: the nodes' observers read names from the start.
	advertised := make([]string, 4)
	for i := 1; i <= 3; i++ {
		advertised[i] = fmt.Sprintf("%s:%d", nodeIP(i), clusterPort)
		if proxied {
			ln := r.nw.listen(clusterPort + 20 + i)
			p := newDelayProxy(ln, advertised[i], r.nw.dial)
			r.proxies = append(r.proxies, p)
			t.Cleanup(p.close)
			advertised[i] = ln.Addr().String()
		}
		r.names[advertised[i]] = fmt.Sprintf("n%d", i)
	}
	for i := 1; i <= 3; i++ {
		name, advertise := fmt.Sprintf("n%d", i), advertised[i]
		args := []string{"netns", "exec", r.nw.nodes[i-1], bin, "serve",
			"--keys", keys, "--data", filepath.Join(dir, name), "--addr", fmt.Sprintf("%s:%d", nodeIP(i), apiPort),
			"--allow-private", "--jobs-per-caller", strconv.Itoa(jobsPerCaller),
			"--retry-for", retryFor.String(), "--fetch-timeout", fetchTimeout.String(),
			"--cluster", "faults", "--node", name,
			"--cluster-addr", fmt.Sprintf("%s:%d", nodeIP(i), clusterPort), "--advertise-addr", advertise,
			"--manage-addr", peers[i-1], "--peers", strings.Join(peers, ","),
			"--cluster-ca", filepath.Join(certs, "ca.crt"),
			"--cluster-cert", filepath.Join(certs, name+".crt"), "--cluster-key", filepath.Join(certs, name+".key")}
		r.nodes = append(r.nodes, r.start(name, i, args))
	}
	// Formed: every node has logged all three as its members.
	started := time.Now()
	testkit.WaitFor(t, "the cluster to form (every node's members: n1,n2,n3)", r.whole)
	t.Logf("the cluster formed in %s", time.Since(started).Round(time.Millisecond))
	return r
}

// start starts node name (number i) with `ip args`; stopAll stops it.
func (r *rig) start(name string, i int, args []string) *node {
	t := r.t
	n := &node{name: name, i: i, log: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	n.cmd = exec.Command("ip", args...)
	n.cmd.Stdout = io.Discard
	pr, pw := io.Pipe()
	n.cmd.Stderr = pw
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // ip execs serve: no serve outlives the test binary
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.observe(name, time.Now(), line)
			fmt.Fprintln(n.log, line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = n.cmd.Wait()
		pw.Close()
		<-scanned
		close(n.exited)
	}()
	return n
}

// stopAll stops every node at once (SIGCONT, SIGTERM, then SIGKILL
// after testkit.Deadline) and waits for them; it logs how long each took
// to exit, and a failed test's logs.
func (r *rig) stopAll() {
	var wg sync.WaitGroup
	took := make([]time.Duration, len(r.nodes))
	for k, n := range r.nodes {
		wg.Go(func() {
			start := time.Now()
			_ = n.cmd.Process.Signal(syscall.SIGCONT)
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.exited:
			case <-time.After(testkit.Deadline):
				_ = n.cmd.Process.Kill()
				<-n.exited
				r.t.Errorf("%s did not stop on SIGTERM; killed", n.name)
			}
			took[k] = time.Since(start)
		})
	}
	wg.Wait()
	var parts []string
	for k, n := range r.nodes {
		parts = append(parts, fmt.Sprintf("%s %s", n.name, took[k].Round(10*time.Millisecond)))
		if r.t.Failed() {
			r.t.Logf("%s's log:\n%s", n.name, n.log.String())
		}
	}
	r.t.Logf("SIGTERM → exit: %s", strings.Join(parts, ", "))
}

// observe records a node's members from its log line "cluster members".
func (r *rig) observe(name string, at time.Time, line string) {
	if !strings.Contains(line, `msg="cluster members"`) {
		return
	}
	_, list, ok := strings.Cut(line, " nodes=")
	if !ok {
		return
	}
	list, _, _ = strings.Cut(list, " ")
	if strings.HasPrefix(list, `"`) {
		if u, err := strconv.Unquote(list); err == nil {
			list = u
		}
	}
	var members []string
	for _, m := range strings.Split(list, ",") {
		if m == "" {
			continue
		}
		if n, ok := r.names[m]; ok {
			m = n
		}
		members = append(members, m)
	}
	r.views.Add(name, at, members)
}

// whole reports whether each node's last view holds the three nodes.
func (r *rig) whole() bool {
	last := map[string]string{}
	for _, v := range r.views.All() {
		last[v.Node] = strings.Join(v.Members, ",")
	}
	for _, n := range r.nodes {
		if last[n.name] != "n1,n2,n3" {
			return false
		}
	}
	return true
}

// do makes one request of node n for caller c, recording op (its Invoke,
// Complete and Code, and what the answer says).
func (r *rig) do(n *node, c, method, path, body string, op Op) (Op, []byte) {
	op.Client, op.Node = c, n.name
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, n.base()+path, strings.NewReader(body))
	if err != nil { // the clients' goroutines call do: no Fatal
		r.t.Errorf("%s %s: %v", method, path, err)
		return op, nil
	}
	req.Header.Set("Authorization", "Bearer "+keyOf(c))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	op.Invoke = time.Now()
	resp, err := r.client.Do(req)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			op.Code = resp.StatusCode
		}
	}
	op.Complete = time.Now()
	if op.Code == http.StatusOK || op.Code == http.StatusAccepted {
		var ans struct {
			ID      string `json:"id"`
			Reused  bool   `json:"reused"`
			Status  string `json:"status"`
			Targets []struct {
				Status string `json:"status"`
			} `json:"targets"`
		}
		if json.Unmarshal(data, &ans) == nil {
			if op.Kind == Submit {
				op.ID, op.Reused, op.Status = ans.ID, ans.Reused, "queued"
			} else if op.Kind != List && op.Kind != Cancel {
				op.Status = ans.Status
				for i, tg := range ans.Targets {
					if tg.Status == "done" {
						op.Done = append(op.Done, i)
					}
				}
			}
		}
	}
	r.hist.Add(op)
	return op, data
}

// submit posts a job of new pages for c on n; pair numbers the two
// submits of a concurrent pair (0: alone), whose targets are the same.
func (r *rig) submit(n *node, c, targets string, pair int) Op {
	var tb strings.Builder
	tb.WriteString(`{"targets":[`)
	for j := range pagesPerJob {
		if j > 0 {
			tb.WriteString(",")
		}
		fmt.Fprintf(&tb, `{"url":%q}`, fmt.Sprintf("%s/p/%s/%d", r.site, targets, j))
	}
	tb.WriteString("]}")
	op, _ := r.do(n, c, http.MethodPost, "/v1/batch", tb.String(), Op{Kind: Submit, Targets: targets, Pair: pair})
	if op.Code == http.StatusAccepted && op.ID != "" {
		r.mu.Lock()
		if _, ok := r.acked[op.ID]; !ok {
			r.acked[op.ID] = c
			r.order = append(r.order, op.ID)
		}
		r.mu.Unlock()
	}
	return op
}

// ownJob returns one of c's acknowledged jobs at random; "" if none.
func (r *rig) ownJob(c string, rnd *rand.Rand) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var mine []string
	for _, id := range r.order {
		if r.acked[id] == c {
			mine = append(mine, id)
		}
	}
	if len(mine) == 0 {
		return ""
	}
	// Mostly the recent ones: they are the live ones.
	return mine[len(mine)-1-min(len(mine)-1, rnd.IntN(4))]
}

// runClient runs caller c's operations against node n until stop: each
// tick one operation (a submit, a pair of concurrent first submits on n
// and the next node, a read, a wait, a list, a cancel). Each caller has
// one such lane per node, so that a node that does not answer holds up
// only its own lane.
func (r *rig) runClient(c string, n *node, seed uint64, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	rnd := rand.New(rand.NewPCG(seed, 25))
	tick := time.NewTicker(150 * time.Millisecond) // the lane's pace
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		r.mu.Lock()
		r.seq++
		targets := fmt.Sprintf("%s-%d", c, r.seq)
		r.mu.Unlock()
		switch p := rnd.IntN(100); {
		case p < 30:
			if op := r.submit(n, c, targets, 0); op.Code == http.StatusAccepted || op.Code == http.StatusTooManyRequests {
				r.mu.Lock()
				r.ready[c+"/"+n.name] = true
				r.mu.Unlock()
			}
		case p < 35:
			r.mu.Lock()
			r.pairSeq++
			pair := r.pairSeq
			r.mu.Unlock()
			other := r.nodes[n.i%len(r.nodes)]
			var both sync.WaitGroup
			both.Add(2)
			go func() { defer both.Done(); r.submit(n, c, targets, pair) }()
			go func() { defer both.Done(); r.submit(other, c, targets, pair) }()
			both.Wait()
		case p < 65:
			if id := r.ownJob(c, rnd); id != "" {
				r.do(n, c, http.MethodGet, "/v1/batch/"+id+"?results=1", "", Op{Kind: Read, ID: id})
			}
		case p < 80:
			if id := r.ownJob(c, rnd); id != "" {
				r.do(n, c, http.MethodGet, "/v1/batch/"+id+"?wait=1s", "", Op{Kind: Wait, ID: id})
			}
		case p < 90:
			r.do(n, c, http.MethodGet, "/v1/batch?limit=20", "", Op{Kind: List})
		default:
			if id := r.ownJob(c, rnd); id != "" {
				r.do(n, c, http.MethodDelete, "/v1/batch/"+id, "", Op{Kind: Cancel, ID: id})
			}
		}
	}
}

// acknowledged returns the ids acknowledged so far.
func (r *rig) acknowledged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// sweep reads each of ids through every node (kind Read during the run,
// Final after it) until each has answered 200 (and, with ended, with the
// job ended), or until the deadline; it returns when the last did.
func (r *rig) sweep(ids []string, kind Kind, ended bool, deadline time.Time) (time.Time, bool) {
	type key struct {
		id string
		n  *node
	}
	left := map[key]bool{}
	for _, id := range ids {
		for _, n := range r.nodes {
			left[key{id, n}] = true
		}
	}
	var last time.Time
	for len(left) > 0 && time.Now().Before(deadline) {
		for k := range left {
			r.mu.Lock()
			c := r.acked[k.id]
			r.mu.Unlock()
			op, _ := r.do(k.n, c, http.MethodGet, "/v1/batch/"+k.id+"?results=1", "", Op{Kind: kind, ID: k.id})
			if op.Code == http.StatusOK && (!ended || !live(op.Status)) {
				delete(left, k)
				last = op.Complete
			}
		}
		if len(left) > 0 {
			<-time.After(250 * time.Millisecond) // the sweep's pace
		}
	}
	return last, len(left) == 0
}

// fault is one fault of the harness: how it is injected and healed, and
// how long it lasts.
type fault struct {
	name    string
	proxied bool // the nodes' cluster traffic through the delay proxies
	during  time.Duration
	inject  func(r *rig)
	heal    func(r *rig)
}

// figures are one run's measures (docs/CLUSTER.md, Faults tested).
type figures struct {
	first503   time.Duration // injection → the first 503
	readmit    time.Duration // injection → a caller refused since it admitted again
	readable   time.Duration // heal → every job acknowledged before it read 200 on every node
	opsBefore  float64       // answered operations per second before the fault
	opsDuring  float64       // … during it
	violations []Violation
}

// runFault runs f on a fresh cluster with the clients, checks the
// history, and reports the figures.
func runFault(t *testing.T, f fault) {
	r := newRig(t, f.proxied)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano())
	for i, c := range callers {
		for _, n := range r.nodes {
			wg.Add(1)
			go r.runClient(c, n, seed+uint64(i*10+n.i), stop, &wg)
		}
	}
	stopped := false
	stopClients := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopClients)

	// Warm: every lane's submit answered (its caller's grain active and
	// reached); the first admissions after the cluster forms take seconds.
	warming := time.Now()
	testkit.WaitFor(t, "every caller's submit on every node answered 202 or 429", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.ready) == len(callers)*len(r.nodes)
	})
	t.Logf("warm after %s", time.Since(warming).Round(time.Millisecond))
	start := time.Now()
	<-time.After(before) // the workload's phase before the fault
	injected := time.Now()
	f.inject(r)
	t.Logf("%s injected after %s of load", f.name, injected.Sub(start).Round(time.Millisecond))
	<-time.After(f.during) // the fault's length
	healing := time.Now()
	f.heal(r)
	healed := time.Now()
	t.Logf("%s healed after %s", f.name, healed.Sub(injected).Round(time.Millisecond))

	// From the heal: every job acknowledged so far, read through every node.
	type sweepResult struct {
		last time.Time
		ok   bool
	}
	swept := make(chan sweepResult, 1)
	preHeal := r.acknowledged()
	go func() {
		last, ok := r.sweep(preHeal, Read, false, healed.Add(healBound))
		swept <- sweepResult{last, ok}
	}()
	<-time.After(after) // the workload's phase after the heal
	stopClients()
	sw := <-swept
	// The final reads: every job, through every node, until it has ended
	// (not long if the cluster did not heal: the checker has its answer).
	finalBy := later(time.Now(), healed.Add(retryFor+jobWork)).Add(10 * time.Second)
	if !sw.ok {
		finalBy = time.Now().Add(2 * time.Second)
	}
	r.sweep(r.acknowledged(), Final, true, finalBy)

	ops := r.hist.Ops()
	r.dump(f.name, ops)
	m := Model{Nodes: []string{"n1", "n2", "n3"}, Cap: jobsPerCaller, RetryFor: retryFor, JobWork: jobWork, Healed: healed, Lag: viewLag}
	fig := figures{violations: Check(ops, r.views.All(), m), first503: -1, readmit: -1, readable: -1}
	if sw.ok {
		fig.readable = sw.last.Sub(healed)
	}
	refused := map[string]bool{}
	var nBefore, nDuring int
	during := map[int]int{} // the answers during the fault, by status (0: none)
	for _, op := range ops {
		if op.Kind == Final {
			continue
		}
		if op.Code == 0 {
			if !op.Invoke.Before(injected) && op.Invoke.Before(healing) {
				during[0]++
			}
			continue
		}
		switch {
		case op.Complete.Before(injected) && !op.Complete.Before(injected.Add(-before)):
			nBefore++
		case !op.Complete.Before(injected) && op.Complete.Before(healing):
			nDuring++
		}
		if !op.Invoke.Before(injected) && op.Invoke.Before(healing) {
			during[op.Code]++
		}
		if op.Invoke.Before(injected) {
			continue
		}
		if op.Code == http.StatusServiceUnavailable && fig.first503 < 0 {
			fig.first503 = op.Complete.Sub(injected)
		}
		if op.Kind == Submit && (op.Code == http.StatusTooManyRequests || op.Code == http.StatusServiceUnavailable) {
			refused[op.Client] = true
		}
		if op.Kind == Submit && op.Code == http.StatusAccepted && refused[op.Client] && fig.readmit < 0 {
			fig.readmit = op.Complete.Sub(injected)
		}
	}
	fig.opsBefore = float64(nBefore) / before.Seconds()
	fig.opsDuring = float64(nDuring) / healing.Sub(injected).Seconds()
	counts := map[int]int{}
	for _, op := range ops {
		counts[op.Code]++
	}
	t.Logf("FIGURES fault=%q ops=%d answers=%v jobs=%d first503=%s readmit=%s heal-to-readable=%s ops/s-before=%.1f ops/s-during=%.1f answers-during=%v violations=%d",
		f.name, len(ops), counts, len(r.acknowledged()), dur(fig.first503), dur(fig.readmit), dur(fig.readable), fig.opsBefore, fig.opsDuring, during, len(fig.violations))
	// Each rule's count and its first few violations.
	if !sw.ok {
		t.Errorf("%s: the jobs acknowledged before the heal were not all readable through every node within %s of it", f.name, healBound)
	}
	byRule := map[string][]Violation{}
	var rules []string
	for _, v := range fig.violations {
		if byRule[v.Rule] == nil {
			rules = append(rules, v.Rule)
		}
		byRule[v.Rule] = append(byRule[v.Rule], v)
	}
	for _, rule := range rules {
		vs := byRule[rule]
		t.Errorf("checker: %d violation(s) of %q", len(vs), rule)
		for _, v := range vs[:min(len(vs), 5)] {
			t.Errorf("checker: %s", v)
		}
	}
}

// dur prints a figure; "none" for one that did not happen.
func dur(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(10 * time.Millisecond).String()
}

// dump writes the history and the views as JSON lines to the directory
// named by $FAULTS_HISTORY, if set: one file per fault, to read a
// finding again.
func (r *rig) dump(name string, ops []Op) {
	dir := os.Getenv("FAULTS_HISTORY")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".jsonl"))
	if err != nil {
		r.t.Error(err)
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, v := range r.views.All() {
		_ = enc.Encode(map[string]any{"view": v})
	}
	for _, op := range ops {
		_ = enc.Encode(op)
	}
}
