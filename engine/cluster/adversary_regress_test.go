package cluster_test

// Adversarial tests of issue 16 that FAIL: each is a defect, named in its
// comment with the rule it breaks and what was observed. Helpers are in
// adversary_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// TestAdvRegress_HolderCloseDuringLongPoll: the holder leaves (Node.Close)
// while long-polls (?wait=) about its job are forwarded to it.
//
// Rule (cluster.Forward, Node.Close, issue 16 item 4): an answer the other
// node cut short is cut short here too; a job whose node is not a member
// answers 503 "node unavailable". A 200 must be the job, as JSON.
//
// Observed: about half the clients get "200 OK" with an EMPTY body, cleanly
// ended. On Close, the holder's handler returns without writing (its
// request context is cancelled), and session.serve then sends the last
// part as a whole answer (Last, not Aborted, status defaulted to 200) when
// its select picks the pending pull over ctx.Done — a coin toss per
// session; 16 sessions make it certain.
func TestAdvRegress_HolderCloseDuringLongPoll(t *testing.T) {
	tc := newTestCluster(t)
	entered := make(chan struct{}, 64)
	a := tc.addOpts("a", nodeOpts{wrap: forwardedCounter("GET /v1/batch/{id}", entered)})
	b := tc.addOpts("b", nodeOpts{timeout: time.Second})
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, a, "alice-key", "https://example.com/hold")

	const n = 16
	done := make(chan answer, n)
	for range n {
		go func() { done <- send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=4s", bearer("alice-key")) }()
	}
	waitChan(t, entered, n, 10*time.Second, "forwarded long-polls on a")
	go func() { _ = a.node.Close() }() // the holder leaves; no EndWaits
	bad := 0
	for _, ans := range waitChan(t, done, n, 20*time.Second, "answers") {
		switch {
		case ans.err != nil: // cut short: fine
		case ans.code == http.StatusServiceUnavailable && strings.Contains(string(ans.body), `"node unavailable"`) && ans.hdr.Get("Retry-After") != "":
		case ans.code == http.StatusOK && json.Valid(ans.body) && strings.Contains(string(ans.body), `"id":"`+id+`"`):
		default:
			bad++
			t.Logf("answer: %d %q", ans.code, trunc(ans.body))
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d long-polls whose holder left got a clean answer that is no job", bad, n)
	}
}

// pausingWriter holds its first Write until ctx is done.
type pausingWriter struct {
	http.ResponseWriter
	ctx     context.Context
	writing chan<- struct{}
	paused  bool
}

func (p *pausingWriter) Write(b []byte) (int, error) {
	if !p.paused {
		p.paused = true
		p.writing <- struct{}{}
		<-p.ctx.Done()
	}
	return p.ResponseWriter.Write(b)
}

// TestAdvRegress_HolderCloseMidResults: the holder leaves (Node.Close) in the
// middle of ?results=1 answers forwarded through another node.
//
// Rule (httpapi package doc, cluster.Forward, docs/CLUSTER.md): an answer
// cut short drops the connection before the end of the chunked body, so
// the client reads an unexpected EOF and "never takes a part for the
// whole"; a whole answer is valid JSON ending in "]}\n".
//
// Observed: about half the clients read "200 OK" and a body that ends
// cleanly (no error) but is truncated, invalid JSON (e.g. 253 bytes ending
// in `…"result":{"content":"page https://example.com/0"}}`).
// Same cause as TestAdvRegress_HolderCloseDuringLongPoll: once Close cancels
// the forwarded request's context, writeJob returns early (its turn cannot
// be taken back: "the client is gone"), and session.serve sends what was
// buffered as the last part, Last and not Aborted, whenever its select
// picks the pending pull over ctx.Done.
//
// To have Close land mid-answer every time, a route middleware on the
// holder (httpapi Options.Wrap) holds each forwarded answer's first Write
// until the request's context is done, i.e. until Close has begun; the
// answer then goes on as usual.
func TestAdvRegress_HolderCloseMidResults(t *testing.T) {
	tc := newTestCluster(t)
	writing := make(chan struct{}, 64)
	pause := func(route string, h http.Handler) http.Handler {
		if route != "GET /v1/batch/{id}" {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.RemoteAddr == "cluster" {
				w = &pausingWriter{ResponseWriter: w, ctx: r.Context(), writing: writing}
			}
			h.ServeHTTP(w, r)
		})
	}
	a := tc.addOpts("a", nodeOpts{wrap: pause})
	b := tc.addOpts("b", nodeOpts{timeout: time.Second})
	tc.waitMembers(2)
	waitNames(t, tc)
	var urls []string
	for i := range 64 {
		urls = append(urls, fmt.Sprintf("https://example.com/%d", i))
	}
	id := submit(t, a, "alice-key", urls...)
	waitDone(t, a, id)

	const n = 12
	done := make(chan answer, n)
	for range n {
		go func() {
			done <- send(context.Background(), b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
		}()
	}
	waitChan(t, writing, n, 10*time.Second, "forwarded answers being written on a")
	go func() { _ = a.node.Close() }()
	clean := 0
	for _, ans := range waitChan(t, done, n, 30*time.Second, "answers") {
		if ans.err == nil && ans.code == http.StatusOK && !(json.Valid(ans.body) && strings.HasSuffix(string(ans.body), "]}\n")) {
			clean++
			t.Logf("clean end of an incomplete answer: %d, %d bytes, ends %q", ans.code, len(ans.body), ans.body[max(0, len(ans.body)-40):])
		}
	}
	if clean > 0 {
		t.Errorf("%d of %d answers cut short by the holder's leaving ended cleanly, incomplete", clean, n)
	}
}

// TestAdvRegress_RequestToClosingNode: a request forwarded to a node that is
// closing (Close has begun, the node is still a member: Close waits for
// the answers it was giving to end, then protoactor's graceful leave).
//
// Rule (cluster.Forward): the asking node answers what the holder answers,
// or 503 "node unavailable" with Retry-After when that node does not
// answer.
//
// Observed: 500 {"error":"internal error","hint":"try again; if it
// persists, report it"}, and b logs "handler panicked: a possible bug in
// siftbatch". The closing node's actor answers the Request with a Part of
// status 0 (answer(): goWork refused → Part{Last, Aborted}, no status);
// Forward calls w.WriteHeader(0), net/http panics ("invalid WriteHeader
// code 0"), and the API's guard turns the panic into a 500.
//
// The window is widened here, deterministically, by a route middleware
// (httpapi Options.Wrap, e.g. metrics) on the holder that is slow to end a
// request it was giving when Close began; any answer that takes a moment
// to end does the same.
func TestAdvRegress_RequestToClosingNode(t *testing.T) {
	tc := newTestCluster(t)
	entered, ctxDone, release := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	slow := func(route string, h http.Handler) http.Handler {
		if route != "GET /v1/batch/{id}" {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("results") == "1" && r.RemoteAddr == "cluster" {
				entered <- struct{}{}
				<-r.Context().Done() // Close has begun
				ctxDone <- struct{}{}
				<-release // and this request takes a moment to end
			}
			h.ServeHTTP(w, r)
		})
	}
	a := tc.addOpts("a", nodeOpts{wrap: slow})
	b := tc.addOpts("b", nodeOpts{timeout: time.Second})
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, a, "alice-key", "https://example.com/1")
	waitDone(t, a, id)

	go send(context.Background(), b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
	waitChan(t, entered, 1, 10*time.Second, "the slow request on a")
	closed := make(chan struct{})
	go func() { _ = a.node.Close(); close(closed) }()
	waitChan(t, ctxDone, 1, 10*time.Second, "a's Close under way")

	got := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if got.err != nil || got.code != http.StatusServiceUnavailable && got.code != http.StatusOK {
		t.Errorf("GET through b while a closes: %d %q, err %v; want 503 node unavailable (or a's answer)", got.code, got.body, got.err)
	}
	if strings.Contains(tc.logs.String(), "handler panicked") {
		t.Errorf("b's handler panicked")
	}
}

