package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

func TestNode_AnyNodeAnswersAnyJob(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")

	id := a.Submit(t, "alice-key", "https://example.com/1", "https://example.com/2")
	if !strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag("a"))) {
		t.Fatalf("id %s does not begin with a's tag %x", id, cluster.Tag("a"))
	}
	a.WaitDone(t, id)

	for _, path := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "?results=1", "/v1/batch/" + id + "/1", "/v1/batch/" + id + "/9", "/v1/batch/" + id + "?wait=1s"} {
		wantCode, _, want := a.Do(t, "GET", path, "alice-key", "")
		for _, n := range []*node{b, c} {
			code, _, got := n.Do(t, "GET", path, "alice-key", "")
			if code != wantCode || !bytes.Equal(got, want) {
				t.Errorf("GET %s on %s: %d %s; on a: %d %s", path, n.Name, code, got, wantCode, want)
			}
		}
		// Another caller: 404 everywhere, as on the job's node.
		wantCode, _, want = a.Do(t, "GET", path, "bob-key", "")
		if wantCode != http.StatusNotFound {
			t.Fatalf("bob reads alice's job on a: %d", wantCode)
		}
		code, _, got := b.Do(t, "GET", path, "bob-key", "")
		if code != wantCode || !bytes.Equal(got, want) {
			t.Errorf("bob GET %s on b: %d %s; on a: %d %s", path, code, got, wantCode, want)
		}
	}
	// An unknown key is refused by the node asked, before any forwarding.
	if code, _, _ := b.Do(t, "GET", "/v1/batch/"+id, "nobody", ""); code != http.StatusUnauthorized {
		t.Errorf("unknown key on b: %d, want 401", code)
	}
}

func TestNode_CancelAndWaitFromAnotherNode(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")

	id := a.Submit(t, "alice-key", "https://example.com/hold", "https://example.com/2")
	// A wait on b ends when the job, on a, is cancelled from b.
	type answer struct {
		code int
		body []byte
	}
	waited := make(chan answer, 1)
	go func() {
		code, _, body := b.Do(t, "GET", "/v1/batch/"+id+"?wait=60s", "alice-key", "")
		waited <- answer{code, body}
	}()
	if code, _, body := b.Do(t, "DELETE", "/v1/batch/"+id, "bob-key", ""); code != http.StatusNotFound {
		t.Fatalf("bob cancels alice's job on b: %d %s", code, body)
	}
	code, _, body := b.Do(t, "DELETE", "/v1/batch/"+id, "alice-key", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"cancelled":true`) {
		t.Fatalf("cancel on b: %d %s", code, body)
	}
	// The wait (60s, past the kit's deadline) ends with the cancel.
	if w := testkit.Recv(t, waited); w.code != http.StatusOK || !strings.Contains(string(w.body), `"status":"cancelled"`) {
		t.Fatalf("wait on b: %d %s", w.code, w.body)
	}
	if code, _, body := b.Do(t, "DELETE", "/v1/batch/"+id, "alice-key", ""); code != http.StatusConflict {
		t.Fatalf("cancel again on b: %d %s, want 409", code, body)
	}
}

func TestNode_LargeResultsCrossInParts(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	// 3 results of 1 MiB: each crosses in parts of at most 256 KiB.
	id := a.Submit(t, "alice-key", "https://example.com/big/1048576", "https://example.com/big/1048577", "https://example.com/big/10")
	a.WaitDone(t, id)
	_, _, want := a.Do(t, "GET", "/v1/batch/"+id+"?results=1", "alice-key", "")
	code, _, got := b.Do(t, "GET", "/v1/batch/"+id+"?results=1", "alice-key", "")
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

func TestNode_JobOfNodeThatLeftAnswers503(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	id := c.Submit(t, "alice-key", "https://example.com/1")
	c.WaitDone(t, id)
	if code, _, _ := a.Do(t, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
		t.Fatalf("GET on a before c left: %d", code)
	}
	tc.Stop(c)
	tc.WaitMembers(2)
	for _, n := range []*node{a, b} {
		code, h, body := n.Do(t, "GET", "/v1/batch/"+id, "alice-key", "")
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), `"node unavailable"`) {
			t.Errorf("GET on %s after c left: %d %q %s", n.Name, code, h.Get("Retry-After"), body)
		}
	}
	// An id no node ever had is answered as before: 404.
	if code, _, _ := a.Do(t, "GET", "/v1/batch/ffffffff00112233445566778899aabb", "alice-key", ""); code != http.StatusNotFound {
		t.Errorf("unknown id on a: %d, want 404", code)
	}
	// The list names the node that left.
	code, _, body := a.Do(t, "GET", "/v1/batch", "alice-key", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"unavailable_nodes":["c"]`) {
		t.Errorf("list on a after c left: %d %s", code, body)
	}
}

