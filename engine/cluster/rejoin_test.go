package cluster_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// link is a TCP proxy from one node to another's manage port, that the
// test can cut (every connection closed, new ones closed at once) and
// heal: a network partition of the membership's health polls, on
// loopback.
type link struct {
	l  net.Listener
	to string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newLink(t *testing.T, to string) *link {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &link{l: l, to: to, conns: map[net.Conn]bool{}}
	k.wg.Go(k.accept)
	t.Cleanup(func() {
		_ = l.Close()
		k.setCut(true)
		k.wg.Wait()
	})
	return k
}

func (k *link) addr() string { return k.l.Addr().String() }

func (k *link) accept() {
	for {
		c, err := k.l.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.cut {
			k.mu.Unlock()
			_ = c.Close()
			continue
		}
		k.conns[c] = true
		k.mu.Unlock()
		k.wg.Go(func() { k.pipe(c) })
	}
}

func (k *link) pipe(c net.Conn) {
	defer func() {
		k.mu.Lock()
		delete(k.conns, c)
		k.mu.Unlock()
		_ = c.Close()
	}()
	d, err := net.Dial("tcp", k.to)
	if err != nil {
		return
	}
	k.mu.Lock()
	if k.cut {
		k.mu.Unlock()
		_ = d.Close()
		return
	}
	k.conns[d] = true
	k.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(d, c); _ = d.Close() })
	_, _ = io.Copy(c, d)
	_ = c.Close()
	wg.Wait()
	k.mu.Lock()
	delete(k.conns, d)
	k.mu.Unlock()
}

// setCut cuts the link (closing every connection on it) or heals it.
func (k *link) setCut(cut bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = cut
	if cut {
		for c := range k.conns {
			_ = c.Close()
		}
	}
}

// manageListener returns a loopback listener for a node's manage port,
// handed to the node itself (cluster.AutomanagedOn): no port is picked,
// closed and bound again. It is closed at the test's end if no node took
// it over.
func manageListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// partitionable starts a cluster of nodes names under the automanaged
// provider (a poll each refresh), each polling the others through a link
// of its own: links[from][to].
func partitionable(t *testing.T, refresh time.Duration, names ...string) (*clustertest.Cluster, map[string]map[string]*link) {
	t.Helper()
	manage := map[string]net.Listener{}
	for _, n := range names {
		manage[n] = manageListener(t)
	}
	links := map[string]map[string]*link{}
	specs := make([]clustertest.Spec, len(names))
	for i, from := range names {
		links[from] = map[string]*link{}
		peers := []string{manage[from].Addr().String()}
		for _, to := range names {
			if to != from {
				links[from][to] = newLink(t, manage[to].Addr().String())
				peers = append(peers, links[from][to].addr())
			}
		}
		p := cluster.AutomanagedOn(manage[from], peers, refresh)
		specs[i] = clustertest.Spec{Name: from, NodeOptions: clustertest.NodeOptions{Provider: &p}}
	}
	return clustertest.StartSpecs(t, clustertest.Options{}, specs...), links
}

// isolate cuts (or heals) every link to and from node.
func isolate(links map[string]map[string]*link, node string, cut bool) {
	for from, to := range links {
		for name, k := range to {
			if from == node || name == node {
				k.setCut(cut)
			}
		}
	}
}

