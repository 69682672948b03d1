package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestNode_MembershipIncludesSelf: a node started is in its own member
// list (it does not ask itself who it is), and stays in it as another
// leaves.
func TestNode_MembershipIncludesSelf(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	testkit.WaitFor(t, "a in its own member list", func() bool { return a.Node.Membership().Member })
	m := a.Node.Membership()
	if !m.Joined || m.Since.IsZero() {
		t.Fatalf("a joined: %+v", m)
	}
	tc.Stop(b)
	tc.WaitMembers(1)
	if got := a.Node.Membership(); got != m {
		t.Fatalf("a after b left: %+v; want %+v", got, m)
	}
	if got := a.Node.Members(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("a's members %v; want [a]", got)
	}
}

// TestNode_MemberNotYetKnownWaitedFor: a request about a job of a member this
// node has not yet heard say who it is waits for its answer while it is
// asked, then goes to it; while it has not answered, the request is
// answered 503 "node unavailable", never as this node's own (404). Not
// parallel: it counts the process's goroutines that forward.
func TestNode_MemberNotYetKnownWaitedFor(t *testing.T) {
	testkit.Long(t)
	tc := clustertest.Start(t, clustertest.Options{}, "a")
	a := tc.Node("a")
	idOf := func(node string) string { return fmt.Sprintf("%x", cluster.Tag(node)) + "00112233445566778899aabb" }

	// slow says who it is only once asked after its first Hello timed out.
	slowHello := make(chan struct{})
	t.Cleanup(func() { closeOnce(slowHello) })
	startSlowMember(t, tc, "slow", slowHello)
	testkit.WaitFor(t, "slow's first Hello timed out", func() bool {
		return strings.Contains(tc.Logs.String(), "cluster member did not say who it is")
	})
	code, _, body := a.Do(t, "GET", "/v1/batch/"+idOf("slow"), "alice-key", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"node unavailable"`) {
		t.Errorf("a job of a member that did not say who it is: %d %s; want 503", code, body)
	}
	close(slowHello)
	testkit.WaitFor(t, "slow is asked again", func() bool {
		code, _, body = a.Do(t, "GET", "/v1/batch/"+idOf("slow"), "alice-key", "")
		return code != http.StatusServiceUnavailable
	})
	if code != http.StatusOK || string(body) != "answered by slow" {
		t.Errorf("a job of slow, once it said who it is: %d %s", code, body)
	}

	// late says who it is a while after it is asked: a request meanwhile
	// waits for its answer.
	lateHello := make(chan struct{})
	t.Cleanup(func() { closeOnce(lateHello) })
	startSlowMember(t, tc, "late", lateHello)
	testkit.WaitFor(t, "late is a member", func() bool { return len(a.Node.Members()) == 3 })
	answered := make(chan answer, 1)
	go func() {
		answered <- send(context.Background(), a, "GET", "/v1/batch/"+idOf("late"), bearer("alice-key"))
	}()
	testkit.WaitFor(t, "the request waits for late", func() bool {
		return goroutinesIn(askerForwarding) == 1 || len(answered) == 1
	})
	close(lateHello)
	w := testkit.Recv(t, answered)
	if w.err != nil || w.code != http.StatusOK || string(w.body) != "answered by late" {
		t.Errorf("a job of late, asked while it was asked who it is: %d %s", w.code, w.body)
	}
}

// TestNode_MemberBeingAskedIsNot404: a request about the job of a member
// that this node is still asking who it is (its Hello in flight: a node
// that just joined, or one slow to answer) is never answered 404, as if
// the id were this node's own (any node answers any job of a member): it
// waits for the member to say who it is and is forwarded (or, if it does
// not say, answers 503); once the member is known, it is forwarded.
func TestNode_MemberBeingAskedIsNot404(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "b")
	b := tc.Node("b")
	hello, release := make(chan struct{}, 8), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	startSlowHelloMember(t, tc, "x", hello, release)
	recvN(t, hello, 1)

	id := fmt.Sprintf("%x", cluster.Tag("x")) + "00112233445566778899aabb"
	during := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key"))
	free()
	clustertest.WaitKnows(t, b, "x")
	after := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if after.code != http.StatusOK || string(after.body) != `{"fake":true}`+"\n" {
		t.Fatalf("once b knows x, the GET is not forwarded: %d %s", after.code, after.body)
	}
	if during.code == http.StatusNotFound {
		t.Errorf("x's job while b asks x who it is: %d %s; a moment later: %d %s", during.code, during.body, after.code, after.body)
	}
}

// TestNode_MembersNameSelf: Node.Members names the nodes that are members
// (a member not yet asked who it is reads as its address), this node by
// its own name, never by its address.
func TestNode_MembersNameSelf(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	for _, n := range tc.Nodes() {
		other := map[string]string{"a": "b", "b": "a"}[n.Name]
		clustertest.WaitKnows(t, n, other)
		if got := n.Node.Members(); !slices.Contains(got, n.Name) {
			t.Errorf("%s's members: %v; want its own name among them", n.Name, got)
		}
	}
}

// TestNode_RestartedNodeRemembersAbsentHolder: a node that restarted (a
// rolling update) after the holder of a job left answers that job 503
// "node unavailable", never 404: a node remembers in its store the tags of
// the nodes it meets, and reads them back when it starts. A node that
// never met the holder (d, new since the holder left, with a new store)
// answers 503 too: its peers tell it the tags they know in their Hellos
// (docs/CLUSTER.md, "Ids"); it keeps them in memory, not in its store (they
// do not use up its store's bound on the tags it met).
func TestNode_RestartedNodeRemembersAbsentHolder(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	dirA := t.TempDir() // before the cluster: removed after its nodes stop
	tc := clustertest.New(t, clustertest.Options{})
	a, c := tc.AddWith("a", clustertest.NodeOptions{Dir: dirA}), tc.Add("c")
	tc.WaitMembers(2)
	id := c.Submit(t, "alice-key", "https://example.com/1")
	c.WaitDone(t, id)
	if got := send(context.Background(), a, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
		t.Fatalf("through a: %d", got.code)
	}
	tc.Stop(c)
	tc.WaitMembers(1)
	tc.Stop(a) // a restarts on its directory: a new process under the same name
	a2 := tc.AddWith("a", clustertest.NodeOptions{Dir: dirA})
	d := tc.Add("d")
	tc.WaitMembers(2)
	got := send(context.Background(), a2, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if got.code != http.StatusServiceUnavailable || !strings.Contains(string(got.body), "node unavailable") {
		t.Errorf("c's job on a (restarted after c left): %d %s; want 503 node unavailable", got.code, got.body)
	}
	if got := send(context.Background(), d, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusServiceUnavailable ||
		!strings.Contains(string(got.body), "node unavailable") {
		t.Errorf("c's job on d (never met c, told of it by a): %d %s; want 503 node unavailable", got.code, got.body)
	}
	tags, err := engine.PeerOf(d.Runner).NodeTags()
	if err != nil {
		t.Fatal(err)
	}
	if _, stored := tags[[engine.NodeTagLen]byte(cluster.Tag("c"))]; stored {
		t.Errorf("d's store remembers c, which it never met: %v", tags)
	}
}

// startSlowMember joins tc's cluster as a member that says who it is (node
// name, with its tag) only once hello is closed, and answers every
// request 200 "answered by NAME". It returns the member's actor system.
func startSlowMember(t *testing.T, tc *clustertest.Cluster, name string, hello <-chan struct{}) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	props := actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *clusterpb.Hello:
			to := c.Sender()
			go func() {
				<-hello
				system.Root.Send(to, &clusterpb.NodeInfo{Node: name, Tag: cluster.Tag(name)})
			}()
		case *clusterpb.Request:
			c.Respond(&clusterpb.Part{Session: m.Session, Status: http.StatusOK, Body: []byte("answered by " + name), Last: true})
		}
	})
	if _, err := system.Root.SpawnNamed(props, cluster.NodeActor); err != nil {
		t.Fatal(err)
	}
	c := pacluster.New(system, pacluster.Configure(tc.Name, test.NewTestProvider(tc.Agent), disthash.New(), remote.Configure("127.0.0.1", 0, clustertest.RemoteTLS(t, name)...)))
	c.StartMember()
	t.Cleanup(func() { c.Shutdown(true) })
	return system
}

// startSlowHelloMember joins tc's cluster with a member named name that is no
// siftbatch node but speaks its messages: it answers a Hello only once
// release is closed (signalling hello when one comes), a Request with a
// 200 {"fake":true}, a ListRequest with no jobs.
func startSlowHelloMember(t *testing.T, tc *clustertest.Cluster, name string, hello chan<- struct{}, release <-chan struct{}) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	c := pacluster.New(system, pacluster.Configure(tc.Name, test.NewTestProvider(tc.Agent), disthash.New(), remote.Configure("127.0.0.1", 0, clustertest.RemoteTLS(t, name)...)))
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

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// TestNode_FreshClusterKnowsEachOtherAtOnce: right after a cluster forms
// the members' views differ for a moment: b, started alone, does not count
// a yet when a (which counts b) asks b who it is, and that Hello is
// refused. a knows b as soon as b counts a and says Hello to it, not a
// Hello's timeout and a retry later: with that timeout set past the test's
// deadline, the two still know each other. Then a first submit on each
// node is admitted at its first attempt (counted through the admission's
// observer), its caller's grain rebuilt on the spot. Under the automanaged
// provider serve runs by default. Not parallel: it sets the package's
// Hello timeout and admission observer.
func TestNode_FreshClusterKnowsEachOtherAtOnce(t *testing.T) {
	cluster.SetHelloWait(10 * time.Minute)
	t.Cleanup(func() { cluster.SetHelloWait(0) })
	var attempts atomic.Int64
	cluster.SetAttemptObserver(func(time.Duration) { attempts.Add(1) })
	t.Cleanup(func() { cluster.SetAttemptObserver(nil) })

	tc := clustertest.New(t, clustertest.Options{Keys: callerKeys(8)})
	ps := automanaged(t, 2)
	b := tc.AddWith("b", clustertest.NodeOptions{Provider: &ps[1]})
	refused := b.Node.PeerRefusals()
	a := tc.AddWith("a", clustertest.NodeOptions{Provider: &ps[0]})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", tc.Logs.String())
		}
	})
	tc.WaitMembers(2)
	if b.Node.PeerRefusals() == refused {
		t.Log("b counted a before a's first Hello: the case under test did not arise this time")
	}
	for i, n := range []*node{a, b} {
		for c := range 4 {
			before := attempts.Load()
			if code, _ := n.Post(fmt.Sprintf("key%d", c), fmt.Sprintf("https://example.com/%d/%d", i, c)); code != http.StatusAccepted {
				t.Fatalf("first submit of caller%d on %s: %d, want 202", c, n.Name, code)
			}
			if got := attempts.Load() - before; got != 1 {
				t.Errorf("first submit of caller%d on %s: admitted after %d attempts, want 1", c, n.Name, got)
			}
		}
	}
}
