package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/kubernetes"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// TestNew_BadConfig: New refuses each bad config with an error.
func TestNew_BadConfig(t *testing.T) {
	provider := cluster.Automanaged("127.0.0.1:6000", []string{"127.0.0.1:6000"}, 0)
	good := cluster.Config{Name: "c", Node: "n", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "n"), Provider: provider}
	if _, err := cluster.New(good); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for name, change := range map[string]func(*cluster.Config){
		"no name":                    func(c *cluster.Config) { c.Name = "" },
		"no node":                    func(c *cluster.Config) { c.Node = "" },
		"no provider":                func(c *cluster.Config) { c.Provider = cluster.Provider{} },
		"no address":                 func(c *cluster.Config) { c.Addr = "" },
		"no port":                    func(c *cluster.Config) { c.Addr = "127.0.0.1" },
		"port too big":               func(c *cluster.Config) { c.Addr = "127.0.0.1:65536" },
		"port not a number":          func(c *cluster.Config) { c.Addr = "127.0.0.1:http" },
		"negative port":              func(c *cluster.Config) { c.Addr = "127.0.0.1:-1" },
		"bad advertised":             func(c *cluster.Config) { c.AdvertiseAddr = "somewhere" },
		"negative timeout":           func(c *cluster.Config) { c.Timeout = -time.Second },
		"negative retry":             func(c *cluster.Config) { c.RetryAfter = -1 },
		"negative both":              func(c *cluster.Config) { c.Timeout, c.RetryAfter = -1, -1 },
		"advertised no port":         func(c *cluster.Config) { c.AdvertiseAddr = "10.0.0.1" },
		"address with a path":        func(c *cluster.Config) { c.Addr = "127.0.0.1:80/x" },
		"neither TLS nor insecure":   func(c *cluster.Config) { c.TLS = nil },
		"both TLS and insecure":      func(c *cluster.Config) { c.Insecure = true },
		"another node's certificate": func(c *cluster.Config) { c.TLS = clustertest.NodeTLS(t, "another") },
	} {
		cfg := good
		change(&cfg)
		n, err := cluster.New(cfg)
		if err == nil || n != nil {
			t.Errorf("%s: New gave %v, %v; want an error", name, n, err)
		}
	}
}