// TestNode_RejoinsAfterHealedPartition: a node cut off from the others
// long enough for each side to drop the other (each blocks the other's
// member id for good, in protoactor) rejoins by itself once the network
// is whole again: it finds that no peer counts it, and makes a new
// incarnation under a new member id. Its jobs and store are kept: its job
// is read whole through every node after the heal, and it reads the
// others' jobs again. The old incarnation leaves nothing behind: the
// process's gRPC goroutines come back to what they were before the cut.
// Not parallel: it counts the process's goroutines.
func TestNode_RejoinsAfterHealedPartition(t *testing.T) {
	testkit.Long(t)
	tc, links := partitionable(t, 500*time.Millisecond, "n1", "n2", "n3")
	n1, n2, n3 := tc.Node("n1"), tc.Node("n2"), tc.Node("n3")
	id3 := n3.Submit(t, "alice-key", "https://example.test/3")
	id1 := n1.Submit(t, "bob-key", "https://example.test/1")
	read := func(n *clustertest.Node, id, key string) int {
		code, _, b := n.Do(t, "GET", "/v1/batch/"+id, key, "")
		if code == http.StatusOK && !strings.Contains(string(b), `"status":"done"`) {
			return 0
		}
		return code
	}
	for _, n := range tc.Nodes() {
		testkit.WaitFor(t, n.Name+" reads both jobs done", func() bool {
			return read(n, id3, "alice-key") == http.StatusOK && read(n, id1, "bob-key") == http.StatusOK
		})
	}
	ports := map[int]bool{}
	for _, n := range tc.Nodes() {
		_, p, err := net.SplitHostPort(n.Node.Address())
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		ports[port] = true
	}
	before := clusterConns(t, ports)
	if before == 0 {
		t.Fatal("no connection of the cluster's seen before the cut")
	}
	t.Logf("%d ends of connections to or from the cluster's ports before the cut", before)

	isolate(links, "n3", true)
	clustertest.WaitSees(t, n3, 1)
	clustertest.WaitSees(t, n1, 2)
	clustertest.WaitSees(t, n2, 2)
	if code := read(n1, id3, "alice-key"); code != http.StatusServiceUnavailable {
		t.Fatalf("n3's job on n1 during the partition: %d, want 503", code)
	}

	isolate(links, "n3", false)
	tc.WaitMembers(3)
	for _, n := range []*clustertest.Node{n1, n2, n3} {
		testkit.WaitFor(t, n.Name+" reads both jobs again", func() bool {
			return read(n, id3, "alice-key") == http.StatusOK && read(n, id1, "bob-key") == http.StatusOK
		})
	}
	if !strings.Contains(tc.Logs.String(), "rejoining under a new member id") {
		t.Error("no node logged that it rejoined")
	}
	for _, n := range []*clustertest.Node{n1, n2} {
		if strings.Contains(nodeLog(tc, n.Name), "rejoining under a new member id") {
			t.Errorf("%s rejoined: only the side no peer counts does", n.Name)
		}
	}
	// The retired incarnation's connections end: the process holds no
	// more connections to or from the nodes' cluster ports than before
	// the cut (the same peers, the same streams).
	testkit.WaitFor(t, "the cluster's connections back to their count before the cut", func() bool {
		return clusterConns(t, ports) <= before
	})
	// And the cluster works: a submit on n3 counts alice's jobs on n1.
	if code, _ := n3.Post("alice-key", "https://example.test/again"); code != http.StatusAccepted {
		t.Fatalf("submit on n3 after the heal: %d", code)
	}
}

// nodeLog returns the lines of the cluster's log that name node.
func nodeLog(tc *clustertest.Cluster, node string) string {
	var out []string
	for _, l := range tc.Logs.Lines() {
		if strings.Contains(l, "node="+node+" ") || strings.HasSuffix(l, "node="+node) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// clusterConns counts the process's established TCP connections (each
// end that is the process's) to or from one of ports, from /proc/net/tcp
// and /proc/net/tcp6: the nodes' gRPC connections.
func clusterConns(t *testing.T, ports map[int]bool) int {
	t.Helper()
	count := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "01" { // 01: ESTABLISHED
				continue
			}
			if ports[hexPort(fields[1])] || ports[hexPort(fields[2])] {
				count++
			}
		}
	}
	return count
}

// hexPort is the port of an address of /proc/net/tcp (ADDR:PORT, in hex).
func hexPort(addr string) int {
	i := strings.LastIndex(addr, ":")
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(p)
}