// TestAdvRegress_ListBeforeStart: Node.List on a node not yet started.
//
// Rule (brief, node lifecycle; cluster.List: "A bad status, limit or cursor
// is an error", "Safe for concurrent use"): misuse is an error, never a
// panic. The HTTP API is built with the node before Start can be called
// (Start takes the API's handler), so a GET /v1/batch served before Start
// calls List.
//
// Observed: a nil pointer dereference panic (List calls n.runner.ListAt,
// n.runner nil until Start).
func TestAdvRegress_ListBeforeStart(t *testing.T) {
	n, err := cluster.New(cluster.Config{Name: "c", Node: "a", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "a"),
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

// TestAdvRegress_FailedStartLeavesRemote: Start with a provider that fails.
//
// Rule (cluster.Start): "returns once the node is a member, or an error
// (an address in use, say), having started nothing."
//
// Observed: Start returns the error, but protoactor's gRPC remote it
// started before the provider failed is left running: the cluster address
// stays bound (a second Start, or anything else, cannot have it), and its
// goroutines (gRPC server, gossip) are left behind; Close does not stop
// them either (the node is not "started").
func TestAdvRegress_FailedStartLeavesRemote(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	n, err := cluster.New(cluster.Config{Name: "c", Node: "a", Addr: addr, TLS: nodeTLS(t, "a"), Provider: cluster.ProtoactorProvider(failingProvider{})})
	if err != nil {
		t.Fatal(err)
	}
	one := single(t) // a runner and a handler
	if err := n.Start(one.runner, one.api); err == nil {
		t.Fatal("Start with a failing provider: no error")
	}
	_ = n.Close()
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("after a failed Start (and Close), the cluster address %s is still bound: %v", addr, err)
	} else {
		_ = l.Close()
	}
	// gRPC's Serve goroutine ends on its own once the server stopped.
	deadline := time.Now().Add(5 * time.Second)
	for len(stacks("google.golang.org/grpc.(*Server).Serve")) > 0 && time.Now().Before(deadline) {
		<-time.After(time.Millisecond) // gRPC gives nothing to wait on
	}
	if left := stacks("google.golang.org/grpc.(*Server).Serve"); len(left) > 0 {
		t.Errorf("after a failed Start (and Close), %d gRPC server goroutines are left", len(left))
	}
}

// TestAdvRegress_LongPollLeavesAskingGoroutines: clients of long-polls
// (?wait=10s) forwarded to another node leave early.
//
// Rule (brief; the package's TestMain leak check): the work of a request
// whose client has gone ends; no goroutine is left after the test (after
// every node is closed).
//
// Observed: on the asking node, Forward returns at once, but the goroutine
// ask started to wait on protoactor's future stays until the future's own
// deadline (Timeout + wait: 11 s here; 65 s for a ?wait=60s with the
// default Timeout), after the clients left, even after every node closed:
// the
// holder sends the last part to that future only when its select happens
// to pick the pending pull over the cancelled context (a coin toss per
// session; 12 sessions make it certain). Clients that give up on
// long-polls pile these up; and with ?wait=30s, TestMain's goleak failed
// on them when such a test ran last. (The test waits for them to end in
// its cleanup, so that they do not reach later tests.)
func TestAdvRegress_LongPollLeavesAskingGoroutines(t *testing.T) {
	tc := newTestCluster(t)
	t.Cleanup(func() { untilNone("engine/cluster.(*forwarder).ask.func1", 15*time.Second) })
	entered := make(chan struct{}, 64)
	a := tc.addOpts("a", nodeOpts{wrap: forwardedCounter("GET /v1/batch/{id}", entered)})
	b := tc.addOpts("b", nodeOpts{timeout: time.Second})
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, a, "alice-key", "https://example.com/hold")

	const n = 12
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan answer, n)
	for range n {
		go func() { done <- send(ctx, b, "GET", "/v1/batch/"+id+"?wait=10s", bearer("alice-key")) }()
	}
	waitChan(t, entered, n, 10*time.Second, "forwarded long-polls on a")
	cancel()
	waitChan(t, done, n, 5*time.Second, "clients that left")
	// The holder's sessions end at once (TestAdv_LongPollClientLeaves);
	// the asking node's goroutines should too.
	left := untilNone("engine/cluster.(*forwarder).ask.func1", 2*time.Second)
	close(tc.release)
	waitDone(t, a, id)
	for _, nd := range tc.nodes {
		tc.stop(nd)
	}
	if still := stacks("engine/cluster.(*forwarder).ask.func1"); len(left) > 0 {
		t.Errorf("2s after the clients left, %d goroutines of Forward's asks are left (%d still after every node closed), e.g.:\n%s", len(left), len(still), left[0])
	}
}

