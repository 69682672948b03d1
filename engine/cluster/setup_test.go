package cluster_test

// The package's one setup: clusters of in-process nodes from the kit
// (clustertest.New, clustertest.Start: each node its store, runner, API
// and cluster node), a single node to compare their answers with (solo),
// and the helpers the tests share to send requests and watch goroutines.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// node is one node of a test cluster.
type node = clustertest.Node

// solo starts a single node, in no cluster, with the clusters' fetch
// (its /hold never released): what a cluster's answers are compared with.
func solo(t testing.TB) *node {
	t.Helper()
	return clustertest.Solo(t, clustertest.Fetch(testkit.NewGate()), engine.Config{})
}

// recvN receives n values from ch, failing the test if any one takes
// longer than testkit.Deadline.
func recvN[T any](t testing.TB, ch <-chan T, n int) []T {
	t.Helper()
	out := make([]T, 0, n)
	for range n {
		out = append(out, testkit.Recv(t, ch))
	}
	return out
}

// answer is an HTTP answer as a client reads it: err is a transport error
// or a body cut short.
type answer struct {
	code int
	hdr  http.Header
	body []byte
	err  error
}

// send sends a request to n with the given Authorization values (none if
// empty), never failing the test: for goroutines, and for answers cut
// short.
func send(ctx context.Context, n *node, method, path string, auth ...string) answer {
	req, err := http.NewRequestWithContext(ctx, method, n.Srv.URL+path, nil)
	if err != nil {
		return answer{err: err}
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{code: res.StatusCode, hdr: res.Header, body: b, err: err}
}

// stacks returns the stacks of the goroutines whose stack holds substr.
func stacks(substr string) []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, substr) {
			out = append(out, g)
		}
	}
	return out
}

// waitNone waits until no goroutine's stack holds substr, failing the
// test after testkit.Deadline.
func waitNone(t testing.TB, substr string) {
	t.Helper()
	testkit.WaitFor(t, "no goroutine in "+substr, func() bool { return len(stacks(substr)) == 0 })
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

// get sends GET path with key to n's API under ctx, and returns the answer
// with its body not read.
func get(ctx context.Context, t testing.TB, n *node, path, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.Srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, n.Name, err)
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

// forwardedCounter is an Options.Wrap that sends on ch each time a
// request another node forwarded reaches the route.
func forwardedCounter(route string, ch chan<- struct{}) func(string, http.Handler) http.Handler {
	return func(r string, h http.Handler) http.Handler {
		if r != route {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.RemoteAddr == "cluster" {
				ch <- struct{}{}
			}
			h.ServeHTTP(w, req)
		})
	}
}

// sameAnswer fails unless got is want: the same status, the same body
// byte for byte, the same headers a client acts on.
func sameAnswer(t *testing.T, what string, got, want answer) {
	t.Helper()
	if got.err != nil || want.err != nil {
		t.Errorf("%s: errors %v / %v", what, got.err, want.err)
		return
	}
	if got.code != want.code || !bytes.Equal(got.body, want.body) {
		t.Errorf("%s: got %d %q; want %d %q", what, got.code, trunc(got.body), want.code, trunc(want.body))
	}
	for _, h := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options", "Retry-After", "Www-Authenticate", "Allow"} {
		if got.hdr.Get(h) != want.hdr.Get(h) {
			t.Errorf("%s: header %s %q, want %q", what, h, got.hdr.Get(h), want.hdr.Get(h))
		}
	}
}

func trunc(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// bearer is the Authorization of key.
func bearer(key string) string { return "Bearer " + key }

// The functions whose goroutines answer a forwarded request: the holder's
// session, and the asking node's Forward.
const (
	holderAnswering = "cluster.(*session).serve("
	askerForwarding = "cluster.(*Node).Forward("
)