// TestNode_RejoinsRepeatedlyWithoutLeaks: n3 cut off and healed again and
// again, one cut landing while its last rejoin is under way, comes back
// each time; and the retired incarnations leave nothing behind: the
// process's goroutines, open files and connections to or from the
// cluster's ports after the last heal are no more than after the first
// (a few goroutines and files of slack, for the tests' own idle HTTP
// connections; protoactor's gossip throttles, which end a minute after
// they start, not counted).
// Not parallel: it counts the process's goroutines and files.
func TestNode_RejoinsRepeatedlyWithoutLeaks(t *testing.T) {
	testkit.Long(t)
	tc, links := partitionable(t, 500*time.Millisecond, "n1", "n2", "n3")
	n1, n3 := tc.Node("n1"), tc.Node("n3")
	id3 := n3.Submit(t, "alice-key", "https://example.test/3")
	id1 := n1.Submit(t, "bob-key", "https://example.test/1")
	read := func(n *clustertest.Node, id, key string) int {
		code, _, b := n.Do(t, "GET", "/v1/batch/"+id, key, "")
		if code == http.StatusOK && !strings.Contains(string(b), `"status":"done"`) {
			return 0
		}
		return code
	}
	ports := map[int]bool{}
	for _, n := range tc.Nodes() {
		_, p, err := net.SplitHostPort(n.Node.Address())
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		ports[port] = true
	}
	rejoins := func() int { return strings.Count(nodeLog(tc, "n3"), "rejoining under a new member id") }
	whole := func(what string) {
		tc.WaitMembers(3)
		for _, n := range tc.Nodes() {
			testkit.WaitFor(t, n.Name+" reads both jobs "+what, func() bool {
				return read(n, id3, "alice-key") == http.StatusOK && read(n, id1, "bob-key") == http.StatusOK
			})
		}
	}
	cut := func() { // every side drops the other (TestNode_RejoinsAfterPartitionPeersDisagreeOn otherwise)
		isolate(links, "n3", true)
		clustertest.WaitSees(t, n3, 1)
		clustertest.WaitSees(t, n1, 2)
		clustertest.WaitSees(t, tc.Node("n2"), 2)
	}
	// protoactor's gossip throttles (actor/throttler.go) live a minute
	// after their window opens, retired incarnation or not: they end by
	// themselves, and are not counted.
	goroutines := func() int { return runtime.NumGoroutine() - goroutinesIn("actor/throttler.go") }
	fds := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("n3's log:\n%s", nodeLog(tc, "n3"))
		}
	})
	whole("at the start")
	cut()
	isolate(links, "n3", false)
	whole("after the first heal")
	g0, f0, c0 := goroutines(), fds(), clusterConns(t, ports)
	t.Logf("after the first rejoin (%d logged): %d goroutines, %d files, %d connection ends", rejoins(), g0, f0, c0)

	for round := range 3 {
		cut()
		r := rejoins()
		isolate(links, "n3", false)
		if round%2 == 1 { // cut again while n3 rejoins
			testkit.WaitFor(t, "n3 rejoining", func() bool { return rejoins() > r })
			cut()
			isolate(links, "n3", false)
		}
		whole(fmt.Sprintf("after heal %d", round+2))
		t.Logf("round %d (%d rejoins logged): %d goroutines, %d files, %d connection ends", round+2, rejoins(), goroutines(), fds(), clusterConns(t, ports))
	}
	testkit.WaitFor(t, "goroutines, files and connections back to their count after the first rejoin", func() bool {
		return goroutines() <= g0+10 && fds() <= f0+2 && clusterConns(t, ports) <= c0
	})
}

// TestNode_RejoinsAfterPartitionPeersDisagreeOn: a partition short enough
// that only some peers drop the node (n3's polls of n1 and n2 fail, and
// n1's of n3; n2's of n3 go through: n3 drops both, n1 drops n3, n2 still
// counts n3) heals like any other: docs/CLUSTER.md, "A partition heals",
// says the node rejoins about two polls after the heal. It must not wait
// for n2 to drop it by protoactor's gossip heartbeat expiry (20 s: n3,
// which no longer counts n2, stops gossiping to it): n3 rejoins before n2
// drops it.
func TestNode_RejoinsAfterPartitionPeersDisagreeOn(t *testing.T) {
	testkit.Long(t)
	tc, links := partitionable(t, 500*time.Millisecond, "n1", "n2", "n3")
	n1, n2, n3 := tc.Node("n1"), tc.Node("n2"), tc.Node("n3")
	tc.WaitMembers(3)
	cut := []*link{links["n3"]["n1"], links["n3"]["n2"], links["n1"]["n3"]}
	for _, k := range cut {
		k.setCut(true)
	}
	clustertest.WaitSees(t, n3, 1)
	clustertest.WaitSees(t, n1, 2)
	if got := len(n2.Node.Members()); got != 3 {
		t.Fatalf("n2 sees %d members at the heal; the test needs it to count n3 still", got)
	}
	healed := time.Now()
	for _, k := range cut {
		k.setCut(false)
	}
	rejoined := func() bool { return strings.Contains(nodeLog(tc, "n3"), "rejoining under a new member id") }
	testkit.WaitFor(t, "n3 rejoining, or n2 dropping n3", func() bool {
		return rejoined() || len(n2.Node.Members()) < 3
	})
	if !rejoined() {
		t.Errorf("n2 dropped n3 (%s after the heal) before n3 rejoined: n3 waited on protoactor's heartbeat expiry", time.Since(healed).Round(100*time.Millisecond))
	}
	tc.WaitMembers(3)
}