// TestAdvRegress_NodeStartedAfterHolderLeft404: a node that restarted (a
// rolling update) after the holder left is asked for the holder's job.
//
// Rule (issue 16 item 4): "A job whose node is not a member now answers
// 503 {"error":"node unavailable"} with Retry-After, never 404."
//
// Observed: 404 "job not found" — the restarted node knew only the nodes
// it had met since it started, so it took the id for its own and answered
// from its own store. A client polling through the load balancer was told
// its job is gone while its node was merely down.
//
// Fixed: a node remembers the tags of the nodes it meets in its store, and
// reads them back when it starts. A node that never met the holder (d,
// new since the holder left) still takes the id for its own: 404, as
// docs/CLUSTER.md ("Ids") says.
func TestAdvRegress_NodeStartedAfterHolderLeft404(t *testing.T) {
	dirA := t.TempDir() // before the cluster: removed after its nodes stop
	tc := newTestCluster(t)
	a, c := tc.addWith("a", nodeOptions{dir: dirA}), tc.add("c")
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, c, "alice-key", "https://example.com/1")
	waitDone(t, c, id)
	if got := send(context.Background(), a, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
		t.Fatalf("through a: %d", got.code)
	}
	tc.stop(c)
	tc.waitMembers(1)
	tc.stop(a) // a restarts on its directory: a new process under the same name
	a2 := tc.addWith("a", nodeOptions{dir: dirA})
	d := tc.add("d")
	tc.waitMembers(2)
	waitNames(t, tc)
	got := send(context.Background(), a2, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if got.code != http.StatusServiceUnavailable || !strings.Contains(string(got.body), "node unavailable") {
		t.Errorf("c's job on a (restarted after c left): %d %s; want 503 node unavailable", got.code, got.body)
	}
	if got := send(context.Background(), d, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusNotFound {
		t.Errorf("c's job on d (never met c): %d %s; want 404, as a tag never met", got.code, got.body)
	}
}

// TestAdvRegress_UppercaseIDOfAbsentNode: an id that is no job id anywhere
// (uppercase hex: a single node answers 404, "ids are lowercase"), whose
// tag is that of a node that left.
//
// Rule (issue 16 item 4; httpapi: a job that does not exist is 404): 503
// is for "a job whose node is not a member" — the job "may well be there
// when its node comes back" (docs/CLUSTER.md). An uppercase id never is.
//
// Observed: 503 "node unavailable" (idTag takes uppercase hex), where the
// holder, were it a member, answers 404: the answer depends on whether
// the node is up for an id that can never name a job. Minor.
func TestAdvRegress_UppercaseIDOfAbsentNode(t *testing.T) {
	tc := newTestCluster(t)
	a, c := tc.add("a"), tc.add("c")
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, c, "alice-key", "https://example.com/1")
	waitDone(t, c, id)
	upper := strings.ToUpper(id)
	if got := send(context.Background(), a, "GET", "/v1/batch/"+upper, bearer("alice-key")); got.code != http.StatusNotFound {
		t.Fatalf("uppercase id through a while c is a member: %d, want 404", got.code)
	}
	tc.stop(c)
	tc.waitMembers(1)
	if got := send(context.Background(), a, "GET", "/v1/batch/"+upper, bearer("alice-key")); got.code != http.StatusNotFound {
		t.Errorf("uppercase id through a after c left: %d %s; want 404 as while c was a member", got.code, got.body)
	}
}

