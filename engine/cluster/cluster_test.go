package cluster_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clustertls"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

const testKeys = `alice alice-key
bob bob-key
`

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// node is one node of a test cluster: its own store, runner, API and
// cluster node, its API served by an httptest server.
type node struct {
	name   string
	store  *persistence.Store
	runner *engine.Runner
	node   *cluster.Node
	api    *httpapi.Handler
	srv    *httptest.Server
	closed bool
}

// testCluster is several nodes in this process, found through protoactor's
// test provider (one in-memory agent).
type testCluster struct {
	t       testing.TB
	agent   *test.InMemAgent
	name    string
	logs    *syncBuffer
	level   slog.Level // of the logs; Debug unless a test sets it before add
	release chan struct{}
	nodes   []*node
	fetch   engine.FetchFunc
	cfg     engine.Config // each node's runner's, but NodeTag and Admission
	keys    string        // the keys file of every node; "" is testKeys
	// insecure starts every node in plaintext (nodeOptions.insecure).
	insecure bool
}

// fetchOf answers from the URL: ".../hold" waits for release, ".../big/N"
// returns N bytes of content, anything else a short page.
func fetchOf(release <-chan struct{}) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			select {
			case <-release:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		case strings.Contains(t.URL, "/big/"):
			var n int
			_, _ = fmt.Sscanf(t.URL[strings.LastIndex(t.URL, "/")+1:], "%d", &n)
			return engine.Result{Content: strings.Repeat("x", n)}, nil
		}
		return engine.Result{Content: "page " + t.URL}, nil
	}
}

func newTestCluster(t testing.TB) *testCluster {
	tc := &testCluster{t: t, agent: test.NewInMemAgent(), name: fmt.Sprintf("test-%d", time.Now().UnixNano()),
		logs: &syncBuffer{}, level: slog.LevelDebug, release: make(chan struct{})}
	tc.fetch = fetchOf(tc.release)
	t.Cleanup(func() {
		select {
		case <-tc.release:
		default:
			close(tc.release)
		}
		var wg sync.WaitGroup
		for _, n := range tc.nodes {
			wg.Go(func() { tc.stop(n) })
		}
		wg.Wait()
	})
	return tc
}

// nodeOptions change what addWith starts.
type nodeOptions struct {
	now  func() time.Time                // the runner's clock; default time.Now
	wrap func(http.Handler) http.Handler // wraps the handler that answers the other nodes
	dir  string                          // the store's directory; default in memory
	// insecure starts the node in plaintext (Config.Insecure) instead of
	// with the tests' cluster TLS.
	insecure bool
	// provider, if set, replaces the test provider (the cluster's
	// in-memory agent): Automanaged, say.
	provider *cluster.Provider
}

// add starts a node named name.
func (tc *testCluster) add(name string) *node {
	tc.t.Helper()
	return tc.addWith(name, nodeOptions{})
}

