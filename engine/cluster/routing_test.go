package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	clustertest "github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// waitTimeout bounds every wait on a condition in these tests.
const waitTimeout = 20 * time.Second

// newSolo starts a single node, no cluster, with the test cluster's fetch
// and config: what a cluster's answers are compared with.
func newSolo(t *testing.T, tc *testCluster) *node {
	t.Helper()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.New(store, tc.fetch, engine.Config{JobsPerCaller: 4, TargetsPerJob: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(r, keys, httpapi.Options{TargetsPerJob: 64})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: "solo", store: store, runner: r, api: api, srv: httptest.NewServer(api)}
	t.Cleanup(func() {
		api.EndWaits()
		n.srv.Close()
		r.Close()
		_ = store.Close()
	})
	return n
}

// waitUntil waits, up to waitTimeout, until cond holds.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// goroutinesIn counts the goroutines of this process whose stack holds
// fn (a function's name as a stack shows it: "cluster.(*session).serve(").
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// The functions whose goroutines answer a forwarded request: the holder's
// session, and the asking node's Forward.
const (
	holderAnswering = "cluster.(*session).serve("
	askerForwarding = "cluster.(*Node).Forward("
)

// get sends GET path with key to n's API under ctx, and returns the answer
// with its body not read.
func get(ctx context.Context, t testing.TB, n *node, path, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, n.name, err)
	}
	return res
}

// bigURLs returns count URLs whose pages are size bytes.
func bigURLs(host string, count, size int) []string {
	urls := make([]string, count)
	for i := range urls {
		urls[i] = fmt.Sprintf("https://%s/%d/big/%d", host, i, size)
	}
	return urls
}

// TestCluster_NotFoundAsOnOneNode: a malformed id, an idx out of range or
// malformed, an id with a member's tag that no job has, another caller's
// job: answered by a cluster's node exactly as by a single node (status,
// headers, body byte for byte).
func TestCluster_NotFoundAsOnOneNode(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	solo := newSolo(t, tc)
	held := submit(t, a, "alice-key", "https://example.com/1", "https://example.com/2")
	waitDone(t, a, held)
	mine := submit(t, solo, "alice-key", "https://example.com/1", "https://example.com/2")
	waitDone(t, solo, mine)
	missing := held[:8] + "00112233445566778899aabb" // a's tag, no job

	type request struct{ method, path, key string }
	var cases []request
	for _, id := range []string{"xyz", held[:31], held + "0", strings.ToUpper(held), held[:31] + "g", held[:8] + strings.Repeat("-", 24), missing} {
		for _, path := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "?results=1", "/v1/batch/" + id + "?wait=1s", "/v1/batch/" + id + "/0"} {
			cases = append(cases, request{"GET", path, "alice-key"})
		}
		cases = append(cases, request{"DELETE", "/v1/batch/" + id, "alice-key"})
	}
	// held's path on b, mine's on solo: the same job but for its id.
	for _, suffix := range []string{"/2", "/99999", "/100000", "/01", "/-1", "/x", "/1/x", "?wait=x", "?wait=-1s"} {
		cases = append(cases, request{"GET", "/v1/batch/{id}" + suffix, "alice-key"})
	}
	for _, path := range []string{"/v1/batch/{id}", "/v1/batch/{id}?results=1", "/v1/batch/{id}/1"} {
		cases = append(cases, request{"GET", path, "bob-key"})
	}
	cases = append(cases, request{"DELETE", "/v1/batch/{id}", "bob-key"})

	for _, c := range cases {
		wantCode, wantHeader, want := do(t, solo, c.method, strings.ReplaceAll(c.path, "{id}", mine), c.key, "")
		code, header, got := do(t, b, c.method, strings.ReplaceAll(c.path, "{id}", held), c.key, "")
		if wantCode != http.StatusNotFound && wantCode != http.StatusBadRequest {
			t.Fatalf("%s %s on one node: %d %s, want 404 or 400", c.method, c.path, wantCode, want)
		}
		if code != wantCode || !bytes.Equal(got, want) {
			t.Errorf("%s %s by %s on b: %d %s\non one node: %d %s", c.method, c.path, c.key, code, got, wantCode, want)
		}
		wantHeader.Del("Date")
		header.Del("Date")
		if fmt.Sprint(header) != fmt.Sprint(wantHeader) {
			t.Errorf("%s %s by %s on b: header %v\non one node: %v", c.method, c.path, c.key, header, wantHeader)
		}
	}
}

