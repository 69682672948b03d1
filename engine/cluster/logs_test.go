package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestNode_LogsHoldNoSecrets: whatever crosses the cluster — reads,
// results, waits, cancels, lists, a client leaving a stream, a node
// leaving — the nodes' logs at Debug, protoactor's own lines among them,
// hold no target URL, no host of one, no API key.
func TestNode_LogsHoldNoSecrets(t *testing.T) {
	testkit.Long(t)
	const host = "secret-host.example"
	var tc *clustertest.Cluster
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/fail") {
			return engine.Result{}, fmt.Errorf("fetch %s: connection refused", tg.URL)
		}
		return clustertest.Fetch(tc.Hold)(ctx, c, tg)
	}
	tc = clustertest.New(t, clustertest.Options{Fetch: fetch})
	a, b, c := tc.AddAll("a", "b", "c")[0], tc.Node("b"), tc.Node("c")
	tc.WaitMembers(3)

	urls := []string{"https://" + host + "/page?token=s3cr3t", "https://" + host + "/fail", "https://" + host + "/big/300000"}
	done := a.Submit(t, "alice-key", urls...)
	a.WaitDone(t, done)
	live := a.Submit(t, "alice-key", append(urls, "https://"+host+"/hold")...)
	for _, path := range []string{"", "?results=1", "/0", "/1", "/2", "?wait=1ms"} {
		for _, id := range []string{done, live} {
			b.Do(t, "GET", "/v1/batch/"+id+path, "alice-key", "")
			b.Do(t, "GET", "/v1/batch/"+id+path, "bob-key", "")
		}
	}
	// An answer that comes once its asking node has stopped waiting:
	// protoactor logs it as a dead letter, message (results) and all.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, _, err := cluster.Ask(ctx, b.Node, a.Node, "GET", "/v1/batch/"+live+"?wait=1s", "Bearer alice-key")
	cancel()
	if err == nil {
		t.Fatal("a wait of 1s answered within 200ms")
	}
	testkit.WaitFor(t, "the late answer is a dead letter", func() bool {
		return strings.Contains(tc.Logs.String(), `Id:\"$`)
	})
	c.Do(t, "GET", "/v1/batch?limit=1", "alice-key", "")
	c.Do(t, "GET", "/v1/batch?cursor=bad", "alice-key", "")
	if code, _, body := b.Do(t, "DELETE", "/v1/batch/"+live, "alice-key", ""); code != http.StatusOK {
		t.Fatalf("cancel on b: %d %s", code, body)
	}
	tc.Hold.Open() // the held target, in flight, ends: the worker is free

	// A client leaves a stream: parts go to an asking node that no longer
	// waits for them.
	big := a.Submit(t, "alice-key", bigURLs(host, 8, 1<<20)...)
	a.WaitDone(t, big)
	ctx, cancel = context.WithCancel(context.Background())
	res := get(ctx, t, b, "/v1/batch/"+big+"?results=1", "alice-key")
	if _, err := io.ReadFull(res.Body, make([]byte, 1<<10)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = res.Body.Close()
	testkit.WaitFor(t, "the answers have ended", func() bool {
		return goroutinesIn(holderAnswering) == 0 && goroutinesIn(askerForwarding) == 0
	})

	// A node leaves: its jobs are unavailable.
	onC := c.Submit(t, "alice-key", append(urls, "https://"+host+"/on-c")...)
	c.WaitDone(t, onC)
	a.Do(t, "GET", "/v1/batch/"+onC+"?results=1", "alice-key", "")
	tc.Stop(c)
	tc.WaitMembers(2)
	for _, n := range []*node{a, b} {
		if code, _, _ := n.Do(t, "GET", "/v1/batch/"+onC, "alice-key", ""); code != http.StatusServiceUnavailable {
			t.Errorf("c's job on %s after c left: %d, want 503", n.Name, code)
		}
		n.Do(t, "GET", "/v1/batch", "alice-key", "")
	}

	logs := tc.Logs.String()
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

// TestNode_LogsRedactedAtDebug: at Debug, the lines of every node and of
// protoactor's own (remote, cluster, dead letters), through forwarding,
// long-polls, cancels, lists, hostile keys, answers that time out and
// parts that reach a future gone (dead letters of Parts carrying results),
// hold no API key, no target URL or its host, no result content.
func TestNode_LogsRedactedAtDebug(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
	held, release := make(chan struct{}, 1), make(chan struct{})
	slow := func(route string, h http.Handler) http.Handler {
		if route != "GET /v1/batch/{id}/{idx}" {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.RemoteAddr == "cluster" && r.PathValue("idx") == "1" {
				held <- struct{}{}
				<-release // past the asking node's timeout
			}
			h.ServeHTTP(w, r)
		})
	}
	a := tc.AddWith("a", clustertest.NodeOptions{Route: slow})
	b := tc.AddWith("b", clustertest.NodeOptions{Timeout: time.Second})
	c := tc.Add("c")
	tc.WaitMembers(3)
	ctx := context.Background()
	const secretURL = "https://secret-host.example:8443/private/path?token=TOPSECRET"
	id := a.Submit(t, "alice-key", secretURL, "https://secret-host.example/other?token=TOPSECRET", "https://secret-host.example/hold")
	for _, p := range []string{"", "?results=1", "/0", "/1", "?wait=1s", "?results=1&wait=1s"} {
		if p == "/1" {
			// b times out (503), then a's answer reaches a future gone.
			if got := send(ctx, b, "GET", "/v1/batch/"+id+p, bearer("alice-key")); got.code != http.StatusServiceUnavailable {
				t.Errorf("slow GET %s: %d", p, got.code)
			}
			<-held
			close(release)
			continue
		}
		for _, n := range []*node{b, c} {
			send(ctx, n, "GET", "/v1/batch/"+id+p, bearer("alice-key"))
			send(ctx, n, "GET", "/v1/batch/"+id+p, bearer("bob-key"))
			send(ctx, n, "GET", "/v1/batch/"+id+p, "Bearer alice-key", "Bearer bob-key")
			send(ctx, n, "GET", "/v1/batch/"+id+p, "Basic YWxpY2U6YWxpY2Uta2V5")
		}
	}
	send(ctx, c, "GET", "/v1/batch?limit=2", bearer("alice-key"))
	send(ctx, c, "GET", "/v1/batch?cursor=TOPSECRET", bearer("alice-key"))
	send(ctx, c, "DELETE", "/v1/batch/"+id, bearer("alice-key"))
	a.WaitDone(t, id)
	send(ctx, b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
	tc.Stop(a)
	tc.WaitMembers(2)
	send(ctx, b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
	send(ctx, c, "GET", "/v1/batch", bearer("alice-key"))
	tc.Stop(b)
	tc.Stop(c)

	logs := tc.Logs.String()
	if !strings.Contains(logs, "lib=protoactor") || !strings.Contains(logs, "level=DEBUG") || !strings.Contains(logs, "[DeadLetter]") {
		t.Fatalf("the logs lack protoactor's Debug lines or its dead letters: the test proves nothing")
	}
	for _, bad := range []string{"alice-key", "bob-key", "YWxpY2U6", "secret-host", "TOPSECRET", "private/path", ":8443", "https://", "http://", "page "} {
		if i := strings.Index(logs, bad); i >= 0 {
			line := logs[strings.LastIndex(logs[:i], "\n")+1:]
			if j := strings.Index(line, "\n"); j >= 0 {
				line = line[:j]
			}
			t.Errorf("the logs hold %q: %s", bad, line)
		}
	}
}

// TestNode_ProtoactorLogsOnlyMembersAddresses: in protoactor's log lines,
// an address (an "address" attribute, a PID's) is kept only if it is the
// node's own or a current member's: another may be one a peer named as
// its message's sender. protoactor's line for each failed attempt to
// connect is logged at most once per cluster.PeerWarnEvery (real time
// here: the five lines come within it).
func TestNode_ProtoactorLogsOnlyMembersAddresses(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	var buf testkit.SyncBuffer
	l := cluster.PeerLogger(a.Node, slog.New(slog.NewTextHandler(&buf, nil)))
	const stranger = "127.0.9.9:9"
	l.Info("own", "address", a.Node.Address())
	l.Info("member", "address", b.Node.Address(), "pid", actor.NewPID(b.Node.Address(), "x"))
	l.Info("named", "address", stranger, "pid", actor.NewPID(stranger, "x"), "count", 3)
	l.With("address", stranger).Info("with")
	for range 5 {
		l.Error("EndpointWriter failed to connect", "address", b.Node.Address())
	}
	out := buf.String()
	if strings.Contains(out, stranger) {
		t.Errorf("an address of no member logged:\n%s", out)
	}
	for _, want := range []string{"msg=own address=" + a.Node.Address(), "msg=member address=" + b.Node.Address() + " pid=",
		"msg=named count=3", "msg=with\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if got := strings.Count(out, "failed to connect"); got != 1 {
		t.Errorf("%d lines of failed connects at once, want 1:\n%s", got, out)
	}
}

// TestNode_ProtoactorWarningsRateLimitedPerPeer: while a peer is down,
// protoactor repeats its warnings about it (each failed poll of its
// health, each attempt to connect, each stream it cannot open): each
// message is logged at most once per cluster.PeerWarnEvery for each peer
// address, the next one with how many were left out ("throttled");
// another peer's, another message, and lines below Warn are not held
// back. On the test's clock.
func TestNode_ProtoactorWarningsRateLimitedPerPeer(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	var buf testkit.SyncBuffer
	clock := testkit.NewClock()
	l := cluster.PeerLoggerAt(a.Node, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), clock.Now)
	burst := func() {
		for range 10 {
			l.Error("EndpointWriter failed to connect", "address", b.Node.Address())
			l.Error("Bad connection to the node health status")
			l.Debug("Requesting", "address", b.Node.Address())
		}
		l.Error("EndpointWriter failed to connect", "address", c.Node.Address())
	}
	count := func(substr string) int { return strings.Count(buf.String(), substr) }
	burst()
	if got := count("failed to connect\" address=" + b.Node.Address()); got != 1 {
		t.Errorf("%d lines about b in one burst, want 1:\n%s", got, buf.String())
	}
	if got := count("failed to connect\" address=" + c.Node.Address()); got != 1 {
		t.Errorf("%d lines about c, want 1:\n%s", got, buf.String())
	}
	if got := count("Bad connection"); got != 1 {
		t.Errorf("%d lines of another message, want 1:\n%s", got, buf.String())
	}
	if got := count("Requesting"); got != 10 {
		t.Errorf("%d debug lines, want all 10", got)
	}
	clock.Advance(cluster.PeerWarnEvery - time.Millisecond)
	burst()
	if got := count("failed to connect\" address=" + b.Node.Address()); got != 1 {
		t.Errorf("%d lines about b within the period, want 1:\n%s", got, buf.String())
	}
	clock.Advance(time.Millisecond)
	burst()
	if got := count("failed to connect\" address=" + b.Node.Address() + " throttled=19"); got != 1 {
		t.Errorf("no line about b once the period is over, counting the 19 left out:\n%s", buf.String())
	}
	if got := count("Bad connection to the node health status\" throttled=19"); got != 1 {
		t.Errorf("no line of the other message once the period is over:\n%s", buf.String())
	}
}