// TestNode_StartErrors: Start returns an error, having started nothing,
// on an address in use (the remote's, or the automanaged provider's), on
// a bad provider config, a provider that fails (giving the remote's port
// back), a nil runner or handler, a second Start and a Start after Close.
func TestNode_StartErrors(t *testing.T) {
	t.Parallel()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r, err := engine.New(store, clustertest.Fetch(testkit.NewGate()), engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := http.NotFoundHandler()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	inUse := taken.Addr().String()
	newNode := func(t *testing.T, addr string, p cluster.Provider) *cluster.Node {
		n, err := cluster.New(cluster.Config{Name: "start-errors", Node: "n", Addr: addr, TLS: clustertest.NodeTLS(t, "n"), Provider: p})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	testProvider := cluster.ProtoactorProvider(test.NewTestProvider(test.NewInMemAgent()))

	for name, n := range map[string]*cluster.Node{
		"remote address in use":       newNode(t, inUse, testProvider),
		"manage address in use":       newNode(t, "127.0.0.1:0", cluster.Automanaged(inUse, []string{inUse}, 0)),
		"manage address without port": newNode(t, "127.0.0.1:0", cluster.Automanaged("127.0.0.1:0", []string{"127.0.0.1:1"}, 0)),
		"no peers":                    newNode(t, "127.0.0.1:0", cluster.Automanaged("127.0.0.1:1", nil, 0)),                 // refused before binding
		"bad peer":                    newNode(t, "127.0.0.1:0", cluster.Automanaged("127.0.0.1:1", []string{"nowhere"}, 0)), // refused before binding
		"address of another host":     newNode(t, "192.0.2.1:0", testProvider),
	} {
		if err := n.Start(r, h); err == nil {
			t.Errorf("%s: Start gave no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if len(n.Members()) != 0 {
			t.Errorf("%s: a member after a failed Start", name)
		}
		if err := n.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}

	// A provider that fails once protoactor's remote has started: the
	// remote's port is given back.
	// protoactor's remote binds the address itself: a port free a moment
	// ago may have been taken since, so another is tried.
	var (
		n    *cluster.Node
		addr string
	)
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		_ = l.Close()
		n = newNode(t, addr, cluster.ProtoactorProvider(failingProvider{}))
		err = n.Start(r, h)
		if err != nil && strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) && attempt < 5 {
			_ = n.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "no way in") {
			t.Errorf("a failing provider: Start gave %v", err)
		}
		break
	}
	waitNotListening(t, "the remote's port", addr)
	_ = n.Close()

	n = newNode(t, "127.0.0.1:0", testProvider)
	if err := n.Start(nil, h); err == nil {
		t.Error("Start with no runner gave no error")
	}
	if err := n.Start(r, nil); err == nil {
		t.Error("Start with no handler gave no error")
	}
	if err := n.Start(r, h); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(r, h); err == nil {
		t.Error("a second Start gave no error")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(r, h); err == nil {
		t.Error("Start after Close gave no error")
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
}

// TestNode_ListensOnlyOnGivenHost: a node given 127.0.0.1 addresses
// listens on 127.0.0.1 only: its remote's port and the automanaged
// provider's manage port (protoactor's own would listen on every
// interface), which answers the peers' polls.
func TestNode_ListensOnlyOnGivenHost(t *testing.T) {
	t.Parallel()
	one := solo(t)
	// The node binds the manage address itself (what is tested): a port
	// free a moment ago may have been taken since, so another is tried.
	var (
		n          *cluster.Node
		manage     string
		managePort int
	)
	for attempt := 1; n == nil; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		manage, managePort = l.Addr().String(), l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		m, err := cluster.New(cluster.Config{Name: "listen", Node: "n", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "n"),
			Provider: cluster.Automanaged(manage, []string{manage}, 0)})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Start(one.Runner, one.API)
		if err == nil {
			n = m
			break
		}
		_ = m.Close()
		if attempt == 5 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
	}
	defer n.Close()
	testkit.WaitFor(t, "the node is a member", func() bool { return n.Membership().Member })
	_, p, _ := net.SplitHostPort(n.Address())
	remotePort, _ := strconv.Atoi(p)

	socks := listening(t)
	for name, port := range map[string]int{"remote": remotePort, "manage": managePort} {
		if len(socks[port]) == 0 {
			t.Errorf("%s port %d: not listening: the test tests nothing", name, port)
		}
		for _, host := range socks[port] {
			if host != "0100007F" {
				t.Errorf("%s port %d: listens on %s, want 127.0.0.1 (0100007F) only", name, port, host)
			}
		}
	}
	res, err := http.Get("http://" + manage + "/_health")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var who struct {
		ID          string `json:"id"`
		ClusterName string `json:"cluster_name"`
		Port        int    `json:"port"`
	}
	if err := json.NewDecoder(res.Body).Decode(&who); err != nil || res.StatusCode != http.StatusOK ||
		who.ClusterName != "listen" || who.Port != remotePort || who.ID == "" {
		t.Errorf("the manage port's health: %d %+v %v", res.StatusCode, who, err)
	}
}

// TestNode_LifecycleMisuseErrsNeverPanics: bad configs, Start twice, Close twice,
// Close before Start, Start after Close, Forward before Start and after
// Close, List after Close, Start on an address in use or with a provider
// that cannot start: errors (or answers), never panics; and nothing left
// running (TestMain's leak check).
func TestNode_LifecycleMisuseErrsNeverPanics(t *testing.T) {
	t.Parallel()
	agent := test.NewInMemAgent()
	prov := cluster.ProtoactorProvider(test.NewTestProvider(agent))
	good := cluster.Config{Name: "c", Node: "x", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "x"), Provider: prov}
	bad := map[string]func(*cluster.Config){
		"no name":            func(c *cluster.Config) { c.Name = "" },
		"no node":            func(c *cluster.Config) { c.Node = "" },
		"no provider":        func(c *cluster.Config) { c.Provider = cluster.Provider{} },
		"no address":         func(c *cluster.Config) { c.Addr = "" },
		"address, no port":   func(c *cluster.Config) { c.Addr = "127.0.0.1" },
		"port too big":       func(c *cluster.Config) { c.Addr = "127.0.0.1:65536" },
		"negative port":      func(c *cluster.Config) { c.Addr = "127.0.0.1:-1" },
		"port not a number":  func(c *cluster.Config) { c.Addr = "127.0.0.1:http" },
		"bad IPv6":           func(c *cluster.Config) { c.Addr = "[::1:80" },
		"bad advertised":     func(c *cluster.Config) { c.AdvertiseAddr = "host" },
		"advertised port":    func(c *cluster.Config) { c.AdvertiseAddr = "host:99999" },
		"negative timeout":   func(c *cluster.Config) { c.Timeout = -time.Second },
		"negative retry":     func(c *cluster.Config) { c.RetryAfter = -1 },
		"negative both":      func(c *cluster.Config) { c.Timeout, c.RetryAfter = -1, -1 },
		"timeout, bad addr":  func(c *cluster.Config) { c.Timeout, c.Addr = time.Second, ":"+strings.Repeat("9", 30) },
		"spaces in address":  func(c *cluster.Config) { c.Addr = " 127.0.0.1:0" + "x" },
		"nothing but a name": func(c *cluster.Config) { *c = cluster.Config{Name: "c"} },
	}
	for what, f := range bad {
		cfg := good
		f(&cfg)
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("New with %s panicked: %v", what, v)
				}
			}()
			if n, err := cluster.New(cfg); err == nil {
				t.Errorf("New with %s: no error", what)
				_ = n.Close()
			}
		}()
	}

	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	id := b.Submit(t, "alice-key", "https://example.com/1")
	b.WaitDone(t, id)

	// Start twice: an error, and the node goes on.
	if err := a.Node.Start(a.Runner, a.API); err == nil {
		t.Error("Start twice: no error")
	}
	if got := send(context.Background(), a, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
		t.Errorf("a after a second Start: %d %s", got.code, got.body)
	}

	// A node never started: Close, Forward, Members; then Start is refused.
	n, err := cluster.New(cluster.Config{Name: tc.Name, Node: "y", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "y"), Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.Agent))})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Members()) != 0 || n.Address() != "127.0.0.1:0" || n.Name() != "y" || len(n.Tag()) != 4 || n.Changed() == nil {
		t.Errorf("a node not started: members %v, address %q", n.Members(), n.Address())
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/batch/"+id, nil)
	if n.Forward(rec, req, id) || rec.Body.Len() != 0 || rec.Code != http.StatusOK {
		t.Errorf("Forward before Start: answered %d %s", rec.Code, rec.Body)
	}
	if err := n.Start(nil, a.API); err == nil {
		t.Error("Start with a nil runner: no error")
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close before Start: %v", err)
	}
	if err := n.Start(a.Runner, a.API); err == nil {
		t.Error("Start after Close: no error")
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close twice: %v", err)
	}

	// Start on an address in use: an error, nothing started.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken, err := cluster.New(cluster.Config{Name: tc.Name, Node: "z", Addr: l.Addr().String(), TLS: clustertest.NodeTLS(t, "z"), Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.Agent))})
	if err != nil {
		t.Fatal(err)
	}
	if err := taken.Start(a.Runner, a.API); err == nil {
		t.Error("Start on an address in use: no error")
	}
	_ = taken.Close()
	// The automanaged provider: a manage port in use, no peers, a bad peer.
	for what, p := range map[string]cluster.Provider{
		"manage port in use": cluster.Automanaged(l.Addr().String(), []string{l.Addr().String()}, 0),
		"no peers":           cluster.Automanaged("127.0.0.1:1", nil, 0),
		"bad peer":           cluster.Automanaged("127.0.0.1:1", []string{"nohost"}, 0),
		"no manage port":     cluster.Automanaged("127.0.0.1:0", []string{"127.0.0.1:1"}, 0),
		"kubernetes outside": kubernetes.Provider(),
	} {
		m, err := cluster.New(cluster.Config{Name: tc.Name, Node: "w", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "w"), Provider: p})
		if err != nil {
			continue // refused already
		}
		if err := m.Start(a.Runner, a.API); err == nil {
			t.Errorf("Start with %s: no error", what)
		}
		_ = m.Close()
	}
	tc.WaitMembers(2) // none of them joined

	// Close twice at once; then Forward and List on the closed node.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- b.Node.Close() }()
	}
	for _, err := range recvN(t, errs, 2) {
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if len(b.Node.Members()) != 0 {
		t.Errorf("members of a closed node: %v", b.Node.Members())
	}
	rec = httptest.NewRecorder()
	if b.Node.Forward(rec, httptest.NewRequest("GET", "/v1/batch/"+id, nil), id) {
		t.Errorf("a closed node forwards its own job: %d %s", rec.Code, rec.Body)
	}
	jobs, _, unavailable, err := b.Node.List(context.Background(), "alice", engine.ListOptions{})
	if err != nil || len(jobs) != 1 || strings.Join(unavailable, ",") != "a" {
		t.Errorf("List on a closed node: %v, %d jobs, unavailable %v", err, len(jobs), unavailable)
	}
	clustertest.WaitSees(t, a, 1)
	// a, about b's job, b having left: 503, never 404.
	got := send(context.Background(), a, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if got.code != http.StatusServiceUnavailable || got.hdr.Get("Retry-After") == "" {
		t.Errorf("b's job on a after b closed: %d %s", got.code, got.body)
	}
}

// TestNode_ListBeforeStartNeverPanics: Node.List on a node not yet
// started (the HTTP API is built with the node before Start, which takes
// its handler, so a GET /v1/batch served before Start calls List) returns,
// never panics.
func TestNode_ListBeforeStartNeverPanics(t *testing.T) {
	n, err := cluster.New(cluster.Config{Name: "c", Node: "a", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "a"),
		Provider: cluster.ProtoactorProvider(test.NewTestProvider(test.NewInMemAgent()))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Errorf("List before Start panicked: %v", v)
			}
		}()
		_, _, _, _ = n.List(context.Background(), "alice", engine.ListOptions{})
	}()
}