// TestNode_NotFoundAsOnOneNode: a malformed id, an idx out of range or
// malformed, an id with a member's tag that no job has, another caller's
// job: answered by a cluster's node exactly as by a single node (status,
// headers, body byte for byte).
func TestNode_NotFoundAsOnOneNode(t *testing.T) {
	t.Parallel()
	// A long Timeout: the test is about what a node answers for another,
	// not about how long a loaded machine takes to forward it (a stress
	// run at load 13 got 503 "did not answer" at the default 3 s).
	tc := clustertest.Start(t, clustertest.Options{Timeout: 20 * time.Second}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	solo := solo(t)
	held := a.Submit(t, "alice-key", "https://example.com/1", "https://example.com/2")
	a.WaitDone(t, held)
	mine := solo.Submit(t, "alice-key", "https://example.com/1", "https://example.com/2")
	solo.WaitDone(t, mine)
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
		wantCode, wantHeader, want := solo.Do(t, c.method, strings.ReplaceAll(c.path, "{id}", mine), c.key, "")
		code, header, got := b.Do(t, c.method, strings.ReplaceAll(c.path, "{id}", held), c.key, "")
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

// TestNode_CutShortAnswerIsCutShortForClient: an answer the holder cuts short (its job is
// deleted while it is written), or that stops coming (the holder's writer
// stalls), is cut short on the asking node too: its client sees the
// connection dropped before the end of the body, never a whole JSON; the
// holder's answer ends.
func TestNode_CutShortAnswerIsCutShortForClient(t *testing.T) {
	testkit.Long(t)
	tc := clustertest.New(t, clustertest.Options{})
	// a: the job expires (its clock moves past the TTL) once the first
	// result of a forwarded answer is out.
	clk := testkit.NewClock()
	clk.Set(time.Now())
	var expired atomic.Bool
	aOpts := clustertest.NodeOptions{Now: clk.Now, Answer: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&expiringWriter{ResponseWriter: w, expire: func() {
				if !expired.Swap(true) {
					clk.Advance(engine.DefaultTTL + time.Hour)
				}
			}}, r)
		})
	}}
	// c: a forwarded answer's writer stalls after its first Write.
	stalled, returned := make(chan struct{}, 1), make(chan struct{}, 1)
	cOpts := clustertest.NodeOptions{Answer: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { returned <- struct{}{} }()
			h.ServeHTTP(&stallingWriter{ResponseWriter: w, ctx: r.Context(), stalled: stalled}, r)
		})
	}}
	nodes := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: aOpts}, clustertest.Spec{Name: "c", NodeOptions: cOpts}, clustertest.Spec{Name: "b"})
	a, c, b := nodes[0], nodes[1], nodes[2]
	tc.WaitMembers(3)

	const size = 300 << 10 // a result: more than a part
	deleted := a.Submit(t, "alice-key", bigURLs("a.example.com", 3, size)...)
	a.WaitDone(t, deleted)
	stalling := c.Submit(t, "alice-key", bigURLs("c.example.com", 3, size)...)
	c.WaitDone(t, stalling)

	t.Run("JobDeletedWhileWritten", func(t *testing.T) {
		readCut(t, b, deleted, size)
		if !strings.Contains(tc.Logs.String(), "answer cut short: the job was deleted while it was written") {
			t.Errorf("no log line on a for the cut")
		}
		if code, _, body := b.Do(t, "GET", "/v1/batch/"+deleted, "alice-key", ""); code != http.StatusNotFound {
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
		if !strings.Contains(tc.Logs.String(), "answer cut short: the node stopped answering") {
			t.Errorf("no log line on b for the cut")
		}
		// b released the answer: c's handler returns, its session ends.
		select {
		case <-returned:
		case <-time.After(testkit.Deadline):
			t.Fatal("c's handler is still answering")
		}
		testkit.WaitFor(t, "c's answer has ended", func() bool { return goroutinesIn(holderAnswering) == 0 })
	})
}

// TestNode_ClientLeavingReleasesHolder: a client that goes away in the
// middle of a large ?results=1 from another node ends the answer on both
// nodes: the asking node's Forward returns, the holder's session ends
// (without waiting out its idle timeout), and both still answer.
func TestNode_ClientLeavingReleasesHolder(t *testing.T) {
	testkit.Long(t)
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	id := a.Submit(t, "alice-key", bigURLs("example.com", 16, 1<<20)...) // 16 MiB: more than the sockets buffer
	a.WaitDone(t, id)

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
			testkit.WaitFor(t, "the answers have ended", func() bool {
				return goroutinesIn(holderAnswering) == 0 && goroutinesIn(askerForwarding) == 0
			})
		})
	}
	// Both still answer: the holder's turn was given back.
	for _, n := range []*node{a, b} {
		if code, _, body := n.Do(t, "GET", "/v1/batch/"+id+"/3", "alice-key", ""); code != http.StatusOK || len(body) < 1<<20 {
			t.Errorf("GET /3 on %s: %d, %d bytes", n.Name, code, len(body))
		}
	}
}

// TestNode_ForwardedNeverForwardedAgain: a forwarded request about a
// job the node asked does not hold is answered by that node as its own
// (404), never forwarded on to the job's node.
func TestNode_ForwardedNeverForwardedAgain(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	id := c.Submit(t, "alice-key", "https://example.com/1")
	c.WaitDone(t, id)
	// b forwards a client's request to c.
	code, _, want := b.Do(t, "GET", "/v1/batch/"+id, "alice-key", "")
	if code != http.StatusOK {
		t.Fatalf("GET on b: %d %s", code, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	// The same request, forwarded by a to c: c's answer.
	code, got, err := cluster.Ask(ctx, a.Node, c.Node, "GET", "/v1/batch/"+id, "Bearer alice-key")
	if err != nil || code != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("forwarded to c: %d %s %v; want 200 %s", code, got, err, want)
	}
	// Forwarded by a to b: b answers it as its own, not holding the job.
	_, _, notFound := b.Do(t, "GET", "/v1/batch/ffffffff00112233445566778899aabb", "alice-key", "")
	code, got, err = cluster.Ask(ctx, a.Node, b.Node, "GET", "/v1/batch/"+id, "Bearer alice-key")
	if err != nil || code != http.StatusNotFound || !bytes.Equal(got, notFound) {
		t.Fatalf("forwarded to b: %d %s %v; want 404 %s", code, got, err, notFound)
	}
	code, got, err = cluster.Ask(ctx, a.Node, b.Node, "DELETE", "/v1/batch/"+id, "Bearer alice-key")
	if err != nil || code != http.StatusNotFound {
		t.Fatalf("DELETE forwarded to b: %d %s %v; want 404", code, got, err)
	}
	// A forwarded request is authenticated again by the node asked.
	code, _, err = cluster.Ask(ctx, a.Node, c.Node, "GET", "/v1/batch/"+id, "Bearer nobody")
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("unknown key forwarded to c: %d %v; want 401", code, err)
	}
}

