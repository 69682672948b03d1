package cluster_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// startSlowMember joins tc's cluster as a member that says who it is (node
// name, with its tag) only once hello is closed, and answers every
// request 200 "answered by NAME". It returns the member's actor system.
func startSlowMember(t *testing.T, tc *testCluster, name string, hello <-chan struct{}) *actor.ActorSystem {
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
	c := pacluster.New(system, pacluster.Configure(tc.name, test.NewTestProvider(tc.agent), disthash.New(), remote.Configure("127.0.0.1", 0, remoteTLS(t, name)...)))
	c.StartMember()
	t.Cleanup(func() { c.Shutdown(true) })
	return system
}

// TestCluster_MemberNotYetKnown: a request about a job of a member this
// node has not yet heard say who it is waits for its answer while it is
// asked, then goes to it; while it has not answered, the request is
// answered 503 "node unavailable", never as this node's own (404).
func TestCluster_MemberNotYetKnown(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.add("a")
	tc.waitMembers(1)
	idOf := func(node string) string { return fmt.Sprintf("%x", cluster.Tag(node)) + "00112233445566778899aabb" }

	// slow says who it is only once asked after its first Hello timed out.
	slowHello := make(chan struct{})
	t.Cleanup(func() { closeOnce(slowHello) })
	startSlowMember(t, tc, "slow", slowHello)
	waitUntil(t, "slow's first Hello timed out", func() bool {
		return strings.Contains(tc.logs.String(), "cluster member did not say who it is")
	})
	code, _, body := do(t, a, "GET", "/v1/batch/"+idOf("slow"), "alice-key", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"node unavailable"`) {
		t.Errorf("a job of a member that did not say who it is: %d %s; want 503", code, body)
	}
	close(slowHello)
	waitUntil(t, "slow is asked again", func() bool {
		code, _, body = do(t, a, "GET", "/v1/batch/"+idOf("slow"), "alice-key", "")
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
	waitUntil(t, "late is a member", func() bool { return len(a.node.Members()) == 3 })
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		code, body, err := getOnce(a, "/v1/batch/"+idOf("late"))
		if err != nil {
			body = err.Error()
		}
		answered <- answer{code, body}
	}()
	waitUntil(t, "the request waits for late", func() bool {
		return goroutinesIn(askerForwarding) == 1 || len(answered) == 1
	})
	close(lateHello)
	w := <-answered
	if w.code != http.StatusOK || w.body != "answered by late" {
		t.Errorf("a job of late, asked while it was asked who it is: %d %s", w.code, w.body)
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// getOnce sends GET path with alice's key to n's API, from any goroutine.
func getOnce(n *node, path string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, n.srv.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer alice-key")
	res, err := n.srv.Client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, res.Body)
	return res.StatusCode, b.String(), err
}