// TestNode_FailedStartFreesRemote: Start with a provider that fails
// returns the error having started nothing: protoactor's gRPC remote it
// started before the provider failed is stopped, its address free for a
// second Start, its server's goroutines gone. Not parallel: it counts the
// process's gRPC servers.
func TestNode_FailedStartFreesRemote(t *testing.T) {
	one := solo(t) // a runner and a handler
	// protoactor's remote binds the address itself: a port free a moment
	// ago may have been taken since, so another is tried.
	var port int
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		n, err := cluster.New(cluster.Config{Name: "c", Node: "a", Addr: l.Addr().String(), TLS: clustertest.NodeTLS(t, "a"), Provider: cluster.ProtoactorProvider(failingProvider{})})
		if err != nil {
			t.Fatal(err)
		}
		err = n.Start(one.Runner, one.API)
		_ = n.Close()
		if err == nil {
			t.Fatal("Start with a failing provider: no error")
		}
		if !strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) {
			break // the provider's failure: the remote had bound the port
		}
		if attempt == 5 {
			t.Fatal(err)
		}
	}
	// This process no longer listens on it (read from /proc: binding it
	// again would race any other program).
	if hosts := listening(t)[port]; len(hosts) != 0 {
		t.Errorf("after a failed Start (and Close), the cluster port %d is still listened on (%v)", port, hosts)
	}
	// gRPC's Serve goroutine ends on its own once the server stopped.
	waitNone(t, "google.golang.org/grpc.(*Server).Serve") // gRPC gives nothing to wait on
}