// TestNode_SlowReaderHoldsNoTurn: a client of node a that never reads
// its socket, reading a 1 MiB result of a job node b holds, stalls that
// answer on b (b sends a part each time a pulls one, and a pulls the next
// once its client took the last), but takes no turn from b's own callers
// (MaxInFlight 1 on both): while it is stuck, b answers its reads of a
// job, a list and a cancel, and a answers its own and b's jobs. Its
// connection's end ends the answer on b.
func TestNode_SlowReaderHoldsNoTurn(t *testing.T) {
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
	watch := &firstWrite{auth: "Bearer alice-key", started: make(chan struct{}), returned: make(chan struct{})}
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{MaxInFlight: 1}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{MaxInFlight: 1, Route: watch.wrap}})[0], tc.Node("b")
	tc.WaitMembers(2)
	big := b.Submit(t, "alice-key", "https://example.com/big/1048576")
	b.WaitDone(t, big)
	theirs := b.Submit(t, "bob-key", "https://example.com/1", "https://example.com/2")
	b.WaitDone(t, theirs)
	onA := a.Submit(t, "bob-key", "https://example.com/3")
	a.WaitDone(t, onA)
	live := b.Submit(t, "bob-key", "https://example.com/hold")

	srv := httptest.NewUnstartedServer(a.API)
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
	case <-time.After(testkit.Deadline):
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
		code, _, body := rq.n.Do(t, rq.method, rq.path, "bob-key", "")
		if code != http.StatusOK {
			t.Fatalf("%s %s on %s: %d %s", rq.method, rq.path, rq.n.Name, code, body)
		}
		select {
		case <-watch.returned:
			t.Fatalf("%s %s on %s answered only once b's write to the slow reader had returned", rq.method, rq.path, rq.n.Name)
		default:
		}
	}

	conn.Close()
	select {
	case <-watch.returned:
	case <-time.After(testkit.Deadline):
		t.Fatal("b's answer to the slow reader did not end with its connection")
	}
}

// TestNode_ForwardedPostRefused: a POST that reaches a node as a
// forwarded request (the cluster's Request carries no body; no node
// forwards a submit, but a peer may send one) is answered 405 with a hint
// to submit to any node, never 500, and the node's handler does not panic.
func TestNode_ForwardedPostRefused(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	for _, uri := range []string{"/v1/batch", "/v1/batch/" + fmt.Sprintf("%x", cluster.Tag("b")) + "00112233445566778899aabb"} {
		code, body, err := cluster.Ask(ctx, a.Node, b.Node, "POST", uri, "Bearer alice-key")
		if err != nil || code != http.StatusMethodNotAllowed {
			t.Fatalf("POST %s forwarded to b: %d %s %v; want 405", uri, code, body, err)
		}
		var e struct{ Error, Hint string }
		if json.Unmarshal(body, &e) != nil || e.Hint == "" {
			t.Fatalf("POST %s forwarded to b: %s", uri, body)
		}
	}
	code, body, _ := cluster.Ask(ctx, a.Node, b.Node, "POST", "/v1/batch", "Bearer alice-key")
	if !strings.Contains(string(body), "submit to any node: POST is not forwarded") {
		t.Fatalf("forwarded submit: %d %s", code, body)
	}
	if strings.Contains(tc.Logs.String(), "panicked") {
		t.Fatalf("a handler panicked:\n%s", tc.Logs.String())
	}
	// b still takes a submit of its own.
	b.WaitDone(t, b.Submit(t, "alice-key", "https://example.com/1"))
}

// TestNode_OtherNodesAnswerAsHolder: every request about a job, answered by a
// node that does not hold it, is byte for byte what the holder answers:
// another caller's job, ids that are no job (one with the holder's tag,
// malformed ones of every kind), odd target indexes; and for ids that
// name no node, what a single node answers.
func TestNode_OtherNodesAnswerAsHolder(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	// A long Timeout: the test is about what a node answers for another,
	// not about how fast; under -race on a loaded machine a holder's
	// answer took longer than the default 3 s (503 "node unavailable").
	tc := clustertest.Start(t, clustertest.Options{Timeout: 20 * time.Second}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	one := solo(t)
	ctx := context.Background()

	id := a.Submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3")
	a.WaitDone(t, id)
	bobs := c.Submit(t, "bob-key", "https://example.com/bob")
	c.WaitDone(t, bobs)
	tagA := fmt.Sprintf("%x", cluster.Tag("a"))
	missing := tagA + strings.Repeat("0", 24) // a's tag, no job
	upper := strings.ToUpper(id)              // a's job, uppercase
	ids := []string{id, bobs, missing, upper,
		id[:31], id + "0", id[:30] + "zz", id[:31] + "g", // 31, 33 chars, not hex
		tagA + "xyz", "", "%20", strings.Repeat("f", 32), // no job, no node's tag
		id[:31] + "%00", "..%2F" + id, id + "%2F0", "../" + id,
		"%63" + id[1:], "%" + id[:2] + id[2:], // a's job, an escaped first digit
	}
	paths := []string{}
	for _, x := range ids {
		paths = append(paths, "/v1/batch/"+x, "/v1/batch/"+x+"?results=1", "/v1/batch/"+x+"?wait=1s", "/v1/batch/"+x+"?wait=-1s",
			"/v1/batch/"+x+"?wait=1h", "/v1/batch/"+x+"?results=1&results=0")
		for _, idx := range []string{"0", "2", "3", "01", "-1", "+1", "99999999", "99999", "1e1", " 1", "%31", "0x1", ""} {
			paths = append(paths, "/v1/batch/"+x+"/"+idx)
		}
	}
	for _, p := range paths {
		for _, key := range []string{"alice-key", "bob-key"} {
			want := send(ctx, a, "GET", p, bearer(key))
			for _, n := range []*node{b, c} {
				sameAnswer(t, fmt.Sprintf("%s GET %s on %s vs a", key, p, n.Name), send(ctx, n, "GET", p, bearer(key)), want)
			}
			// Ids that name no job on a node of its own answer as a
			// single node does (its ids differ, so none is a job there).
			// An empty id ("/v1/batch/", "/v1/batch//") is the list: a
			// trailing slash is the resource without it, and the cluster
			// lists every node's jobs.
			x, _ := url.PathUnescape(strings.TrimPrefix(p, "/v1/batch/"))
			isList := strings.Trim(strings.SplitN(x, "?", 2)[0], "/") == ""
			if !isList && !strings.HasPrefix(x, id) && !strings.HasPrefix(x, bobs) && !strings.HasPrefix(x, upper) {
				sameAnswer(t, fmt.Sprintf("%s GET %s on a vs a single node", key, p), want, send(ctx, one, "GET", p, bearer(key)))
			}
		}
	}
	// Other methods on a job's path: 405 as on a single node.
	for _, m := range []string{"POST", "PUT", "PATCH"} {
		for _, p := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "/0"} {
			want := send(ctx, a, m, p, bearer("alice-key"))
			sameAnswer(t, m+" "+p+" on b vs a", send(ctx, b, m, p, bearer("alice-key")), want)
			sameAnswer(t, m+" "+p+" on a vs a single node", want, send(ctx, one, m, p, bearer("alice-key")))
		}
	}
	// DELETE: another caller's job, ids that are none, through b and c.
	for _, x := range []string{id, bobs, missing, upper, id[:31], id + "0"} {
		for _, n := range []*node{b, c} {
			want := send(ctx, a, "DELETE", "/v1/batch/"+x, bearer("mallory"))
			sameAnswer(t, "unknown key DELETE "+x+" on "+n.Name, send(ctx, n, "DELETE", "/v1/batch/"+x, bearer("mallory")), want)
		}
	}
	for _, x := range []string{id, missing} {
		want := send(ctx, a, "DELETE", "/v1/batch/"+x, bearer("bob-key"))
		if want.code != http.StatusNotFound {
			t.Fatalf("bob deletes %s on a: %d", x, want.code)
		}
		sameAnswer(t, "bob DELETE "+x+" on b", send(ctx, b, "DELETE", "/v1/batch/"+x, bearer("bob-key")), want)
	}
	// The job is untouched by all that: still done, on every node.
	for _, n := range []*node{a, b, c} {
		got := send(ctx, n, "GET", "/v1/batch/"+id, bearer("alice-key"))
		if got.code != http.StatusOK || !strings.Contains(string(got.body), `"status":"done"`) {
			t.Errorf("alice's job on %s: %d %s", n.Name, got.code, got.body)
		}
	}
}