// rejoinRig is a partitionable cluster of n1, n2, n3 with a finished job
// on n3 (alice's) and on n1 (bob's); cutAll isolates n3 until every side
// has dropped the other, and rejoins counts n3's rejoins logged.
func rejoinRig(t *testing.T) (tc *clustertest.Cluster, id3, id1 string, cutAll func(), heal func(), rejoins func() int) {
	tc, links := partitionable(t, 500*time.Millisecond, "n1", "n2", "n3")
	n1, n2, n3 := tc.Node("n1"), tc.Node("n2"), tc.Node("n3")
	tc.WaitMembers(3)
	id3 = n3.Submit(t, "alice-key", "https://example.test/3")
	id1 = n1.Submit(t, "bob-key", "https://example.test/1")
	n3.WaitDone(t, id3)
	n1.WaitDone(t, id1)
	rejoins = func() int { return strings.Count(nodeLog(tc, "n3"), "rejoining under a new member id") }
	cutAll = func() {
		isolate(links, "n3", true)
		clustertest.WaitSees(t, n3, 1)
		clustertest.WaitSees(t, n1, 2)
		clustertest.WaitSees(t, n2, 2)
	}
	heal = func() { isolate(links, "n3", false) }
	return tc, id3, id1, cutAll, heal, rejoins
}

// TestNode_ReadsDuringRejoin: while n3 rejoins (its old incarnation
// retired, the new one starting), reads of n3's job through n1 and of
// n1's job through n3 answer 200 or 503, never 404 nor another error,
// each returns, and nothing races (go test -race).
func TestNode_ReadsDuringRejoin(t *testing.T) {
	testkit.Long(t)
	tc, id3, id1, cutAll, heal, rejoins := rejoinRig(t)
	n1, n3 := tc.Node("n1"), tc.Node("n3")
	cutAll()
	heal()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	codes := make(chan string, 1<<16)
	reader := func(n *clustertest.Node, id, key string) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			code, _, b := n.Do(t, "GET", "/v1/batch/"+id+"?results=1", key, "")
			if code != http.StatusOK && code != http.StatusServiceUnavailable {
				codes <- fmt.Sprintf("%s on %s: %d %s", id, n.Name, code, b)
			}
		}
	}
	for range 2 {
		wg.Add(2)
		go reader(n1, id3, "alice-key")
		go reader(n3, id1, "bob-key")
	}
	testkit.WaitFor(t, "n3 rejoining", func() bool { return rejoins() > 0 })
	tc.WaitMembers(3)
	close(stop)
	wg.Wait()
	close(codes)
	for c := range codes {
		t.Errorf("a read during the rejoin: %s", c)
	}
}

// TestNode_CloseDuringRejoin: a Close of n3 while it rejoins returns, and
// leaves no goroutine of the node's rejoin behind, nor a listener on its
// cluster port.
func TestNode_CloseDuringRejoin(t *testing.T) {
	testkit.Long(t)
	tc, _, _, cutAll, heal, rejoins := rejoinRig(t)
	n3 := tc.Node("n3")
	cutAll()
	heal()
	testkit.WaitFor(t, "n3 rejoining", func() bool { return rejoins() > 0 })
	watchers := goroutinesIn("cluster.(*Node).watchRejoin(")
	addr := n3.Node.Address()
	tc.Stop(n3)
	waitNone(t, "cluster.(*Node).rejoin(")
	testkit.WaitFor(t, "n3's watch of its rejoins ended", func() bool {
		return goroutinesIn("cluster.(*Node).watchRejoin(") == watchers-1
	})
	// Nothing of an incarnation made as it closed is left: its port is free.
	waitNotListening(t, "n3's cluster port", addr)
}

// TestNode_RejoinsAfterEveryNodeCutOff: two nodes blocked at once, and
// the third alone too (every node cut off from every other, each dropping
// both peers), come back together once the network is whole: each reads
// the others' jobs again (docs/CLUSTER.md, "A partition heals": each
// rejoins, and the first new ids are taken in by the others).
func TestNode_RejoinsAfterEveryNodeCutOff(t *testing.T) {
	testkit.Long(t)
	tc, links := partitionable(t, 500*time.Millisecond, "n1", "n2", "n3")
	tc.WaitMembers(3)
	ids := map[string]string{}
	for i, n := range tc.Nodes() {
		key := []string{"alice-key", "bob-key", "root-key"}[i]
		ids[key] = n.Submit(t, key, "https://example.test/"+n.Name)
		n.WaitDone(t, ids[key])
	}
	for _, to := range links {
		for _, k := range to {
			k.setCut(true)
		}
	}
	for _, n := range tc.Nodes() {
		clustertest.WaitSees(t, n, 1)
	}
	for _, to := range links {
		for _, k := range to {
			k.setCut(false)
		}
	}
	tc.WaitMembers(3)
	for _, n := range tc.Nodes() {
		for key, id := range ids {
			testkit.WaitFor(t, n.Name+" reads "+id, func() bool {
				code, _, _ := n.Do(t, "GET", "/v1/batch/"+id, key, "")
				return code == http.StatusOK
			})
		}
	}
}