// failingProvider is a cluster provider that cannot join.
type failingProvider struct{}

func (failingProvider) StartMember(*pacluster.Cluster) error { return errors.New("no way in") }

func (failingProvider) StartClient(*pacluster.Cluster) error { return errors.New("no way in") }

func (failingProvider) Shutdown(bool) error { return nil }

// waitNotListening waits until this process no longer listens on addr's
// port (read from /proc: binding the port to find out would race any other
// program that takes it meanwhile).
func waitNotListening(t *testing.T, what, addr string) {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, what+" no longer listened on", func() bool { return len(listening(t)[port]) == 0 })
}

// listening returns the TCP sockets this process listens on, by port:
// each one's local address as /proc/net/tcp and tcp6 write it (hex; IPv4
// 127.0.0.1 is 0100007F, IPv6 every address is 32 zeros).
func listening(t *testing.T) map[int][]string {
	t.Helper()
	mine := map[string]bool{} // the inodes of this process's sockets
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, fd := range fds {
		if link, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(link, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	out := map[int][]string{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue // no IPv6
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !mine[f[9]] { // 0A: LISTEN
				continue
			}
			host, port, ok := strings.Cut(f[1], ":")
			p, err := strconv.ParseInt(port, 16, 32)
			if !ok || err != nil {
				t.Fatalf("%s: bad line %q", file, line)
			}
			out[int(p)] = append(out[int(p)], host)
		}
	}
	return out
}

// TestNode_CloseDoesNotWaitOnHangingMember: Close does not wait on a grain
// request to a member that hangs with its ports open (protoactor's own
// request to it goes on, up to its fixed 5 s placement timeout): it
// returns while such a request is still in flight (submits keep starting
// new ones until Close), and frees the node's port. Not parallel: it counts
// the process's goroutines.
func TestNode_CloseDoesNotWaitOnHangingMember(t *testing.T) {
	testkit.Long(t)
	_, a, caller := hangingGrainCluster(t)
	const call = "cluster.(*admitter).grainRequestFor.func1("
	stop := make(chan struct{})
	var posters sync.WaitGroup
	for range 8 {
		posters.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if code, _ := a.Post(caller+"-key", "https://example.com/u"); code != http.StatusServiceUnavailable && code != 0 {
					t.Errorf("a submit whose grain hangs: %d, want 503 or no answer", code)
					return
				}
			}
		})
	}
	testkit.WaitFor(t, "grain requests to the hanging member in flight", func() bool { return goroutinesIn(call) >= 4 })
	addr := a.Node.Address()
	if err := a.Node.Close(); err != nil {
		t.Fatal(err)
	}
	inFlight := goroutinesIn(call)
	close(stop)
	posters.Wait()
	if inFlight == 0 {
		t.Fatal("Close returned only once the grain requests to the hanging member ended")
	}
	waitNotListening(t, "the node's port after Close", addr)
	waitNone(t, call) // they end by themselves
}