// TestNode_HostileAuthorizationAnsweredAsHolder: what a node refuses about another node's
// job is what a single node refuses, and a forwarded request never acts as
// someone else: two Authorization headers (in either order), another
// caller's key, no key, Basic, an empty Bearer, a key with spaces.
func TestNode_HostileAuthorizationAnsweredAsHolder(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	// A long Timeout, as in TestNode_NotFoundAsOnOneNode.
	tc := clustertest.Start(t, clustertest.Options{Timeout: 20 * time.Second}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	ctx := context.Background()
	id := a.Submit(t, "alice-key", "https://example.com/hold")

	cases := [][]string{
		{"Bearer alice-key", "Bearer bob-key"},
		{"Bearer bob-key", "Bearer alice-key"},
		{"Bearer alice-key", "Bearer alice-key"},
		{"Bearer bob-key"},
		{},
		{"Basic " + "YWxpY2U6YWxpY2Uta2V5"},
		{"Basic alice-key"},
		{"Bearer"},
		{"Bearer "},
		{"Bearer alice-key bob-key"},
		{"alice-key"},
		{"Bearer\talice-key"},
		{"Bearer alice-key\r\nAuthorization: Bearer bob-key"},
	}
	for _, auth := range cases {
		for _, m := range []struct{ method, path string }{{"GET", "/v1/batch/" + id}, {"GET", "/v1/batch/" + id + "?results=1"},
			{"GET", "/v1/batch/" + id + "/0"}, {"GET", "/v1/batch/" + id + "?wait=1s"}, {"DELETE", "/v1/batch/" + id}} {
			want := send(ctx, a, m.method, m.path, auth...)
			got := send(ctx, b, m.method, m.path, auth...)
			if want.err != nil && got.err != nil {
				continue // the client refuses to send it at all
			}
			sameAnswer(t, fmt.Sprintf("%s %s with %q: b vs a", m.method, m.path, auth), got, want)
			if got.code == http.StatusOK {
				t.Errorf("%s %s with %q: b answered 200", m.method, m.path, auth)
			}
		}
	}
	// The job is still alice's, still running: nobody cancelled it.
	if got := send(ctx, b, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK || !strings.Contains(string(got.body), `"status":"running"`) && !strings.Contains(string(got.body), `"status":"queued"`) {
		t.Fatalf("alice's job after the hostile requests: %d %s", got.code, got.body)
	}
}

// TestNode_LongPollClientLeavingEndsHolderWork: long-polls through another node whose
// clients leave early: the holder's work for them ends at once (no session,
// no handler left waiting), well before the wait (50s, past the kit's
// deadline) would end them; the job answers as before; the asking node's
// asks end too. Not parallel: it counts the process's goroutines.
func TestNode_LongPollClientLeavingEndsHolderWork(t *testing.T) {
	testkit.Long(t)
	tc := clustertest.New(t, clustertest.Options{})
	entered := make(chan struct{}, 64)
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{Route: forwardedCounter("GET /v1/batch/{id}", entered)}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{Timeout: time.Second}})[0], tc.Node("b")
	tc.WaitMembers(2)
	id := a.Submit(t, "alice-key", "https://example.com/hold")

	const n = 8
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan answer, n)
	for range n {
		go func() { done <- send(ctx, b, "GET", "/v1/batch/"+id+"?wait=50s", bearer("alice-key")) }()
	}
	recvN(t, entered, n)
	cancel()
	for _, ans := range recvN(t, done, n) {
		if ans.err == nil {
			t.Errorf("a client that left got an answer: %d %s", ans.code, ans.body)
		}
	}
	// The holder's sessions and their handlers end, long before the 50s.
	waitNone(t, "engine/cluster.(*session).serve")
	waitNone(t, "engine.(*Runner).Wait")
	// The job answers as before, through b: running, then done.
	if got := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
		t.Fatalf("the job after the clients left: %d %s", got.code, got.body)
	}
	tc.Hold.Open()
	got := send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=20s", bearer("alice-key"))
	if got.code != http.StatusOK || !strings.Contains(string(got.body), `"status":"done"`) {
		t.Fatalf("wait through b after release: %d %s", got.code, got.body)
	}
	// The asking node's futures end with the answers.
	waitNone(t, "engine/cluster.(*forwarder).ask(")
}

