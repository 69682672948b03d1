package cluster_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
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

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// partitionable starts a cluster of nodes names under the automanaged
// provider (a poll each refresh), each polling the others through a link
// of its own: links[from][to].
func partitionable(t *testing.T, refresh time.Duration, names ...string) (*clustertest.Cluster, map[string]map[string]*link) {
	t.Helper()
	manage := map[string]string{}
	for _, n := range names {
		manage[n] = freeAddr(t)
	}
	links := map[string]map[string]*link{}
	specs := make([]clustertest.Spec, len(names))
	for i, from := range names {
		links[from] = map[string]*link{}
		peers := []string{manage[from]}
		for _, to := range names {
			if to != from {
				links[from][to] = newLink(t, manage[to])
				peers = append(peers, links[from][to].addr())
			}
		}
		p := cluster.Automanaged(manage[from], peers, refresh)
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