// TestAdvRegress_CrowdOfResultReaders: 50 clients read, at once and through
// another node, a job's ?results=1 of 8 MiB (32 results of 256 KiB).
//
// Rule (issue 16 item 4): "Results cross nodes in chunks well under gRPC's
// 4 MiB message limit"; every forwarded answer is answered as the holder
// answers it: here all 50 whole and identical.
//
// Observed: most answers are cut short (an unexpected EOF after 256 KiB,
// or a few MiB), some are 503 "node unavailable"; the log shows the
// receiving node's "EndpointReader failed to read", then "gRPC Failed to
// send", "EndpointWriter lost connection", "node did not answer", "answer
// cut short". Each Part is at most 256 KiB, but protoactor's endpoint
// writer batches the messages queued for a node (up to
// EndpointWriterBatchSize, 1000) into ONE gRPC message: 50 sessions' parts
// in flight make a message of up to 12.5 MiB, over the receiving server's
// default 4 MiB limit (the remote is configured with no
// MaxRecvMsgSize/batch size), so the stream breaks and every message in
// it — parts and pulls of every session, of every job — is lost. About 16
// concurrent forwarded answers between two nodes can do it.
func TestAdvRegress_CrowdOfResultReaders(t *testing.T) {
	const n = 50
	r := crowd(t, n, 32, false)
	bad := 0
	for i, g := range r.got {
		if g.err != nil || g.code != r.want.code || g.sum != r.want.sum || g.n != r.want.n {
			bad++
			if bad <= 5 {
				t.Logf("reader %d: %d, %d bytes, %v; want the holder's %d bytes", i, g.code, g.n, g.err, r.want.n)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d readers did not get the whole answer", bad, n)
	}
}

// startSlowHelloMember joins tc's cluster with a member named name that is no
// siftbatch node but speaks its messages: it answers a Hello only once
// release is closed (signalling hello when one comes), a Request with a
// 200 {"fake":true}, a ListRequest with no jobs.
func startSlowHelloMember(t *testing.T, tc *testCluster, name string, hello chan<- struct{}, release <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	quiet := slog.New(slog.DiscardHandler)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	c := pacluster.New(system, pacluster.Configure(tc.name, test.NewTestProvider(tc.agent), disthash.New(), remote.Configure("127.0.0.1", port, remoteTLS(t, name)...)))
	if _, err := system.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *clusterpb.Hello:
			hello <- struct{}{}
			<-release // a member slow to say who it is: busy, paused, far
			ctx.Respond(&clusterpb.NodeInfo{Node: name, Tag: cluster.Tag(name)})
		case *clusterpb.Request:
			ctx.Respond(&clusterpb.Part{Session: m.Session, Status: 200, Body: []byte(`{"fake":true}` + "\n"), Last: true,
				Headers: []*clusterpb.Header{{Name: "Content-Type", Values: []string{"application/json"}}}})
		case *clusterpb.ListRequest:
			ctx.Respond(&clusterpb.ListReply{})
		}
	}), "siftbatch-node"); err != nil {
		t.Fatal(err)
	}
	c.StartMember()
	t.Cleanup(func() { c.Shutdown(true) })
}