// TestNode_DeleteOfEndedJobThroughAnotherNode: a DELETE through another node
// of a job that has just ended is 409, as on its node; DELETEs racing with
// the job's end, through several nodes at once, see exactly one 200 or
// none (then the job ended first), the others 409, and the job's end
// state agrees.
func TestNode_DeleteOfEndedJobThroughAnotherNode(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	ctx := context.Background()

	id := a.Submit(t, "alice-key", "https://example.com/1")
	a.WaitDone(t, id)
	want := send(ctx, a, "DELETE", "/v1/batch/"+id, bearer("alice-key"))
	if want.code != http.StatusConflict {
		t.Fatalf("DELETE of an ended job on a: %d %s", want.code, want.body)
	}
	sameAnswer(t, "DELETE ended job on b", send(ctx, b, "DELETE", "/v1/batch/"+id, bearer("alice-key")), want)

	// Racing: the job's one target is released as DELETEs go out from
	// b and c (and a) at once.
	for round := range 3 {
		id := a.Submit(t, "alice-key", "https://example.com/hold")
		start := make(chan struct{})
		out := make(chan answer, 6)
		for _, n := range []*node{a, b, c, b, c, b} {
			go func() {
				<-start
				out <- send(ctx, n, "DELETE", "/v1/batch/"+id, bearer("alice-key"))
			}()
		}
		close(start)
		if round == 0 {
			tc.Hold.Open()
		}
		oks := 0
		for _, ans := range recvN(t, out, 6) {
			switch ans.code {
			case http.StatusOK:
				oks++
			case http.StatusConflict:
			default:
				t.Errorf("racing DELETE: %d %s", ans.code, ans.body)
			}
		}
		a.WaitDone(t, id)
		got := send(ctx, c, "GET", "/v1/batch/"+id, bearer("alice-key"))
		cancelled := strings.Contains(string(got.body), `"status":"cancelled"`)
		if oks > 1 || (oks == 1) != cancelled {
			t.Errorf("round %d: %d DELETEs answered 200; the job: %s", round, oks, got.body)
		}
	}
}

// TestNode_ResultReadersHoldPartsNotAnswers: 12 clients read, at once and
// through another node, a job's ?results=1 of 8 MiB: every answer is whole
// and identical to the holder's own; and with the readers stalled after
// their first MiB, the live heap (both nodes, and the clients, which hash
// and do not keep) holds about what 12 forwarded answers hold — a part on
// each side, a result and its JSON on the holder: about 1 MiB each (under
// 32 MiB in all) — far from 12 whole answers (96 MiB). (12 parts in flight
// stay under gRPC's 4 MiB message limit; 50 readers too:
// TestNode_CrowdOfResultReadersAllWhole.) Not parallel: it reads the
// process's heap and goroutines.
func TestNode_ResultReadersHoldPartsNotAnswers(t *testing.T) {
	testkit.Long(t)
	const n = 12
	r := crowd(t, n, 32, true)
	for i, g := range r.got {
		if g.err != nil || g.code != r.want.code || g.sum != r.want.sum || g.n != r.want.n {
			t.Errorf("reader %d: %d, %d bytes, %v; want the holder's %d bytes", i, g.code, g.n, g.err, r.want.n)
		}
	}
	t.Logf("the live heap held %d KiB more with %d answers of %d MiB stalled", r.held>>10, n, r.want.n>>20)
	if limit := int64(n)*(2<<20) + 8<<20; r.held > limit {
		t.Errorf("the live heap held %d MiB more, over %d MiB: answers are held whole somewhere", r.held>>20, limit>>20)
	}
}

// TestNode_HolderLeavingMidResultsCutsAnswer: the holder leaves while a large
// ?results=1 is forwarded (its client has read the first MiB and waits):
// the client sees the answer cut short (an unexpected EOF, incomplete
// JSON), never a whole-looking one; afterwards every request about the job
// through the other node is 503 "node unavailable" with Retry-After, never
// 404.
func TestNode_HolderLeavingMidResultsCutsAnswer(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	var urls []string
	for i := range 24 {
		urls = append(urls, fmt.Sprintf("https://example.com/big/%d", 1<<20+i))
	}
	id := a.Submit(t, "alice-key", urls...) // 24 MiB: more than any socket buffers
	a.WaitDone(t, id)

	req, _ := http.NewRequest("GET", b.Srv.URL+"/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	res, err := b.Srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(res.Body, first); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("first MiB: %d %v", res.StatusCode, err)
	}
	tc.Stop(a)
	tc.WaitMembers(1)
	rest, err := io.ReadAll(res.Body)
	body := append(first, rest...)
	if err == nil || json.Valid(body) {
		t.Fatalf("the answer whose holder left: %d bytes, err %v, valid JSON %v; want it cut short", len(body), err, json.Valid(body))
	}
	if len(body) >= 24<<20 {
		t.Fatalf("the whole answer (%d bytes) came before the holder left: the test proves nothing", len(body))
	}
	for _, m := range []struct{ method, path string }{{"GET", ""}, {"GET", "?results=1"}, {"GET", "?wait=2s"}, {"GET", "/0"}, {"GET", "/99"}, {"DELETE", ""}} {
		got := send(context.Background(), b, m.method, "/v1/batch/"+id+m.path, bearer("alice-key"))
		if got.code != http.StatusServiceUnavailable || got.hdr.Get("Retry-After") != fmt.Sprint(int(cluster.DefaultRetryAfter.Seconds())) || !strings.Contains(string(got.body), `"error":"node unavailable"`) {
			t.Errorf("%s %s after a left: %d %q %s", m.method, m.path, got.code, got.hdr.Get("Retry-After"), got.body)
		}
	}
}

