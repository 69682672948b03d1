package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// Keys of the kill test's callers; long and unique, so that a search of the
// logs for them cannot miss or hit by chance.
const (
	deathAnn = "ann-d3a7h-5c1e9b0f27" // her only live job is on the node killed
	deathBen = "ben-d3a7h-7a4f2d8e61" // a job held running on n1
	deathCat = "cat-d3a7h-2e8b6f0c93" // a job held running on n2
	deathDan = "dan-d3a7h-9f0c3a5b18" // a finished job on every node
)

// killLimit is how long after a node's kill -9 the survivors have to go on
// with their jobs, admit its callers again and answer its jobs 503: the
// issue's requirement (a functional bound, not a performance figure).
const killLimit = 10 * time.Second

// killFigures are the times TestServe_ClusterKillRestart and
// BenchmarkServe_ClusterKillReadmit measure.
type killFigures struct {
	first503 time.Duration // kill → the first 503 for one of its jobs on a survivor
	readmit  time.Duration // kill → its caller's POST admitted on a survivor
	window   time.Duration // kill → every check of the survivors passed
	longest  time.Duration // the longest API call between the kill and the end of window
	readable time.Duration // restart → its jobs readable through every node
}

// TestServe_ClusterKillRestart: three `serve --cluster` processes with one
// live job per caller, jobs of several callers on each (some held running);
// one is killed (SIGKILL). Within killLimit, on the two others: their own
// jobs run to their end, the caller whose only live job was on the dead node
// is admitted again, the dead node's jobs answer 503 "node unavailable" with
// Retry-After to every method, the list names it, and every job stored on
// them is whole. Then it is restarted on its directory: once a member again
// its live job reads failed "restart" through every node, its finished job
// keeps its results, an idempotent resubmit of that job on another node
// returns it, and its caller may submit again. No log line holds a key, or
// the host or path of a fetched page.
func TestServe_ClusterKillRestart(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	f := killRestart(t, false)
	t.Logf("kill → first 503 %s, → its caller admitted again %s, → every check passed %s; the longest API call meanwhile %s; restart → its jobs readable through every node %s",
		f.first503.Round(time.Millisecond), f.readmit.Round(time.Millisecond), f.window.Round(time.Millisecond),
		f.longest.Round(time.Millisecond), f.readable.Round(time.Millisecond))
}