// addWith starts a node named name, changed by o.
func (tc *testCluster) addWith(name string, o nodeOptions) *node {
	t := tc.t
	t.Helper()
	log := slog.New(slog.NewTextHandler(tc.logs, &slog.HandlerOptions{Level: tc.level}))
	ccfg := cluster.Config{Name: tc.name, Node: name, Addr: "127.0.0.1:0", TLS: nodeTLS(t, name),
		Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.agent)), Timeout: 3 * time.Second, Log: log}
	if o.insecure || tc.insecure {
		ccfg.TLS, ccfg.Insecure = nil, true
	}
	if o.provider != nil {
		ccfg.Provider = *o.provider
	}
	cn, err := cluster.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open(o.dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tc.cfg
	cfg.NodeTag, cfg.Admission = cn.Tag(), cn.Admission()
	if cfg.JobsPerCaller == 0 {
		cfg.JobsPerCaller = 4
	}
	cfg.TargetsPerJob = 64
	if o.now != nil {
		cfg.Now = o.now
	}
	r, err := engine.New(store, tc.fetch, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := tc.keys
	if keyFile == "" {
		keyFile = testKeys
	}
	keys, err := httpapi.ReadKeys(strings.NewReader(keyFile))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(r, keys, httpapi.Options{Cluster: cn, TargetsPerJob: 64, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	var answer http.Handler = api
	if o.wrap != nil {
		answer = o.wrap(api)
	}
	if err := cn.Start(r, answer); err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, store: store, runner: r, node: cn, api: api, srv: httptest.NewServer(api)}
	tc.nodes = append(tc.nodes, n)
	return n
}

// stop stops n: its server, its runner, its node (gracefully), its store.
func (tc *testCluster) stop(n *node) {
	if n.closed {
		return
	}
	n.closed = true
	n.api.EndWaits()
	n.srv.Close()
	n.runner.Close() // its jobs end while the node can still tell their callers' grains
	_ = n.node.Close()
	_ = n.store.Close()
}

// waitMembers waits until every live node sees want members, each of
// which has said who it is (a member that has not reads as its address).
func (tc *testCluster) waitMembers(want int) {
	tc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range tc.nodes {
		if n.closed {
			continue
		}
		for {
			changed := n.node.Changed()
			if ms := n.node.Members(); len(ms) == want && !slices.ContainsFunc(ms, func(m string) bool { return strings.Contains(m, ":") }) {
				break
			}
			select {
			case <-changed:
			case <-time.After(time.Until(deadline)):
				tc.t.Fatalf("node %s sees %d members, want %d", n.name, len(n.node.Members()), want)
			}
		}
	}
}

// do sends a request with key to n's API.
func do(t testing.TB, n *node, method, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, n.name, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s on %s: read: %v", method, path, n.name, err)
	}
	return res.StatusCode, res.Header, b
}

// submit submits urls on n for key's caller and returns the id.
func submit(t testing.TB, n *node, key string, urls ...string) string {
	t.Helper()
	var ts []string
	for _, u := range urls {
		ts = append(ts, fmt.Sprintf(`{"url":%q}`, u))
	}
	code, _, b := do(t, n, "POST", "/v1/batch", key, `{"targets":[`+strings.Join(ts, ",")+`]}`)
	if code != http.StatusAccepted {
		t.Fatalf("submit on %s: %d %s", n.name, code, b)
	}
	var out struct{ ID string }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.ID
}

// waitDone waits, through n's runner, until job id has ended.
func waitDone(t testing.TB, n *node, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.runner.Wait(ctx, id); err != nil {
		t.Fatalf("wait %s on %s: %v", id, n.name, err)
	}
}

func TestCluster_AnyNodeAnswersAnyJob(t *testing.T) {
	tc := newTestCluster(t)
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)

	id := submit(t, a, "alice-key", "https://example.com/1", "https://example.com/2")
	if !strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag("a"))) {
		t.Fatalf("id %s does not begin with a's tag %x", id, cluster.Tag("a"))
	}
	waitDone(t, a, id)

	for _, path := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "?results=1", "/v1/batch/" + id + "/1", "/v1/batch/" + id + "/9", "/v1/batch/" + id + "?wait=1s"} {
		wantCode, _, want := do(t, a, "GET", path, "alice-key", "")
		for _, n := range []*node{b, c} {
			code, _, got := do(t, n, "GET", path, "alice-key", "")
			if code != wantCode || !bytes.Equal(got, want) {
				t.Errorf("GET %s on %s: %d %s; on a: %d %s", path, n.name, code, got, wantCode, want)
			}
		}
		// Another caller: 404 everywhere, as on the job's node.
		wantCode, _, want = do(t, a, "GET", path, "bob-key", "")
		if wantCode != http.StatusNotFound {
			t.Fatalf("bob reads alice's job on a: %d", wantCode)
		}
		code, _, got := do(t, b, "GET", path, "bob-key", "")
		if code != wantCode || !bytes.Equal(got, want) {
			t.Errorf("bob GET %s on b: %d %s; on a: %d %s", path, code, got, wantCode, want)
		}
	}
	// An unknown key is refused by the node asked, before any forwarding.
	if code, _, _ := do(t, b, "GET", "/v1/batch/"+id, "nobody", ""); code != http.StatusUnauthorized {
		t.Errorf("unknown key on b: %d, want 401", code)
	}
}

