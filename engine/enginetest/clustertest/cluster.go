// Package clustertest starts siftbatch clusters inside a test's process,
// for the external tests of package cluster and of any package that runs
// nodes (the HTTP API's, the CLI's): each node its own in-memory Badger
// store, runner, HTTP API (served by an httptest server) and cluster node,
// the nodes found through protoactor's test provider (one in-memory agent
// per cluster), under the cluster's mutual TLS with certificates of one CA
// made once per process ([NodeTLS]).
//
// It is apart from package enginetest because it imports the HTTP API and
// protoactor: enginetest stays importable by the HTTP API's internal
// tests, and light for the packages that run no cluster.
//
// A typical test:
//
//	func TestNode_Something(t *testing.T) {
//		t.Parallel()
//		c := clustertest.Start(t, clustertest.Options{}, "a", "b")
//		a, b := c.Node("a"), c.Node("b")
//		id := a.Submit(t, "alice-key", "https://example.com/1")
//		a.WaitDone(t, id)
//		code, _, body := b.Do(t, "GET", "/v1/batch/"+id, "alice-key", "")
//		…
//	}
//
// Starting a node takes about a second and stopping one two (protoactor's
// own pauses, on a goroutine each: [Cluster.AddAll] starts nodes at once,
// and the cleanup stops them at once).
package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// Keys is the API keys file every node reads unless [Options.Keys] is
// set: callers alice (key alice-key) and bob (key bob-key), and an admin,
// root (key root-key).
const Keys = "alice alice-key\nbob bob-key\nroot root-key admin\n"

// The defaults a zero field of [Options] takes.
const (
	// DefaultTimeout is each node's cluster.Config.Timeout.
	DefaultTimeout = 3 * time.Second
	// DefaultJobsPerCaller is each runner's JobsPerCaller.
	DefaultJobsPerCaller = 4
	// DefaultJobsTotal is each runner's JobsTotal.
	DefaultJobsTotal = 64
	// DefaultTargetsPerJob is each runner's and each API's TargetsPerJob.
	DefaultTargetsPerJob = 64
)

// Options configure a [Cluster]: what every node starts with. The zero
// value is ready to use.
type Options struct {
	// Keys is the API keys file of every node. Default [Keys].
	Keys string
	// Fetch is every runner's fetch. Default [Fetch] of the cluster's
	// Hold gate.
	Fetch engine.FetchFunc
	// Config is every runner's config; NodeTag and Admission are set per
	// node. Zero JobsPerCaller, JobsTotal and TargetsPerJob take
	// [DefaultJobsPerCaller], [DefaultJobsTotal], [DefaultTargetsPerJob].
	Config engine.Config
	// Timeout is every node's cluster.Config.Timeout. Default
	// [DefaultTimeout].
	Timeout time.Duration
	// Level is the level of the nodes' logs (into [Cluster.Logs]).
	// Default slog.LevelDebug, protoactor's own lines among them.
	Level slog.Leveler
	// Insecure starts every node in plaintext (cluster.Config.Insecure)
	// instead of with [NodeTLS].
	Insecure bool
}

// NodeOptions change one node from what its cluster's [Options] say; the
// zero value changes nothing.
type NodeOptions struct {
	// Now is the runner's clock (engine.Config.Now).
	Now func() time.Time
	// Answer wraps the handler that answers the other nodes' requests
	// (what Node.Start is given; the API's own server is not wrapped).
	Answer func(http.Handler) http.Handler
	// Route is the API's httpapi.Options.Wrap: it wraps each route's
	// handler, on the API's server and for the other nodes alike.
	Route func(route string, h http.Handler) http.Handler
	// Admission wraps the node's admission before the runner is given it.
	Admission func(engine.Admission) engine.Admission
	// Dir is the store's directory; default in memory.
	Dir string
	// Insecure starts the node in plaintext.
	Insecure bool
	// Provider replaces the cluster's test provider (Automanaged, say).
	Provider *cluster.Provider
	// Timeout is the node's cluster.Config.Timeout, if not zero.
	Timeout time.Duration
	// JobsPerCaller and JobsTotal are the runner's, if not zero.
	JobsPerCaller, JobsTotal int
	// MaxInFlight is the API's httpapi.Options.MaxInFlight.
	MaxInFlight int
	// Log replaces the node's logger (by default into [Cluster.Logs]).
	Log *slog.Logger
}