// expiringWriter calls expire after its first Write.
type expiringWriter struct {
	http.ResponseWriter
	expire func()
}

func (e *expiringWriter) Write(p []byte) (int, error) {
	n, err := e.ResponseWriter.Write(p)
	e.expire()
	return n, err
}

// stallingWriter writes its first Write, then stalls: each later one waits
// until its request is done, and says on stalled that it waits.
type stallingWriter struct {
	http.ResponseWriter
	ctx     context.Context
	writes  int
	stalled chan<- struct{}
}

func (s *stallingWriter) Write(p []byte) (int, error) {
	if s.writes++; s.writes == 1 {
		return s.ResponseWriter.Write(p)
	}
	select {
	case s.stalled <- struct{}{}:
	default:
	}
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

// readCut reads a ?results=1 answer that must be cut short: 200, the body
// ending before its end (an unexpected EOF), not valid JSON, at least
// least bytes long.
func readCut(t *testing.T, n *node, id string, least int) {
	t.Helper()
	res := get(context.Background(), t, n, "/v1/batch/"+id+"?results=1", "alice-key")
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("results on %s: %d, read error %v; want 200 and an unexpected EOF", n.name, res.StatusCode, err)
	}
	if len(body) < least || json.Valid(body) {
		t.Fatalf("results on %s: %d bytes, valid JSON %v; want at least %d and incomplete JSON", n.name, len(body), json.Valid(body), least)
	}
}

// TestCluster_CutShortAnswer: an answer the holder cuts short (its job is
// deleted while it is written), or that stops coming (the holder's writer
// stalls), is cut short on the asking node too: its client sees the
// connection dropped before the end of the body, never a whole JSON; the
// holder's answer ends.
func TestCluster_CutShortAnswer(t *testing.T) {
	tc := newTestCluster(t)
	// a: the job expires (its clock moves past the TTL) once the first
	// result of a forwarded answer is out.
	clk := &fakeClock{now: time.Now()}
	var expired atomic.Bool
	a := tc.addWith("a", nodeOptions{now: clk.Now, wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&expiringWriter{ResponseWriter: w, expire: func() {
				if !expired.Swap(true) {
					clk.Advance(engine.DefaultTTL + time.Hour)
				}
			}}, r)
		})
	}})
	// c: a forwarded answer's writer stalls after its first Write.
	stalled, returned := make(chan struct{}, 1), make(chan struct{}, 1)
	c := tc.addWith("c", nodeOptions{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { returned <- struct{}{} }()
			h.ServeHTTP(&stallingWriter{ResponseWriter: w, ctx: r.Context(), stalled: stalled}, r)
		})
	}})
	b := tc.add("b")
	tc.waitMembers(3)

	const size = 300 << 10 // a result: more than a part
	deleted := submit(t, a, "alice-key", bigURLs("a.example.com", 3, size)...)
	waitDone(t, a, deleted)
	stalling := submit(t, c, "alice-key", bigURLs("c.example.com", 3, size)...)
	waitDone(t, c, stalling)

	t.Run("JobDeletedWhileWritten", func(t *testing.T) {
		readCut(t, b, deleted, size)
		if !strings.Contains(tc.logs.String(), "answer cut short: the job was deleted while it was written") {
			t.Errorf("no log line on a for the cut")
		}
		if code, _, body := do(t, b, "GET", "/v1/batch/"+deleted, "alice-key", ""); code != http.StatusNotFound {
			t.Errorf("the deleted job on b: %d %s, want 404", code, body)
		}
	})

	t.Run("HolderStopsAnswering", func(t *testing.T) {
		start := time.Now()
		readCut(t, b, stalling, 256<<10)
		t.Logf("cut after %v", time.Since(start))
		select {
		case <-stalled:
		default:
			t.Fatal("c's writer never stalled")
		}
		if !strings.Contains(tc.logs.String(), "answer cut short: the node stopped answering") {
			t.Errorf("no log line on b for the cut")
		}
		// b released the answer: c's handler returns, its session ends.
		select {
		case <-returned:
		case <-time.After(waitTimeout):
			t.Fatal("c's handler is still answering")
		}
		waitUntil(t, "c's answer has ended", func() bool { return goroutinesIn(holderAnswering) == 0 })
	})
}