// TestNode_HolderClosingDuringLongPollAnswersNoEmpty200: the holder leaves
// (Node.Close) while long-polls (?wait=) about its job are forwarded to it:
// each client's answer is cut short, or 503 "node unavailable" with
// Retry-After, or the job as JSON; never a clean 200 that is no job (an
// empty body), whichever way each session's select goes (16 sessions).
func TestNode_HolderClosingDuringLongPollAnswersNoEmpty200(t *testing.T) {
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
	entered := make(chan struct{}, 64)
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{Route: forwardedCounter("GET /v1/batch/{id}", entered)}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{Timeout: time.Second}})[0], tc.Node("b")
	tc.WaitMembers(2)
	id := a.Submit(t, "alice-key", "https://example.com/hold")

	const n = 16
	done := make(chan answer, n)
	for range n {
		go func() { done <- send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=4s", bearer("alice-key")) }()
	}
	recvN(t, entered, n)
	go func() { _ = a.Node.Close() }() // the holder leaves; no EndWaits
	bad := 0
	for _, ans := range recvN(t, done, n) {
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

// TestNode_HolderClosingMidResultsCutsAnswer: the holder leaves
// (Node.Close) in the middle of ?results=1 answers forwarded through
// another node: an answer cut short drops the connection before the end of
// the chunked body, so the client reads an unexpected EOF and never takes a
// part for the whole (a whole answer is valid JSON ending in "]}\n"). A
// route middleware on the holder (httpapi Options.Wrap) holds each
// forwarded answer's first Write until the request's context is done, so
// that Close lands mid-answer every time.
func TestNode_HolderClosingMidResultsCutsAnswer(t *testing.T) {
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
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
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{Route: pause}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{Timeout: time.Second}})[0], tc.Node("b")
	tc.WaitMembers(2)
	var urls []string
	for i := range 64 {
		urls = append(urls, fmt.Sprintf("https://example.com/%d", i))
	}
	id := a.Submit(t, "alice-key", urls...)
	a.WaitDone(t, id)

	const n = 12
	done := make(chan answer, n)
	for range n {
		go func() {
			done <- send(context.Background(), b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
		}()
	}
	recvN(t, writing, n)
	go func() { _ = a.Node.Close() }()
	clean := 0
	for _, ans := range recvN(t, done, n) {
		if ans.err == nil && ans.code == http.StatusOK && !(json.Valid(ans.body) && strings.HasSuffix(string(ans.body), "]}\n")) {
			clean++
			t.Logf("clean end of an incomplete answer: %d, %d bytes, ends %q", ans.code, len(ans.body), ans.body[max(0, len(ans.body)-40):])
		}
	}
	if clean > 0 {
		t.Errorf("%d of %d answers cut short by the holder's leaving ended cleanly, incomplete", clean, n)
	}
}

// TestNode_RequestToClosingNodeNeverPanics: a request forwarded to a node
// that is closing (Close has begun, the node still a member: Close waits
// for the answers it gives to end) is answered what the holder answers or
// 503 "node unavailable", never a 500 from a panic in the asking node's
// handler (an answer of status 0). A route middleware on the holder that
// is slow to end a request it gave when Close began holds the window open.
func TestNode_RequestToClosingNodeNeverPanics(t *testing.T) {
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
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
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{Route: slow}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{Timeout: time.Second}})[0], tc.Node("b")
	tc.WaitMembers(2)
	id := a.Submit(t, "alice-key", "https://example.com/1")
	a.WaitDone(t, id)

	go send(context.Background(), b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
	recvN(t, entered, 1)
	closed := make(chan struct{})
	go func() { _ = a.Node.Close(); close(closed) }()
	recvN(t, ctxDone, 1)

	got := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if got.err != nil || got.code != http.StatusServiceUnavailable && got.code != http.StatusOK {
		t.Errorf("GET through b while a closes: %d %q, err %v; want 503 node unavailable (or a's answer)", got.code, got.body, got.err)
	}
	if strings.Contains(tc.Logs.String(), "handler panicked") {
		t.Errorf("b's handler panicked")
	}
}

// TestNode_LongPollClientLeavingEndsAskerWork: when the clients of
// long-polls forwarded to another node leave early, the asking node's own
// work for them ends too: the goroutines its asks started to wait on
// protoactor's futures end with the answers the holder sends once the
// clients left, long before the futures' own deadline (the wait, 50s, past
// the kit's deadline, and the timeout). Not parallel: it counts the
// process's goroutines.
func TestNode_LongPollClientLeavingEndsAskerWork(t *testing.T) {
	testkit.Long(t)
	tc := clustertest.New(t, clustertest.Options{})
	entered := make(chan struct{}, 64)
	a, b := tc.AddSpecs(clustertest.Spec{Name: "a", NodeOptions: clustertest.NodeOptions{Route: forwardedCounter("GET /v1/batch/{id}", entered)}},
		clustertest.Spec{Name: "b", NodeOptions: clustertest.NodeOptions{Timeout: time.Second}})[0], tc.Node("b")
	tc.WaitMembers(2)
	id := a.Submit(t, "alice-key", "https://example.com/hold")

	const n = 12
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan answer, n)
	for range n {
		go func() { done <- send(ctx, b, "GET", "/v1/batch/"+id+"?wait=50s", bearer("alice-key")) }()
	}
	recvN(t, entered, n)
	cancel()
	recvN(t, done, n)
	// The holder's sessions end at once (TestNode_LongPollClientLeavingEndsHolderWork);
	// the asking node's goroutines should too.
	waitNone(t, "engine/cluster.(*forwarder).ask(")
	tc.Hold.Open()
	a.WaitDone(t, id)
}