func TestCluster_CancelAndWaitFromAnotherNode(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)

	id := submit(t, a, "alice-key", "https://example.com/hold", "https://example.com/2")
	// A wait on b ends when the job, on a, is cancelled from b.
	type answer struct {
		code int
		body []byte
	}
	waited := make(chan answer, 1)
	go func() {
		code, _, body := do(t, b, "GET", "/v1/batch/"+id+"?wait=20s", "alice-key", "")
		waited <- answer{code, body}
	}()
	if code, _, body := do(t, b, "DELETE", "/v1/batch/"+id, "bob-key", ""); code != http.StatusNotFound {
		t.Fatalf("bob cancels alice's job on b: %d %s", code, body)
	}
	code, _, body := do(t, b, "DELETE", "/v1/batch/"+id, "alice-key", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"cancelled":true`) {
		t.Fatalf("cancel on b: %d %s", code, body)
	}
	select {
	case w := <-waited:
		if w.code != http.StatusOK || !strings.Contains(string(w.body), `"status":"cancelled"`) {
			t.Fatalf("wait on b: %d %s", w.code, w.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the wait on b did not end with the cancel")
	}
	if code, _, body := do(t, b, "DELETE", "/v1/batch/"+id, "alice-key", ""); code != http.StatusConflict {
		t.Fatalf("cancel again on b: %d %s, want 409", code, body)
	}
}

func TestCluster_LargeResultsInParts(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	// 3 results of 1 MiB: each crosses in parts of at most 256 KiB.
	id := submit(t, a, "alice-key", "https://example.com/big/1048576", "https://example.com/big/1048577", "https://example.com/big/10")
	waitDone(t, a, id)
	_, _, want := do(t, a, "GET", "/v1/batch/"+id+"?results=1", "alice-key", "")
	code, _, got := do(t, b, "GET", "/v1/batch/"+id+"?results=1", "alice-key", "")
	if code != http.StatusOK || !bytes.Equal(got, want) || len(got) < 2<<20 {
		t.Fatalf("results on b: %d, %d bytes; on a %d bytes", code, len(got), len(want))
	}
	var job struct {
		Targets []struct {
			Result struct{ Content string }
		}
	}
	if err := json.Unmarshal(got, &job); err != nil || len(job.Targets[1].Result.Content) != 1048577 {
		t.Fatalf("results on b do not parse: %v", err)
	}
}

func TestCluster_NodeThatLeftAnswers503(t *testing.T) {
	tc := newTestCluster(t)
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	id := submit(t, c, "alice-key", "https://example.com/1")
	waitDone(t, c, id)
	if code, _, _ := do(t, a, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
		t.Fatalf("GET on a before c left: %d", code)
	}
	tc.stop(c)
	tc.waitMembers(2)
	for _, n := range []*node{a, b} {
		code, h, body := do(t, n, "GET", "/v1/batch/"+id, "alice-key", "")
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), `"node unavailable"`) {
			t.Errorf("GET on %s after c left: %d %q %s", n.name, code, h.Get("Retry-After"), body)
		}
	}
	// An id no node ever had is answered as before: 404.
	if code, _, _ := do(t, a, "GET", "/v1/batch/ffffffff00112233445566778899aabb", "alice-key", ""); code != http.StatusNotFound {
		t.Errorf("unknown id on a: %d, want 404", code)
	}
	// The list names the node that left.
	code, _, body := do(t, a, "GET", "/v1/batch", "alice-key", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"unavailable_nodes":["c"]`) {
		t.Errorf("list on a after c left: %d %s", code, body)
	}
}