// TestCluster_ClientLeavesReleasesHolder: a client that goes away in the
// middle of a large ?results=1 from another node ends the answer on both
// nodes: the asking node's Forward returns, the holder's session ends
// (without waiting out its idle timeout), and both still answer.
func TestCluster_ClientLeavesReleasesHolder(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	id := submit(t, a, "alice-key", bigURLs("example.com", 16, 1<<20)...) // 16 MiB: more than the sockets buffer
	waitDone(t, a, id)

	for _, leave := range []string{"close", "cancel"} {
		t.Run(leave, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := get(ctx, t, b, "/v1/batch/"+id+"?results=1", "alice-key")
			if _, err := io.ReadFull(res.Body, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			if n := goroutinesIn(holderAnswering); n != 1 {
				t.Fatalf("%d answers on a, want 1 under way", n)
			}
			if leave == "close" {
				_ = res.Body.Close()
			} else {
				cancel()
				_ = res.Body.Close()
			}
			waitUntil(t, "the answers have ended", func() bool {
				return goroutinesIn(holderAnswering) == 0 && goroutinesIn(askerForwarding) == 0
			})
		})
	}
	// Both still answer: the holder's turn was given back.
	for _, n := range []*node{a, b} {
		if code, _, body := do(t, n, "GET", "/v1/batch/"+id+"/3", "alice-key", ""); code != http.StatusOK || len(body) < 1<<20 {
			t.Errorf("GET /3 on %s: %d, %d bytes", n.name, code, len(body))
		}
	}
}

// TestCluster_ForwardedNeverForwardedAgain: a forwarded request about a
// job the node asked does not hold is answered by that node as its own
// (404), never forwarded on to the job's node.
func TestCluster_ForwardedNeverForwardedAgain(t *testing.T) {
	tc := newTestCluster(t)
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	id := submit(t, c, "alice-key", "https://example.com/1")
	waitDone(t, c, id)
	// b forwards a client's request to c.
	code, _, want := do(t, b, "GET", "/v1/batch/"+id, "alice-key", "")
	if code != http.StatusOK {
		t.Fatalf("GET on b: %d %s", code, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The same request, forwarded by a to c: c's answer.
	code, got, err := cluster.Ask(ctx, a.node, c.node, "GET", "/v1/batch/"+id, "Bearer alice-key")
	if err != nil || code != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("forwarded to c: %d %s %v; want 200 %s", code, got, err, want)
	}
	// Forwarded by a to b: b answers it as its own, not holding the job.
	_, _, notFound := do(t, b, "GET", "/v1/batch/ffffffff00112233445566778899aabb", "alice-key", "")
	code, got, err = cluster.Ask(ctx, a.node, b.node, "GET", "/v1/batch/"+id, "Bearer alice-key")
	if err != nil || code != http.StatusNotFound || !bytes.Equal(got, notFound) {
		t.Fatalf("forwarded to b: %d %s %v; want 404 %s", code, got, err, notFound)
	}
	code, got, err = cluster.Ask(ctx, a.node, b.node, "DELETE", "/v1/batch/"+id, "Bearer alice-key")
	if err != nil || code != http.StatusNotFound {
		t.Fatalf("DELETE forwarded to b: %d %s %v; want 404", code, got, err)
	}
	// A forwarded request is authenticated again by the node asked.
	code, _, err = cluster.Ask(ctx, a.node, c.node, "GET", "/v1/batch/"+id, "Bearer nobody")
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("unknown key forwarded to c: %d %v; want 401", code, err)
	}
}