// TestNode_UppercaseIDOfAbsentNodeIs404: an id that is no job id anywhere
// (uppercase hex: ids are lowercase), whose tag is that of a node that
// left, is 404 as while that node was a member: 503 is for a job whose
// node is not a member, which may be there when its node comes back; an
// uppercase id never is.
func TestNode_UppercaseIDOfAbsentNodeIs404(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "c")
	a, c := tc.Node("a"), tc.Node("c")
	id := c.Submit(t, "alice-key", "https://example.com/1")
	c.WaitDone(t, id)
	upper := strings.ToUpper(id)
	if got := send(context.Background(), a, "GET", "/v1/batch/"+upper, bearer("alice-key")); got.code != http.StatusNotFound {
		t.Fatalf("uppercase id through a while c is a member: %d, want 404", got.code)
	}
	tc.Stop(c)
	tc.WaitMembers(1)
	if got := send(context.Background(), a, "GET", "/v1/batch/"+upper, bearer("alice-key")); got.code != http.StatusNotFound {
		t.Errorf("uppercase id through a after c left: %d %s; want 404 as while c was a member", got.code, got.body)
	}
}

// TestNode_CrowdOfResultReadersAllWhole: 50 clients read, at once and
// through another node, a job's ?results=1 of 4 MiB (16 results of 256
// KiB): every answer is whole and identical to the holder's. Each part is
// at most 256 KiB, and protoactor's endpoint writer batches at most 8
// queued messages into one gRPC message: 50 sessions' parts in flight stay
// under the receiving server's 4 MiB message limit (a larger batch breaks
// the stream, and every message in it is lost). Long: 200 MiB cross.
func TestNode_CrowdOfResultReadersAllWhole(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	const n = 50
	r := crowd(t, n, 16, false)
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

// TestNode_WaitEndsWhenHolderLeaves: a request forwarded to a node that
// stops answering (alive, its handler hung) ends with 503 "node
// unavailable" once that node leaves the membership, not after its
// long-poll's wait and the timeout (60 s + 3 s here): a node that dies holds
// no API call longer than it takes the provider to drop it.
func TestNode_WaitEndsWhenHolderLeaves(t *testing.T) {
	t.Parallel()
	tc := clustertest.New(t, clustertest.Options{})
	arrived := make(chan struct{}, 1)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // runs before the nodes stop (registered after newTestCluster's)
	a := tc.AddWith("a", clustertest.NodeOptions{Answer: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.RawQuery, "wait=") {
				select {
				case arrived <- struct{}{}:
				default:
				}
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			}
			h.ServeHTTP(w, r)
		})
	}})
	b := tc.Add("b")
	tc.WaitMembers(2)
	code, id := a.Post("alice-key", "https://example.com/a")
	if code != http.StatusAccepted {
		t.Fatalf("submit on a: %d", code)
	}

	done := make(chan answer, 1)
	go func() { done <- send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=60s", bearer("alice-key")) }()
	testkit.Recv(t, arrived) // the long-poll reached a
	// a leaves the membership (as the provider drops a node that died),
	// though its process lives on.
	host, port, err := net.SplitHostPort(a.Node.Address())
	if err != nil {
		t.Fatal(err)
	}
	left := false
	for _, s := range tc.Agent.GetStatusHealth() {
		if s.Host == host && strconv.Itoa(s.Port) == port {
			tc.Agent.DeregisterService(s.ID)
			left = true
		}
	}
	if !left {
		t.Fatalf("a (%s) is not registered", a.Node.Address())
	}
	// The wait (60s, past the kit's deadline) has not ended: only a's
	// leaving ends it.
	got := testkit.Recv(t, done)
	if got.code != http.StatusServiceUnavailable || got.hdr.Get("Retry-After") == "" || !strings.Contains(string(got.body), `"error":"node unavailable"`) {
		t.Fatalf("the long-poll through b once a left: %d %v %s %v", got.code, got.hdr, got.body, got.err)
	}
}