func TestCluster_ListMergesEveryNode(t *testing.T) {
	tc := newTestCluster(t)
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	want := map[string]bool{}
	for i := range 9 {
		n := []*node{a, b, c}[i%3]
		id := submit(t, n, "alice-key", fmt.Sprintf("https://example.com/%d", i))
		waitDone(t, n, id)
		want[id] = true
	}
	bobs := submit(t, b, "bob-key", "https://example.com/bob")
	waitDone(t, b, bobs)

	// Pages of 4 from c, followed by cursor, hold each of alice's 9 jobs
	// once, newest first, and none of bob's.
	var (
		got    []string
		cursor string
	)
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("too many pages")
		}
		code, _, body := do(t, c, "GET", "/v1/batch?limit=4&cursor="+cursor, "alice-key", "")
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, body)
		}
		var out struct {
			Jobs []struct {
				ID        string `json:"id"`
				CreatedAt int64  `json:"created_at"`
			} `json:"jobs"`
			NextCursor  string   `json:"next_cursor"`
			Unavailable []string `json:"unavailable_nodes"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Unavailable) != 0 {
			t.Fatalf("unavailable nodes: %v", out.Unavailable)
		}
		for _, j := range out.Jobs {
			got = append(got, j.ID)
		}
		if out.NextCursor == "" {
			break
		}
		cursor = out.NextCursor
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d jobs, want %d: %v", len(got), len(want), got)
	}
	seen := map[string]bool{}
	for _, id := range got {
		if !want[id] || seen[id] {
			t.Fatalf("listed %s: not alice's, or twice", id)
		}
		seen[id] = true
	}
	// Newest first: the order of ListAt's cursors, across the nodes.
	var all []engine.Job
	for _, n := range []*node{a, b, c} {
		jobs, _, err := n.runner.List("alice", engine.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, jobs...)
	}
	for i := 1; i < len(got); i++ {
		if createdOf(all, got[i]) > createdOf(all, got[i-1]) {
			t.Fatalf("job %d is newer than job %d", i, i-1)
		}
	}
}

func createdOf(jobs []engine.Job, id string) int64 {
	for _, j := range jobs {
		if j.ID == id {
			return j.CreatedAt
		}
	}
	return -1
}

// testCA is the cluster CA of this package's tests, made once, and the TLS
// configurations it has issued, by node name.
var testCA struct {
	once  sync.Once
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	pem   []byte
	err   error
	mu    sync.Mutex
	nodes map[string]*clustertls.Config
}

// nodeTLS returns the TLS configuration of a node named name, its
// certificate issued by the tests' cluster CA (the same for every test):
// as `siftbatch cluster-certs` issues it (clustertls.Generate's template).
func nodeTLS(t testing.TB, name string) *clustertls.Config {
	t.Helper()
	testCA.once.Do(func() {
		set, err := clustertls.Generate([]string{"unused"}, nil, time.Now())
		if err != nil {
			testCA.err = err
			return
		}
		testCA.pem = set.CA.Cert
		block, _ := pem.Decode(set.CA.Cert)
		if testCA.cert, testCA.err = x509.ParseCertificate(block.Bytes); testCA.err != nil {
			return
		}
		kblock, _ := pem.Decode(set.CA.Key)
		key, err := x509.ParsePKCS8PrivateKey(kblock.Bytes)
		if err != nil {
			testCA.err = err
			return
		}
		testCA.key = key.(*ecdsa.PrivateKey)
		testCA.nodes = map[string]*clustertls.Config{}
	})
	if testCA.err != nil {
		t.Fatal(testCA.err)
	}
	testCA.mu.Lock()
	defer testCA.mu.Unlock()
	if c, ok := testCA.nodes[name]; ok {
		return c
	}
	c, err := issueTLS(testCA.cert, testCA.key, testCA.pem, name)
	if err != nil {
		t.Fatal(err)
	}
	testCA.nodes[name] = c
	return c
}

// issueTLS signs a certificate for node name with the CA (cert, key;
// caPEM its certificate) and returns its TLS configuration.
func issueTLS(ca *x509.Certificate, caKey *ecdsa.PrivateKey, caPEM []byte, name string) (*clustertls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return clustertls.New(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// remoteTLS returns the options of protoactor's remote that give a bare
// protoactor member (a test's fake node) the cluster's mutual TLS as node
// name.
func remoteTLS(t testing.TB, name string) []remote.ConfigOption {
	c := nodeTLS(t, name)
	return []remote.ConfigOption{
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(c.Server()))),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(c.Client()))),
	}
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

// TestNode_ListensOnlyOnGivenHost: a node given 127.0.0.1 addresses
// listens on 127.0.0.1 only: its remote's port and the automanaged
// provider's manage port (protoactor's own would listen on every
// interface), which answers the peers' polls.
func TestNode_ListensOnlyOnGivenHost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	manage := l.Addr().String()
	managePort := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	one := single(t)
	n, err := cluster.New(cluster.Config{Name: "listen", Node: "n", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "n"),
		Provider: cluster.Automanaged(manage, []string{manage}, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(one.runner, one.api); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitUntil(t, "the node is a member", func() bool { return n.Membership().Member })
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