// TestCluster_LogsHoldNoSecrets: whatever crosses the cluster — reads,
// results, waits, cancels, lists, a client leaving a stream, a node
// leaving — the nodes' logs at Debug, protoactor's own lines among them,
// hold no target URL, no host of one, no API key.
func TestCluster_LogsHoldNoSecrets(t *testing.T) {
	tc := newTestCluster(t)
	const host = "secret-host.example"
	page := fetchOf(tc.release)
	tc.fetch = func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/fail") {
			return engine.Result{}, fmt.Errorf("fetch %s: connection refused", tg.URL)
		}
		return page(ctx, c, tg)
	}
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)

	urls := []string{"https://" + host + "/page?token=s3cr3t", "https://" + host + "/fail", "https://" + host + "/big/300000"}
	done := submit(t, a, "alice-key", urls...)
	waitDone(t, a, done)
	live := submit(t, a, "alice-key", append(urls, "https://"+host+"/hold")...)
	for _, path := range []string{"", "?results=1", "/0", "/1", "/2", "?wait=1ms"} {
		for _, id := range []string{done, live} {
			do(t, b, "GET", "/v1/batch/"+id+path, "alice-key", "")
			do(t, b, "GET", "/v1/batch/"+id+path, "bob-key", "")
		}
	}
	// An answer that comes once its asking node has stopped waiting:
	// protoactor logs it as a dead letter, message (results) and all.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, _, err := cluster.Ask(ctx, b.node, a.node, "GET", "/v1/batch/"+live+"?wait=1s", "Bearer alice-key")
	cancel()
	if err == nil {
		t.Fatal("a wait of 1s answered within 200ms")
	}
	waitUntil(t, "the late answer is a dead letter", func() bool {
		return strings.Contains(tc.logs.String(), `Id:\"$`)
	})
	do(t, c, "GET", "/v1/batch?limit=1", "alice-key", "")
	do(t, c, "GET", "/v1/batch?cursor=bad", "alice-key", "")
	if code, _, body := do(t, b, "DELETE", "/v1/batch/"+live, "alice-key", ""); code != http.StatusOK {
		t.Fatalf("cancel on b: %d %s", code, body)
	}
	close(tc.release) // the held target, in flight, ends: the worker is free

	// A client leaves a stream: parts go to an asking node that no longer
	// waits for them.
	big := submit(t, a, "alice-key", bigURLs(host, 8, 1<<20)...)
	waitDone(t, a, big)
	ctx, cancel = context.WithCancel(context.Background())
	res := get(ctx, t, b, "/v1/batch/"+big+"?results=1", "alice-key")
	if _, err := io.ReadFull(res.Body, make([]byte, 1<<10)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = res.Body.Close()
	waitUntil(t, "the answers have ended", func() bool {
		return goroutinesIn(holderAnswering) == 0 && goroutinesIn(askerForwarding) == 0
	})

	// A node leaves: its jobs are unavailable.
	onC := submit(t, c, "alice-key", append(urls, "https://"+host+"/on-c")...)
	waitDone(t, c, onC)
	do(t, a, "GET", "/v1/batch/"+onC+"?results=1", "alice-key", "")
	tc.stop(c)
	tc.waitMembers(2)
	for _, n := range []*node{a, b} {
		if code, _, _ := do(t, n, "GET", "/v1/batch/"+onC, "alice-key", ""); code != http.StatusServiceUnavailable {
			t.Errorf("c's job on %s after c left: %d, want 503", n.name, code)
		}
		do(t, n, "GET", "/v1/batch", "alice-key", "")
	}

	logs := tc.logs.String()
	for _, want := range []string{"level=DEBUG", "lib=protoactor", "msg=[DeadLetter]", "cluster node started", "node=c"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs hold no %q: the test tests nothing", want)
		}
	}
	for _, secret := range []string{host, "secret-host", "s3cr3t", "/page", "/fail", "/big/", "alice-key", "bob-key", "Bearer", "http://", "https://"} {
		if i := strings.Index(logs, secret); i >= 0 {
			start := max(0, strings.LastIndexByte(logs[:i], '\n')+1)
			end := i + strings.IndexByte(logs[i:], '\n')
			t.Errorf("the logs hold %q:\n%s", secret, logs[start:end])
		}
	}
}