// BenchmarkServe_ClusterKillReadmit measures, over whole runs of
// TestServe_ClusterKillRestart's scenario, the time from a node's kill -9 to
// the first 503 for its jobs and to its caller's admission on a survivor,
// the longest API call in between, and the time from its restart to its
// jobs being readable through every node (each run ~10 s). The kill comes
// at a random point of the automanaged provider's 2 s poll (the scenario
// alone would put it at about the same point each run). It reports the
// means, and logs each run's figures:
//
//	go test -run '^$' -bench BenchmarkServe_ClusterKillReadmit -benchtime 5x -v ./cmd/siftbatch
func BenchmarkServe_ClusterKillReadmit(b *testing.B) {
	var sum killFigures
	for range b.N {
		f := killRestart(b, true)
		b.Logf("kill → 503 %s, → readmitted %s; longest call %s; restart → readable %s",
			f.first503.Round(time.Millisecond), f.readmit.Round(time.Millisecond), f.longest.Round(time.Millisecond), f.readable.Round(time.Millisecond))
		sum.first503 += f.first503
		sum.readmit += f.readmit
		sum.longest = max(sum.longest, f.longest)
		sum.readable += f.readable
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(sum.first503.Seconds()/n, "s-to-503")
	b.ReportMetric(sum.readmit.Seconds()/n, "s-to-readmit")
	b.ReportMetric(sum.longest.Seconds(), "s-longest-call")
	b.ReportMetric(sum.readable.Seconds()/n, "s-restart-to-readable")
}

// deathRig makes the API calls of killRestart, timing them.
type deathRig struct {
	tb     testing.TB
	client *http.Client
	page   func(string) string

	mu      sync.Mutex
	timing  bool          // between the kill and the end of the window
	longest time.Duration // the longest call while timing
}

// call does one API call; an error only if it got no answer.
func (r *deathRig) call(n *clusterNode, method, path, key, body string) (response, error) {
	req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s on %s: %w", method, path, n.name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	r.mu.Lock()
	if r.timing {
		r.longest = max(r.longest, took)
	}
	r.mu.Unlock()
	if err != nil {
		return response{}, fmt.Errorf("%s %s on %s: %w", method, path, n.name, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}, nil
}

// must is call, failing the test if no answer came.
func (r *deathRig) must(n *clusterNode, method, path, key, body string) response {
	r.tb.Helper()
	res, err := r.call(n, method, path, key, body)
	if err != nil {
		r.tb.Fatal(err)
	}
	return res
}

// submit posts a job of pages for key on n, asking again while the
// cluster cannot count the caller's jobs (503 "admission unavailable": the
// members change) or counts one that has just ended (429: a job's end
// reaches its caller's grain asynchronously); it fails on anything but
// 202.
func (r *deathRig) submit(n *clusterNode, key string, pages ...string) (id string, reused bool) {
	r.tb.Helper()
	urls := make([]string, len(pages))
	for i, p := range pages {
		urls[i] = r.page(p)
	}
	var res response
	err := poll(20*time.Second, func() (bool, error) {
		var err error
		res, err = r.call(n, http.MethodPost, "/v1/batch", key, targetsBody(urls...))
		return err != nil || res.code != http.StatusServiceUnavailable && res.code != http.StatusTooManyRequests, err
	})
	if err != nil || res.code != http.StatusAccepted {
		r.tb.Fatalf("submit on %s: %v %d %s", n.name, err, res.code, res.body)
	}
	var out struct {
		ID     string `json:"id"`
		Reused bool   `json:"reused"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		r.tb.Fatal(err)
	}
	return out.ID, out.Reused
}

// job reads job id through n (with its results), failing unless 200.
func (r *deathRig) job(n *clusterNode, key, id string) deathJob {
	r.tb.Helper()
	res := r.must(n, http.MethodGet, "/v1/batch/"+id+"?results=1", key, "")
	if res.code != http.StatusOK {
		r.tb.Fatalf("job %s through %s: %d %s", id, n.name, res.code, res.body)
	}
	var j deathJob
	if err := json.Unmarshal(res.body, &j); err != nil {
		r.tb.Fatal(err)
	}
	return j
}

// deathJob is the part of a job's answer killRestart checks.
type deathJob struct {
	Status  string `json:"status"`
	Error   string `json:"error"`
	Done    int    `json:"targets_done"`
	Targets []struct {
		Status string `json:"status"`
		Result *struct {
			Content string `json:"content"`
		} `json:"result"`
	} `json:"targets"`
}

// whole reports whether j is done with every target's content stored.
func (j deathJob) whole(n int) bool {
	if j.Status != "done" || len(j.Targets) != n {
		return false
	}
	for _, t := range j.Targets {
		if t.Status != "done" || t.Result == nil || !strings.HasPrefix(t.Result.Content, "page /p-") {
			return false
		}
	}
	return true
}

// list returns key's job ids and unavailable nodes through n.
func (r *deathRig) list(n *clusterNode, key string) (ids, unavailable []string, err error) {
	res, err := r.call(n, http.MethodGet, "/v1/batch?limit=100", key, "")
	if err != nil {
		return nil, nil, err
	}
	if res.code != http.StatusOK {
		return nil, nil, fmt.Errorf("list on %s: %d %s", n.name, res.code, res.body)
	}
	var out struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
		Unavailable []string `json:"unavailable_nodes"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return nil, nil, err
	}
	for _, j := range out.Jobs {
		ids = append(ids, j.ID)
	}
	return ids, out.Unavailable, nil
}

// poll calls cond every 20 ms until it holds or fails, at most limit.
func poll(limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		<-tick.C
	}
}

// grainOn returns a caller name whose grain protoactor's disthash places
// on the member at addr, of the members at ports on 127.0.0.1 (its
// rendezvous hash of the caller's name and each member's address).
func grainOn(tb testing.TB, addr string, ports []int) string {
	tb.Helper()
	var members pacluster.Members
	for i, p := range ports {
		members = append(members, &pacluster.Member{Host: "127.0.0.1", Port: int32(p), Id: fmt.Sprint(i), Kinds: []string{callerKind}})
	}
	rdv := pacluster.NewRendezvous()
	rdv.UpdateMembers(members)
	for i := range 100 {
		name := fmt.Sprintf("ann%d", i)
		if rdv.GetByClusterIdentity(&pacluster.ClusterIdentity{Identity: name, Kind: callerKind}) == addr {
			return name
		}
	}
	tb.Fatalf("no caller's grain on %s", addr)
	return ""
}

// callerKind is engine/cluster's kind of the callers' grains.
const callerKind = "siftbatch-caller"

// unavailable503 reports whether res is 503 "node unavailable" with
// Retry-After.
func unavailable503(res response) bool {
	return res.code == http.StatusServiceUnavailable && res.header.Get("Retry-After") != "" &&
		strings.Contains(string(res.body), `"error":"node unavailable"`)
}

// killRestart runs the scenario of TestServe_ClusterKillRestart and
// returns its figures. jitter delays the kill by a random part of the
// automanaged provider's poll period.
func killRestart(tb testing.TB, jitter bool) killFigures {
	start := time.Now()
	release := make(chan struct{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/p-hold") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	tb.Cleanup(site.Close)
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	tb.Cleanup(releaseAll) // before site.Close: it waits for held pages
	// The fetched pages are named localhost: no node's address is.
	sitePort := site.URL[strings.LastIndex(site.URL, ":")+1:]

	dir := tb.TempDir()
	keys := filepath.Join(dir, "keys")
	ports := freePorts(tb, 9)
	// Ann's grain is on n3, the node killed: the hardest case for her
	// admission on a survivor (the grain must move, and its old place
	// holds up whoever asks it until it leaves).
	ann := grainOn(tb, fmt.Sprintf("127.0.0.1:%d", ports[5]), []int{ports[3], ports[4], ports[5]})
	if err := os.WriteFile(keys, []byte(ann+" "+deathAnn+"\nben "+deathBen+"\ncat "+deathCat+"\ndan "+deathDan+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[6+i]))
	}
	certs := testClusterCerts(tb)
	args := func(i int) (name, base string, args []string) {
		name = fmt.Sprintf("n%d", i+1)
		api := fmt.Sprintf("127.0.0.1:%d", ports[i])
		return name, "http://" + api, []string{"--keys", keys, "--data", filepath.Join(dir, name), "--addr", api,
			"--allow-private", "--log-level", "debug", "--jobs-per-caller", "1",
			"--cluster", "siftbatch-death", "--node", name,
			"--cluster-addr", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--manage-addr", peers[i], "--peers", strings.Join(peers, ","),
			"--cluster-ca", filepath.Join(certs, "ca.crt"), "--cluster-cert", filepath.Join(certs, name+".crt"), "--cluster-key", filepath.Join(certs, name+".key")}
	}
	nodes := make([]*clusterNode, 3)
	for i := range nodes {
		name, base, a := args(i)
		nodes[i] = startClusterNode(tb, name, base, a...)
	}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	procs := slices.Clone(nodes) // every process started, the restarted n3 too

	transport := &http.Transport{}
	tb.Cleanup(transport.CloseIdleConnections)
	r := &deathRig{tb: tb, client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
		page: func(p string) string { return "http://localhost:" + sitePort + "/p-" + p }}
	check := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	}
	// ended waits, on the job's own node, until the job has ended.
	ended := func(n *clusterNode, key, id string) deathJob {
		tb.Helper()
		var j deathJob
		check("job "+id+" to end on "+n.name, poll(20*time.Second, func() (bool, error) {
			res, err := r.call(n, http.MethodGet, "/v1/batch/"+id+"?wait=5s", key, "")
			if err != nil || res.code != http.StatusOK {
				return false, fmt.Errorf("%v %d %s", err, res.code, res.body)
			}
			j = r.job(n, key, id)
			return j.Status != "queued" && j.Status != "running", nil
		}))
		return j
	}
	// held waits until job id on n runs its second target, held by the site.
	held := func(n *clusterNode, key, id string) {
		tb.Helper()
		check("job "+id+" to be held on "+n.name, poll(20*time.Second, func() (bool, error) {
			j := r.job(n, key, id)
			return j.Status == "running" && j.Done == 1, nil
		}))
	}

	for _, n := range nodes {
		check(n.name+" to serve", poll(30*time.Second, func() (bool, error) {
			resp, err := r.client.Get(n.base + "/healthz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}))
	}
	// Dan's finished jobs, one on each node; the cluster has formed once
	// each reads through each of the others.
	dans := make([]string, 3)
	for i, n := range nodes {
		dans[i], _ = r.submit(n, deathDan, "dan-"+n.name+"-a", "dan-"+n.name+"-b")
		if j := ended(n, deathDan, dans[i]); !j.whole(2) {
			tb.Fatalf("dan's job on %s: %+v", n.name, j)
		}
	}
	check("the cluster to form", poll(30*time.Second, func() (bool, error) {
		for i := range nodes {
			for j, n := range nodes {
				if res, err := r.call(n, http.MethodGet, "/v1/batch/"+dans[i], deathDan, ""); i != j && (err != nil || res.code != http.StatusOK) {
					return false, nil
				}
			}
		}
		return true, nil
	}))
	tb.Logf("cluster formed after %s", time.Since(start).Round(time.Millisecond))

	// Live jobs held running: ann's on n3 (her only one), ben's on n1,
	// cat's on n2. Ann is at her cap on every node.
	a3, _ := r.submit(n3, deathAnn, "ann-1", "hold-ann")
	b1, _ := r.submit(n1, deathBen, "ben-1", "hold-ben")
	c2, _ := r.submit(n2, deathCat, "cat-1", "hold-cat")
	held(n3, deathAnn, a3)
	held(n1, deathBen, b1)
	held(n2, deathCat, c2)
	for _, n := range []*clusterNode{n1, n2} {
		if res := r.must(n, http.MethodPost, "/v1/batch", deathAnn, targetsBody(r.page("ann-2"))); res.code != http.StatusTooManyRequests {
			tb.Fatalf("ann at her cap, on %s: %d %s", n.name, res.code, res.body)
		}
	}

	// kill -9 n3.
	if jitter {
		<-time.After(rand.N(cluster.DefaultRefresh)) // a random phase of the provider's poll: no condition to wait on
	}
	r.mu.Lock()
	r.timing = true
	r.mu.Unlock()
	killed := time.Now()
	if err := n3.cmd.Process.Kill(); err != nil {
		tb.Fatal(err)
	}
	<-n3.exited
	releaseAll() // the survivors' held jobs go on
	var f killFigures
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 4)
		ann2 string
	)
	// Ann is admitted again on n1.
	wg.Go(func() {
		errs <- poll(killLimit, func() (bool, error) {
			res, err := r.call(n1, http.MethodPost, "/v1/batch", deathAnn, targetsBody(r.page("ann-2")))
			switch {
			case err != nil:
				return false, err
			case res.code == http.StatusAccepted:
				f.readmit = time.Since(killed)
				var out struct{ ID string }
				err := json.Unmarshal(res.body, &out)
				ann2 = out.ID
				return true, err
			case res.code == http.StatusTooManyRequests || res.code == http.StatusServiceUnavailable:
				return false, nil // a3 still counts, or the members are changing
			}
			return false, fmt.Errorf("ann's submit on n1: %d %s", res.code, res.body)
		})
	})
	// a3 answers 503 on n2.
	wg.Go(func() {
		errs <- poll(killLimit, func() (bool, error) {
			res, err := r.call(n2, http.MethodGet, "/v1/batch/"+a3, deathAnn, "")
			switch {
			case err != nil:
				return false, err
			case unavailable503(res):
				f.first503 = time.Since(killed)
				return true, nil
			case res.code == http.StatusOK:
				return false, nil // n3 answered before it died
			}
			return false, fmt.Errorf("a3 on n2: %d %s", res.code, res.body)
		})
	})
	// The lists on n1 and n2 name n3.
	for _, n := range []*clusterNode{n1, n2} {
		wg.Go(func() {
			errs <- poll(killLimit, func() (bool, error) {
				ids, unavailable, err := r.list(n, deathDan)
				if err != nil {
					return false, err
				}
				return slices.Equal(unavailable, []string{"n3"}) && slices.Contains(ids, dans[0]) && slices.Contains(ids, dans[1]), nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		check("after n3's kill", err)
	}
	// Every survivor answers 503 for n3's jobs, to every method.
	for _, n := range []*clusterNode{n1, n2} {
		for _, id := range []string{a3, dans[2]} {
			key := deathAnn
			if id == dans[2] {
				key = deathDan
			}
			for _, m := range []struct{ method, path string }{{"GET", ""}, {"GET", "?results=1"}, {"GET", "/0"}, {"GET", "?wait=2s"}, {"DELETE", ""}} {
				if res := r.must(n, m.method, "/v1/batch/"+id+m.path, key, ""); !unavailable503(res) {
					tb.Errorf("%s %s%s on %s after n3's kill: %d %v %s", m.method, id, m.path, n.name, res.code, res.header, res.body)
				}
			}
		}
	}
	// The survivors' jobs end, whole, and read the same through the other.
	for _, c := range []struct {
		n, other *clusterNode
		key, id  string
		targets  int
	}{{n1, n2, deathBen, b1, 2}, {n2, n1, deathCat, c2, 2}, {n1, n2, deathAnn, ann2, 1}, {n1, n2, deathDan, dans[0], 2}, {n2, n1, deathDan, dans[1], 2}} {
		if j := ended(c.n, c.key, c.id); !j.whole(c.targets) {
			tb.Errorf("job %s on %s after n3's kill: %+v", c.id, c.n.name, j)
		}
		if j := r.job(c.other, c.key, c.id); !j.whole(c.targets) {
			tb.Errorf("job %s through %s after n3's kill: %+v", c.id, c.other.name, j)
		}
	}
	f.window = time.Since(killed)
	r.mu.Lock()
	r.timing = false
	f.longest = r.longest
	r.mu.Unlock()
	if f.window > killLimit {
		tb.Fatalf("the survivors took %s after n3's kill (first 503 %s, ann admitted %s), more than %s", f.window, f.first503, f.readmit, killLimit)
	}

	// n3 comes back on its directory: a new process, the same flags.
	restarted := time.Now()
	name, base, a := args(2)
	n3 = startClusterNode(tb, name, base, a...)
	procs = append(procs, n3)
	nodes[2] = n3
	check("n3's jobs to be readable through every node", poll(30*time.Second, func() (bool, error) {
		for _, n := range nodes {
			res, err := r.call(n, http.MethodGet, "/v1/batch/"+a3, deathAnn, "")
			if err != nil {
				return false, nil // n3 is not serving yet
			}
			if res.code != http.StatusOK {
				return false, nil
			}
		}
		return true, nil
	}))
	f.readable = time.Since(restarted)
	for _, n := range nodes {
		// Its live job was failed "restart" (its first target kept), its
		// finished one is whole.
		if j := r.job(n, deathAnn, a3); j.Status != "failed" || j.Error != "restart" || len(j.Targets) != 2 || j.Targets[0].Result == nil || j.Targets[0].Result.Content != "page /p-ann-1" {
			tb.Errorf("a3 through %s after n3's restart: %+v", n.name, j)
		}
		if j := r.job(n, deathDan, dans[2]); !j.whole(2) {
			tb.Errorf("dan's job of n3 through %s after its restart: %+v", n.name, j)
		}
	}
	// Dan's grain sees n3's jobs again: a resubmit on n1 returns n3's job.
	if id, reused := r.submit(n1, deathDan, "dan-n3-a", "dan-n3-b"); id != dans[2] || !reused {
		tb.Errorf("dan's resubmit of n3's job on n1: %s reused %v, want %s", id, reused, dans[2])
	}
	// Ann's failed job does not count: she submits on n3.
	if j := r.job(n1, deathAnn, ann2); j.Status != "done" {
		tb.Fatalf("ann's job on n1: %+v", j)
	}
	if id, _ := r.submit(n3, deathAnn, "ann-3"); !ended(n3, deathAnn, id).whole(1) {
		tb.Errorf("ann's job on n3 after its restart did not end whole")
	}

	// Stop every node, then read every log whole.
	var stops sync.WaitGroup
	for _, n := range nodes {
		stops.Go(func() {
			if !n.stop(20 * time.Second) {
				tb.Errorf("%s did not stop on SIGTERM", n.name)
			} else if code := n.cmd.ProcessState.ExitCode(); code != 0 {
				tb.Errorf("%s exited %d", n.name, code)
			}
		})
	}
	stops.Wait()
	for _, n := range procs {
		l := n.stderr.String()
		for _, secret := range []string{deathAnn, deathBen, deathCat, deathDan, "localhost", ":" + sitePort, "/p-", "page ", dir} {
			if strings.Contains(l, secret) {
				tb.Errorf("%s's log holds %q:\n%s", n.name, secret, l)
			}
		}
		if strings.Contains(l, "DATA RACE") {
			tb.Errorf("%s: a data race:\n%s", n.name, l)
		}
	}
	tb.Logf("the whole run: %s", time.Since(start).Round(time.Millisecond))
	return f
}