// Cluster is the nodes of one in-process cluster and what they share.
// Make one with [New] or [Start]; its nodes are stopped, and its Hold
// opened, when the test ends. Its methods are safe for concurrent use.
type Cluster struct {
	// Name is the cluster's name: unique in the process.
	Name string
	// Agent is protoactor's test provider's agent: its members. A test
	// may deregister a member to have it leave as a dead node does.
	Agent *test.InMemAgent
	// Logs holds every node's log lines, slog's text format.
	Logs *testkit.SyncBuffer
	// Hold holds every fetch of a URL that ends in /hold (with the
	// default Fetch) until it is opened.
	Hold *testkit.Gate

	t    testing.TB
	opts Options

	mu    sync.Mutex
	nodes []*Node
}

// Node is one node of a [Cluster] (or a [Solo] node: Node nil).
type Node struct {
	Name   string
	Store  *persistence.Store
	Runner *engine.Runner
	Node   *cluster.Node
	API    *httpapi.Handler
	// Srv serves API.
	Srv *httptest.Server

	stopped atomic.Bool
}

// names makes each cluster's name unique in the process.
var names atomic.Int64

// New returns a cluster of no node yet, configured by o. When the test
// ends its Hold is opened and every node still running is stopped, all at
// once.
func New(t testing.TB, o Options) *Cluster {
	t.Helper()
	c := &Cluster{Name: fmt.Sprintf("test-%d", names.Add(1)), Agent: test.NewInMemAgent(), Logs: &testkit.SyncBuffer{},
		Hold: testkit.NewGate(), t: t, opts: o}
	if c.opts.Fetch == nil {
		c.opts.Fetch = Fetch(c.Hold)
	}
	if c.opts.Keys == "" {
		c.opts.Keys = Keys
	}
	if c.opts.Level == nil {
		c.opts.Level = slog.LevelDebug
	}
	t.Cleanup(func() {
		c.Hold.Open()
		var wg sync.WaitGroup
		for _, n := range c.Nodes() {
			wg.Go(func() { c.Stop(n) })
		}
		wg.Wait()
	})
	return c
}

// Start returns a cluster configured by o, its nodes named names started
// at once, once every node knows every other by its name.
func Start(t testing.TB, o Options, names ...string) *Cluster {
	t.Helper()
	c := New(t, o)
	c.AddAll(names...)
	c.WaitMembers(len(names))
	return c
}

// Spec names a node to start and how it differs from its cluster's
// [Options].
type Spec struct {
	Name string
	NodeOptions
}

// StartSpecs returns a cluster configured by o, its nodes specs started
// at once, once every node knows every other by its name.
func StartSpecs(t testing.TB, o Options, specs ...Spec) *Cluster {
	t.Helper()
	c := New(t, o)
	c.AddSpecs(specs...)
	c.WaitMembers(len(specs))
	return c
}

// Fetch is a fetch that answers from the URL: one that ends in /hold waits
// at hold (failing with its context's error if that ends first); one
// whose last element follows /big/ is N bytes of "x"; anything else is
// "page " and the URL.
func Fetch(hold *testkit.Gate) engine.FetchFunc {
	return func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			if err := hold.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		case strings.Contains(t.URL, "/big/"):
			var n int
			_, _ = fmt.Sscanf(t.URL[strings.LastIndex(t.URL, "/")+1:], "%d", &n)
			return engine.Result{Content: strings.Repeat("x", n)}, nil
		}
		return engine.Result{Content: "page " + t.URL}, nil
	}
}

// Log returns a logger into c.Logs at the cluster's level.
func (c *Cluster) Log() *slog.Logger {
	return slog.New(slog.NewTextHandler(c.Logs, &slog.HandlerOptions{Level: c.opts.Level}))
}

// Nodes returns the cluster's nodes, in the order they were added,
// stopped ones included.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Node returns the last node added named name; nil if none.
func (c *Cluster) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.nodes) - 1; i >= 0; i-- {
		if c.nodes[i].Name == name {
			return c.nodes[i]
		}
	}
	return nil
}

// Add starts a node named name.
func (c *Cluster) Add(name string) *Node {
	c.t.Helper()
	return c.AddWith(name, NodeOptions{})
}