// TestNew_BadConfig: New refuses each bad config with an error.
func TestNew_BadConfig(t *testing.T) {
	provider := cluster.Automanaged("127.0.0.1:6000", []string{"127.0.0.1:6000"}, 0)
	good := cluster.Config{Name: "c", Node: "n", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "n"), Provider: provider}
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
		"another node's certificate": func(c *cluster.Config) { c.TLS = nodeTLS(t, "another") },
	} {
		cfg := good
		change(&cfg)
		n, err := cluster.New(cfg)
		if err == nil || n != nil {
			t.Errorf("%s: New gave %v, %v; want an error", name, n, err)
		}
	}
}

// failingProvider is a cluster provider that cannot join.
type failingProvider struct{}

func (failingProvider) StartMember(*pacluster.Cluster) error { return errors.New("no way in") }
func (failingProvider) StartClient(*pacluster.Cluster) error { return errors.New("no way in") }
func (failingProvider) Shutdown(bool) error                  { return nil }

// TestNode_StartErrors: Start returns an error, having started nothing,
// on an address in use (the remote's, or the automanaged provider's), on
// a bad provider config, a provider that fails (giving the remote's port
// back), a nil runner or handler, a second Start and a Start after Close.
func TestNode_StartErrors(t *testing.T) {
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r, err := engine.New(store, fetchOf(nil), engine.Config{}, nil)
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
	free := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	newNode := func(t *testing.T, addr string, p cluster.Provider) *cluster.Node {
		n, err := cluster.New(cluster.Config{Name: "start-errors", Node: "n", Addr: addr, TLS: nodeTLS(t, "n"), Provider: p})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	testProvider := cluster.ProtoactorProvider(clustertest.NewTestProvider(clustertest.NewInMemAgent()))

	for name, n := range map[string]*cluster.Node{
		"remote address in use":       newNode(t, inUse, testProvider),
		"manage address in use":       newNode(t, "127.0.0.1:0", cluster.Automanaged(inUse, []string{inUse}, 0)),
		"manage address without port": newNode(t, "127.0.0.1:0", cluster.Automanaged("127.0.0.1:0", []string{"127.0.0.1:1"}, 0)),
		"no peers":                    newNode(t, "127.0.0.1:0", cluster.Automanaged(free(t), nil, 0)),
		"bad peer":                    newNode(t, "127.0.0.1:0", cluster.Automanaged(free(t), []string{"nowhere"}, 0)),
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
	addr := free(t)
	n := newNode(t, addr, cluster.ProtoactorProvider(failingProvider{}))
	if err := n.Start(r, h); err == nil || !strings.Contains(err.Error(), "no way in") {
		t.Errorf("a failing provider: Start gave %v", err)
	}
	waitUntil(t, "the remote's port is free", func() bool {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			_ = l.Close()
		}
		return err == nil
	})
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

// firstWrite watches the answers to one caller's GET /v1/batch/{id}/{idx}
// on a node (the forwarded ones included): started is closed when the
// first Write of such an answer begins, returned when it returns.
type firstWrite struct {
	auth              string
	started, returned chan struct{}
	once              sync.Once
}

func (f *firstWrite) wrap(route string, h http.Handler) http.Handler {
	if route != "GET /v1/batch/{id}/{idx}" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != f.auth {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&firstWriteWriter{ResponseWriter: w, f: f}, r)
	})
}

type firstWriteWriter struct {
	http.ResponseWriter
	f *firstWrite
}

func (w *firstWriteWriter) Write(p []byte) (int, error) {
	first := false
	w.f.once.Do(func() { first = true; close(w.f.started) })
	n, err := w.ResponseWriter.Write(p)
	if first {
		close(w.f.returned)
	}
	return n, err
}