// TestNode_EndWaitsAnswersForwardedWait: a long-poll forwarded to the
// job's node answers at once, with the job as it stands, once the asking
// node's EndWaits is called (a graceful stop); other requests are not
// affected: a cancel after it is done once.
func TestNode_EndWaitsAnswersForwardedWait(t *testing.T) {
	testkit.Long(t)
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	id := a.Submit(t, "alice-key", "https://example.com/hold")
	if code, _, body := b.Do(t, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
		t.Fatalf("GET on b: %d %s", code, body)
	}

	type answer struct {
		code int
		body string
		err  error
	}
	waited := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", b.Srv.URL+"/v1/batch/"+id+"?wait=60s", nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		res, err := b.Srv.Client().Do(req)
		if err != nil {
			waited <- answer{err: err}
			return
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		waited <- answer{res.StatusCode, string(body), err}
	}()
	b.Node.EndWaits() // the wait, pending or not yet forwarded, answers at once
	// The wait (60s, past the kit's deadline) ends with EndWaits.
	if w := testkit.Recv(t, waited); w.err != nil || w.code != http.StatusOK || !strings.Contains(w.body, `"status":"`) || strings.Contains(w.body, `"status":"cancelled"`) {
		t.Fatalf("the wait on b after EndWaits: %d %s %v", w.code, w.body, w.err)
	}
	// a's answer to the wait has ended (released, not left to time out), and
	// a wait forwarded later answers at once.
	testkit.WaitFor(t, "a's answers have ended", func() bool { return goroutinesIn(holderAnswering) == 0 })
	go func() {
		got := send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=60s", bearer("alice-key"))
		waited <- answer{got.code, string(got.body), got.err}
	}()
	if w := testkit.Recv(t, waited); w.err != nil || w.code != http.StatusOK {
		t.Fatalf("a wait on b after EndWaits: %d %s %v", w.code, w.body, w.err)
	}
	code, _, body := b.Do(t, "DELETE", "/v1/batch/"+id, "alice-key", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"cancelled":true`) {
		t.Fatalf("cancel on b after EndWaits: %d %s", code, body)
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
		t.Fatalf("results on %s: %d, read error %v; want 200 and an unexpected EOF", n.Name, res.StatusCode, err)
	}
	if len(body) < least || json.Valid(body) {
		t.Fatalf("results on %s: %d bytes, valid JSON %v; want at least %d and incomplete JSON", n.Name, len(body), json.Valid(body), least)
	}
}

// firstWrite watches the answers to one caller's GET /v1/batch/{id}/{idx}
// on a node (the forwarded ones included): started is closed when the
// first large Write (a piece of a result, not the head) of such an answer
// begins, returned when it returns.
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
	if len(p) < 64<<10 { // the answer's head: a result is written in pieces of 512 KiB
		return w.ResponseWriter.Write(p)
	}
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

// hashed is an answer read without holding it: its status, size and
// SHA-256.
type hashed struct {
	code int
	sum  [32]byte
	n    int64
	err  error
}

// readHashed GETs path on n as key's caller and hashes the answer. With
// paused not nil, it reads the first MiB, says so on paused, and waits
// for resume before it reads on.
func readHashed(n *node, path, key string, paused chan<- struct{}, resume <-chan struct{}) hashed {
	req, _ := http.NewRequest("GET", n.Srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	c := n.Srv.Client()
	if paused != nil {
		// A reader that pauses takes in 64 KiB at most while paused: a
		// socket's receive buffer grows to tcp_rmem's maximum (32 MiB
		// here) by default, which would take a whole answer in, and the
		// stall (every forward writing to its client) never come.
		tr := c.Transport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
			}); err != nil {
				return err
			}
			return serr
		}}).DialContext
		defer tr.CloseIdleConnections()
		c = &http.Client{Transport: tr}
	}
	res, err := c.Do(req)
	if err != nil {
		if paused != nil {
			paused <- struct{}{}
		}
		return hashed{err: err}
	}
	defer res.Body.Close()
	h := sha256.New()
	var first int64
	if paused != nil {
		first, err = io.CopyN(h, res.Body, 1<<20)
		paused <- struct{}{}
		<-resume
	}
	k := int64(0)
	if err == nil {
		k, err = io.Copy(h, res.Body)
	}
	out := hashed{code: res.StatusCode, n: first + k, err: err}
	h.Sum(out.sum[:0])
	return out
}

// waitLong waits until cond holds, checking it every 50 ms, failing the
// test after d: for a state that a crowd reaches step by step (each step a
// signal), too many steps for the kit's deadline of one on a loaded
// machine.
func waitLong(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-end.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}

// crowdResult is what crowd observed.
type crowdResult struct {
	want hashed   // the holder's own answer
	got  []hashed // the readers' answers, through another node
	held int64    // with stall: what the live heap held, the readers stalled
}

// crowd has n clients read, at once, through b, the ?results=1 of a job
// on a of k results of 256 KiB (k/4 MiB). With stall, each reader reads
// its first MiB and stops until every answer is stalled (each of a's
// sessions waiting for a pull, each of b's forwards writing to its
// client): then the live heap's growth is measured, with no allocation
// under way to blur it, and the readers go on.
func crowd(t *testing.T, n, k int, stall bool) crowdResult {
	// A long Timeout: the crowd is about the parts' size, not about how
	// long a loaded machine takes to send them (a stream broken by a
	// message too large loses its parts whatever the Timeout).
	tc := clustertest.Start(t, clustertest.Options{Timeout: 30 * time.Second}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	var urls []string
	for i := range k {
		urls = append(urls, fmt.Sprintf("https://example.com/big/%d", 256<<10-i))
	}
	id := a.Submit(t, "alice-key", urls...)
	a.WaitDone(t, id)
	path := "/v1/batch/" + id + "?results=1"
	want := readHashed(a, path, "alice-key", nil, nil)
	if want.code != http.StatusOK || want.err != nil || want.n < int64(k)<<18-int64(k)<<6 {
		t.Fatalf("holder's own answer: %d, %d bytes, %v", want.code, want.n, want.err)
	}
	live := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	base := live()
	out := make(chan hashed, n)
	var paused chan struct{}
	resume := make(chan struct{})
	t.Cleanup(func() { closeOnce(resume) }) // before the nodes stop: their clients read on
	if stall {
		paused = make(chan struct{}, n)
	}
	for range n {
		go func() { out <- readHashed(b, path, "alice-key", paused, resume) }()
	}
	var held int64
	if stall {
		recvN(t, paused, n)
		var sending, writing int
		// Each of a's chunk reads takes a read turn, and the machine may be
		// loaded: the stall may take longer than the kit's deadline, which
		// is for a single event. This one is for a crowd that has hung.
		waitLong(t, "every answer stalled", 4*time.Minute, func() bool {
			sending, writing = len(stacks("engine/cluster.(*session).send")), 0
			for _, g := range stacks("engine/cluster.(*Node).Forward") {
				if !strings.Contains(g, "engine/cluster.(*forwarder).ask(") {
					writing++
				}
			}
			if sending != n || writing != n {
				t.Logf("not stalled yet: %d sessions sending, %d forwards writing", sending, writing)
			}
			return sending == n && writing == n
		})
		held = live() - base
	}
	closeOnce(resume)
	// The answers cross at the pace of a loaded machine under the race
	// detector: each may take longer than the kit's deadline; this one is
	// for a crowd that has hung.
	hung := time.NewTimer(5 * time.Minute)
	defer hung.Stop()
	got := make([]hashed, 0, n)
	for len(got) < n {
		select {
		case h := <-out:
			got = append(got, h)
		case <-hung.C:
			t.Fatalf("%d of %d answers after 5 minutes", len(got), n)
		}
	}
	return crowdResult{want: want, got: got, held: held}
}