// TestAdvRegress_MemberNotYetKnownAnswers404: a request about the job of a
// member that this node is still asking who it is (its Hello in flight: a
// node that just joined, or that is slow to answer).
//
// Rule (issue 16 item 4: any node answers any job, "never 404" for a job
// whose node is a member; cluster.holder: "A member not yet known is asked
// who it is"): the request waits for the member to say who it is and is
// forwarded (or, if it does not say, answers 503).
//
// Observed: 404 "job not found" at once, while the job's node is a member;
// the same GET a moment later is forwarded and answered 200. holder()
// skips a member whose Hello is already in flight (learn's 2 s "asked"
// throttle, added so that a dead member does not hold every request up)
// and, the tag being unknown, takes the id for this node's own. A client
// polling through the load balancer just after a node joined (or while a
// Hello is slow, or for 2 s after one failed) is told its job does not
// exist. (The flake this causes: in-process tests that read a job through
// another node right after the nodes joined got 404s now and then.)
func TestAdvRegress_MemberNotYetKnownAnswers404(t *testing.T) {
	tc := newTestCluster(t)
	b := tc.add("b")
	hello, release := make(chan struct{}, 8), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	startSlowHelloMember(t, tc, "x", hello, release)
	waitChan(t, hello, 1, 20*time.Second, "b asking x who it is")

	id := fmt.Sprintf("%x", cluster.Tag("x")) + "00112233445566778899aabb"
	during := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key"))
	free()
	for !slices.Contains(b.node.Members(), "x") {
		select {
		case <-b.node.Changed():
		case <-time.After(20 * time.Second):
			t.Fatalf("b never learns who x is: %v", b.node.Members())
		}
	}
	after := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if after.code != http.StatusOK || string(after.body) != `{"fake":true}`+"\n" {
		t.Fatalf("once b knows x, the GET is not forwarded: %d %s", after.code, after.body)
	}
	if during.code == http.StatusNotFound {
		t.Errorf("x's job while b asks x who it is: %d %s; a moment later: %d %s", during.code, during.body, after.code, after.body)
	}
}

// TestAdvRegress_MembersOmitsOwnName: Node.Members on a node of a cluster
// that has settled.
//
// Rule (cluster.Members): "the names of the nodes that are members now, as
// this node knows them (a member not yet asked who it is reads as its
// address)". A node knows its own name.
//
// Observed: every node lists itself by its address ("127.0.0.1:PORT"),
// never by its name, however long it waits: learn never records this
// node itself. Minor; an operator reading Members (or a test counting
// names) sees an address where a name belongs.
func TestAdvRegress_MembersOmitsOwnName(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	waitNames(t, tc)
	for _, n := range []*node{a, b} {
		other := map[string]string{"a": "b", "b": "a"}[n.name]
		for !slices.Contains(n.node.Members(), other) {
			select {
			case <-n.node.Changed():
			case <-time.After(20 * time.Second):
				t.Fatalf("%s never learns %s: %v", n.name, other, n.node.Members())
			}
		}
		if got := n.node.Members(); !slices.Contains(got, n.name) {
			t.Errorf("%s's members: %v; want its own name among them", n.name, got)
		}
	}
}