// AddAll starts nodes named names, all at once, and returns them in that
// order.
func (c *Cluster) AddAll(names ...string) []*Node {
	c.t.Helper()
	specs := make([]Spec, len(names))
	for i, name := range names {
		specs[i].Name = name
	}
	return c.AddSpecs(specs...)
}

// AddSpecs starts the nodes specs, all at once, and returns them in that
// order.
func (c *Cluster) AddSpecs(specs ...Spec) []*Node {
	c.t.Helper()
	out := make([]*Node, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { out[i], errs[i] = c.start(s.Name, s.NodeOptions) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
	return out
}

// AddWith starts a node named name, changed by o.
func (c *Cluster) AddWith(name string, o NodeOptions) *Node {
	c.t.Helper()
	n, err := c.start(name, o)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// start starts a node named name, changed by o; what it started is
// stopped at the test's end, even if it fails.
func (c *Cluster) start(name string, o NodeOptions) (*Node, error) {
	log := o.Log
	if log == nil {
		log = c.Log()
	}
	timeout := c.opts.Timeout
	if o.Timeout != 0 {
		timeout = o.Timeout
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ccfg := cluster.Config{Name: c.Name, Node: name, Addr: "127.0.0.1:0", Provider: cluster.ProtoactorProvider(test.NewTestProvider(c.Agent)),
		Timeout: timeout, Log: log}
	if o.Insecure || c.opts.Insecure {
		ccfg.Insecure = true
	} else {
		tlsCfg, err := nodeTLS(name)
		if err != nil {
			return nil, err
		}
		ccfg.TLS = tlsCfg
	}
	if o.Provider != nil {
		ccfg.Provider = *o.Provider
	}
	cn, err := cluster.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	store, err := persistence.Open(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	cfg := c.opts.Config
	cfg.NodeTag, cfg.Admission = cn.Tag(), cn.Admission()
	if o.Admission != nil {
		cfg.Admission = o.Admission(cfg.Admission)
	}
	cfg.JobsPerCaller = first(o.JobsPerCaller, cfg.JobsPerCaller, DefaultJobsPerCaller)
	cfg.JobsTotal = first(o.JobsTotal, cfg.JobsTotal, DefaultJobsTotal)
	cfg.TargetsPerJob = first(cfg.TargetsPerJob, DefaultTargetsPerJob)
	if o.Now != nil {
		cfg.Now = o.Now
	}
	r, err := engine.New(store, c.opts.Fetch, cfg, log)
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n := &Node{Name: name, Store: store, Runner: r, Node: cn}
	keys, err := httpapi.ReadKeys(strings.NewReader(c.opts.Keys))
	if err == nil {
		n.API, err = httpapi.New(r, keys, httpapi.Options{Cluster: cn, TargetsPerJob: cfg.TargetsPerJob, Log: log, Wrap: o.Route,
			MaxInFlight: o.MaxInFlight})
	}
	if err != nil {
		r.Close()
		_ = store.Close()
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	var answer http.Handler = n.API
	if o.Answer != nil {
		answer = o.Answer(n.API)
	}
	if err := cn.Start(r, answer); err != nil {
		r.Close()
		_ = store.Close()
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n.Srv = httptest.NewServer(n.API)
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n, nil
}

// first returns the first of vs that is not zero; zero if none.
func first(vs ...int) int {
	for _, v := range vs {
		if v != 0 {
			return v
		}
	}
	return 0
}

// Stop stops n: its server, its runner, its cluster node (gracefully: two
// seconds of protoactor's), its store. Stopping a node stopped already
// does nothing.
func (c *Cluster) Stop(n *Node) {
	if n.stopped.Swap(true) {
		return
	}
	n.stop()
}

// stop stops what n runs.
func (n *Node) stop() {
	if n.API != nil {
		n.API.EndWaits()
	}
	if n.Srv != nil {
		n.Srv.Close()
	}
	n.Runner.Close() // its jobs end while the node can still tell their callers' grains
	if n.Node != nil {
		_ = n.Node.Close()
	}
	_ = n.Store.Close()
}

// Stopped reports whether n was stopped through [Cluster.Stop].
func (n *Node) Stopped() bool { return n.stopped.Load() }

// WaitMembers waits until every node not stopped sees want members, each
// of which has said who it is (a member that has not reads as its
// address), failing the test after [testkit.Deadline].
func (c *Cluster) WaitMembers(want int) {
	c.t.Helper()
	deadline := time.NewTimer(testkit.Deadline)
	defer deadline.Stop()
	for _, n := range c.Nodes() {
		if n.Stopped() {
			continue
		}
		for {
			changed := n.Node.Changed()
			if ms := n.Node.Members(); len(ms) == want && !slices.ContainsFunc(ms, func(m string) bool { return strings.Contains(m, ":") }) {
				break
			}
			select {
			case <-changed:
			case <-deadline.C:
				c.t.Fatalf("node %s sees members %v, want %d named", n.Name, n.Node.Members(), want)
			}
		}
	}
}

// WaitSees waits until n sees want members (named or not), failing the
// test after [testkit.Deadline].
func WaitSees(t testing.TB, n *Node, want int) {
	t.Helper()
	deadline := time.NewTimer(testkit.Deadline)
	defer deadline.Stop()
	for {
		changed := n.Node.Changed()
		if len(n.Node.Members()) == want {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("node %s sees %v, want %d members", n.Name, n.Node.Members(), want)
		}
	}
}

// WaitKnows waits until n knows a member named name, failing the test
// after [testkit.Deadline].
func WaitKnows(t testing.TB, n *Node, name string) {
	t.Helper()
	deadline := time.NewTimer(testkit.Deadline)
	defer deadline.Stop()
	for {
		changed := n.Node.Changed()
		if slices.Contains(n.Node.Members(), name) {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("node %s does not know %s: %v", n.Name, name, n.Node.Members())
		}
	}
}

// Solo starts a node outside any cluster, with fetch and cfg (zero
// JobsPerCaller 4, TargetsPerJob 64) and [Keys]: what a single node
// answers, for a cluster's answers to be compared with. It is stopped when
// the test ends.
func Solo(t testing.TB, fetch engine.FetchFunc, cfg engine.Config) *Node {
	t.Helper()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.JobsPerCaller = first(cfg.JobsPerCaller, DefaultJobsPerCaller)
	cfg.TargetsPerJob = first(cfg.TargetsPerJob, DefaultTargetsPerJob)
	r, err := engine.New(store, fetch, cfg, nil)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	n := &Node{Name: "solo", Store: store, Runner: r}
	t.Cleanup(func() {
		if !n.stopped.Swap(true) {
			n.stop()
		}
	})
	keys, err := httpapi.ReadKeys(strings.NewReader(Keys))
	if err != nil {
		t.Fatal(err)
	}
	if n.API, err = httpapi.New(r, keys, httpapi.Options{TargetsPerJob: cfg.TargetsPerJob}); err != nil {
		t.Fatal(err)
	}
	n.Srv = httptest.NewServer(n.API)
	return n
}

// Do sends a request with key (a Bearer token) to n's API and returns the
// answer, failing the test on a transport error.
func (n *Node) Do(t testing.TB, method, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, n.Srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, n.Name, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s on %s: read: %v", method, path, n.Name, err)
	}
	return res.StatusCode, res.Header, b
}

// body is a submit's body of urls.
func body(urls []string) string {
	ts := make([]string, len(urls))
	for i, u := range urls {
		ts[i] = fmt.Sprintf(`{"url":%q}`, u)
	}
	return `{"targets":[` + strings.Join(ts, ",") + `]}`
}

// Submit submits urls on n for key's caller and returns the job's id,
// failing the test unless the answer is 202.
func (n *Node) Submit(t testing.TB, key string, urls ...string) string {
	t.Helper()
	code, _, b := n.Do(t, "POST", "/v1/batch", key, body(urls))
	if code != http.StatusAccepted {
		t.Fatalf("submit on %s: %d %s", n.Name, code, b)
	}
	var out struct{ ID string }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.ID
}

// Post submits urls on n for key's caller and returns the answer's status
// and id; a transport error (a node that went away under the request) is
// status 0. It never fails the test: for goroutines.
func (n *Node) Post(key string, urls ...string) (int, string) {
	req, err := http.NewRequest("POST", n.Srv.URL+"/v1/batch", strings.NewReader(body(urls)))
	if err != nil {
		return 0, ""
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	var out struct{ ID string }
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out.ID
}

// WaitDone waits, through n's runner, until job id has ended, failing the
// test after [testkit.Deadline].
func (n *Node) WaitDone(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	if _, err := n.Runner.Wait(ctx, id); err != nil {
		t.Fatalf("wait %s on %s: %v", id, n.Name, err)
	}
}