// smallSendBuffers is a listener whose connections have a small kernel
// send buffer, so that an answer to a client that does not read soon
// blocks its Write (with the defaults, megabytes sit in the kernel).
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// TestCluster_SlowReaderHoldsNoTurn: a client of node a that never reads
// its socket, reading a 1 MiB result of a job node b holds, stalls that
// answer on b (b sends a part each time a pulls one, and a pulls the next
// once its client took the last), but takes no turn from b's own callers
// (MaxInFlight 1 on both): while it is stuck, b answers its reads of a
// job, a list and a cancel, and a answers its own and b's jobs. Its
// connection's end ends the answer on b.
func TestCluster_SlowReaderHoldsNoTurn(t *testing.T) {
	tc := newTestCluster(t)
	watch := &firstWrite{auth: "Bearer alice-key", started: make(chan struct{}), returned: make(chan struct{})}
	a := tc.addOpts("a", nodeOpts{maxInFlight: 1})
	b := tc.addOpts("b", nodeOpts{maxInFlight: 1, wrap: watch.wrap})
	tc.waitMembers(2)
	big := submit(t, b, "alice-key", "https://example.com/big/1048576")
	waitDone(t, b, big)
	theirs := submit(t, b, "bob-key", "https://example.com/1", "https://example.com/2")
	waitDone(t, b, theirs)
	onA := submit(t, a, "bob-key", "https://example.com/3")
	waitDone(t, a, onA)
	live := submit(t, b, "bob-key", "https://example.com/hold")

	srv := httptest.NewUnstartedServer(a.api)
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(1 << 10)
	fmt.Fprintf(conn, "GET /v1/batch/%s/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\n\r\n", big)
	select {
	case <-watch.started:
	case <-time.After(waitTimeout):
		t.Fatal("b never began the slow reader's answer")
	}

	for _, rq := range []struct {
		n            *node
		method, path string
	}{
		{b, http.MethodGet, "/v1/batch/" + theirs},
		{b, http.MethodGet, "/v1/batch/" + theirs + "?results=1"},
		{b, http.MethodGet, "/v1/batch"},
		{a, http.MethodGet, "/v1/batch/" + onA},
		{a, http.MethodGet, "/v1/batch/" + theirs},
		{a, http.MethodGet, "/v1/batch"},
		{b, http.MethodDelete, "/v1/batch/" + live},
	} {
		code, _, body := do(t, rq.n, rq.method, rq.path, "bob-key", "")
		if code != http.StatusOK {
			t.Fatalf("%s %s on %s: %d %s", rq.method, rq.path, rq.n.name, code, body)
		}
		select {
		case <-watch.returned:
			t.Fatalf("%s %s on %s answered only once b's write to the slow reader had returned", rq.method, rq.path, rq.n.name)
		default:
		}
	}

	conn.Close()
	select {
	case <-watch.returned:
	case <-time.After(waitTimeout):
		t.Fatal("b's answer to the slow reader did not end with its connection")
	}
}

// TestCluster_ForwardedPostRefused: a POST that reaches a node as a
// forwarded request (the cluster's Request carries no body; no node
// forwards a submit, but a peer may send one) is answered 405 with a hint
// to submit to any node, never 500, and the node's handler does not panic.
func TestCluster_ForwardedPostRefused(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, uri := range []string{"/v1/batch", "/v1/batch/" + fmt.Sprintf("%x", cluster.Tag("b")) + "00112233445566778899aabb"} {
		code, body, err := cluster.Ask(ctx, a.node, b.node, "POST", uri, "Bearer alice-key")
		if err != nil || code != http.StatusMethodNotAllowed {
			t.Fatalf("POST %s forwarded to b: %d %s %v; want 405", uri, code, body, err)
		}
		var e struct{ Error, Hint string }
		if json.Unmarshal(body, &e) != nil || e.Hint == "" {
			t.Fatalf("POST %s forwarded to b: %s", uri, body)
		}
	}
	code, body, _ := cluster.Ask(ctx, a.node, b.node, "POST", "/v1/batch", "Bearer alice-key")
	if !strings.Contains(string(body), "submit to any node: POST is not forwarded") {
		t.Fatalf("forwarded submit: %d %s", code, body)
	}
	if strings.Contains(tc.logs.String(), "panicked") {
		t.Fatalf("a handler panicked:\n%s", tc.logs.String())
	}
	// b still takes a submit of its own.
	waitDone(t, b, submit(t, b, "alice-key", "https://example.com/1"))
}
