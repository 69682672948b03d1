package cluster_test

// Adversarial tests of issue 16 (any node answers any job): the rules that
// hold. The defects found are in adversary_failing_test.go. Both files
// share the helpers below, on top of cluster_test.go's.
//
// Under the race detector, these tests (like the package's own) can fail
// with "race detected during execution of test" on data races inside
// protoactor-go and gRPC that testdata/race.supp does not suppress (it
// names two; at least these others occur: grpclog.newLoggerV2WithConfig
// from remote.(*Remote).Start — the documented logger race, by another
// frame —, cluster.(*MemberList).UpdateClusterTopology against
// ContainsMemberID, remote.(*BlockList).IsBlocked against Block,
// cluster.setKey against the remote's serializing of gossip state,
// cluster.(*Informer).SendState's math/rand, remote.(*endpointReader)
// .suspend against Receive). With those suppressed too (GORACE=
// "suppressions=FILE", which TestMain then leaves as it is), every test in
// this file passes and every one in adversary_failing_test.go fails, each
// time (-count=3).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/kubernetes"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// nodeOpts are what addWith sets beyond add's defaults.
type nodeOpts struct {
	now           func() time.Time                                // engine.Config.Now
	wrap          func(route string, h http.Handler) http.Handler // httpapi.Options.Wrap
	timeout       time.Duration                                   // cluster.Config.Timeout (default 3s, as add)
	jobsPerCaller int                                             // default 4, as add
	maxInFlight   int
	log           *slog.Logger // default the cluster's log buffer at Debug
}

// addOpts starts a node named name, as add does, with o.
func (tc *testCluster) addOpts(name string, o nodeOpts) *node {
	t := tc.t
	t.Helper()
	log := o.log
	if log == nil {
		log = slog.New(slog.NewTextHandler(tc.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if o.timeout == 0 {
		o.timeout = 3 * time.Second
	}
	if o.jobsPerCaller == 0 {
		o.jobsPerCaller = 4
	}
	cn, err := cluster.New(cluster.Config{Name: tc.name, Node: name, Addr: "127.0.0.1:0", TLS: nodeTLS(t, name),
		Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.agent)), Timeout: o.timeout, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.New(store, tc.fetch, engine.Config{NodeTag: cn.Tag(), JobsPerCaller: o.jobsPerCaller, JobsTotal: 64,
		TargetsPerJob: 64, Now: o.now}, log)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(r, keys, httpapi.Options{Cluster: cn, TargetsPerJob: 64, Log: log, Wrap: o.wrap, MaxInFlight: o.maxInFlight})
	if err != nil {
		t.Fatal(err)
	}
	if err := cn.Start(r, api); err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, store: store, runner: r, node: cn, api: api, srv: httptest.NewServer(api)}
	tc.nodes = append(tc.nodes, n)
	return n
}

// single is a node outside any cluster: the answers a single node gives.
func single(t *testing.T) *node {
	t.Helper()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.New(store, fetchOf(nil), engine.Config{JobsPerCaller: 4, TargetsPerJob: 64}, nil)
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
	n := &node{name: "single", store: store, runner: r, api: api, srv: httptest.NewServer(api)}
	t.Cleanup(func() {
		n.srv.Close()
		r.Close()
		_ = store.Close()
	})
	return n
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
	req, err := http.NewRequestWithContext(ctx, method, n.srv.URL+path, nil)
	if err != nil {
		return answer{err: err}
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	res, err := n.srv.Client().Do(req)
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

// untilNone waits, at most d, until no goroutine's stack holds substr; it
// returns those left then.
func untilNone(substr string, d time.Duration) []string {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		left := stacks(substr)
		if len(left) == 0 {
			return nil
		}
		select {
		case <-deadline.C:
			return left
		case <-tick.C:
		}
	}
}

// waitNames waits until every live node of tc knows every other by its
// name: a node that has only just seen a member answers 404 for its jobs
// meanwhile (TestAdvFail_MemberNotYetKnownAnswers404), which these tests
// are not about.
func waitNames(t *testing.T, tc *testCluster) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for _, n := range tc.nodes {
		if n.closed {
			continue
		}
		for _, o := range tc.nodes {
			if o.closed || o == n {
				continue
			}
			for {
				changed := n.node.Changed()
				if slices.Contains(n.node.Members(), o.name) {
					break
				}
				select {
				case <-changed:
				case <-deadline.C:
					t.Fatalf("node %s does not know %s: %v", n.name, o.name, n.node.Members())
				}
			}
		}
	}
}

// waitSeen waits until n sees want members.
func waitSeen(t *testing.T, n *node, want int) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		changed := n.node.Changed()
		if len(n.node.Members()) == want {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("node %s sees %v, want %d members", n.name, n.node.Members(), want)
		}
	}
}

// waitChan receives n values from ch, failing after d.
func waitChan[T any](t *testing.T, ch <-chan T, n int, d time.Duration, what string) []T {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	var out []T
	for len(out) < n {
		select {
		case v := <-ch:
			out = append(out, v)
		case <-deadline.C:
			if testing.Verbose() {
				for _, g := range stacks("sift/batch") {
					t.Log(g)
				}
			}
			t.Fatalf("%s: %d of %d after %s", what, len(out), n, d)
		}
	}
	return out
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

// TestAdv_IsolationAcrossNodes: every request about a job, answered by a
// node that does not hold it, is byte for byte what the holder answers:
// another caller's job, ids that are no job (one with the holder's tag,
// malformed ones of every kind), odd target indexes; and for ids that
// name no node, what a single node answers.
func TestAdv_IsolationAcrossNodes(t *testing.T) {
	tc := newTestCluster(t)
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	waitNames(t, tc)
	one := single(t)
	ctx := context.Background()

	id := submit(t, a, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3")
	waitDone(t, a, id)
	bobs := submit(t, c, "bob-key", "https://example.com/bob")
	waitDone(t, c, bobs)
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
				sameAnswer(t, fmt.Sprintf("%s GET %s on %s vs a", key, p, n.name), send(ctx, n, "GET", p, bearer(key)), want)
			}
			// Ids that name no job on a node of its own answer as a
			// single node does (its ids differ, so none is a job there).
			x, _ := url.PathUnescape(strings.TrimPrefix(p, "/v1/batch/"))
			if !strings.HasPrefix(x, id) && !strings.HasPrefix(x, bobs) && !strings.HasPrefix(x, upper) {
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
			sameAnswer(t, "unknown key DELETE "+x+" on "+n.name, send(ctx, n, "DELETE", "/v1/batch/"+x, bearer("mallory")), want)
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
			t.Errorf("alice's job on %s: %d %s", n.name, got.code, got.body)
		}
	}
}

// TestAdv_HostileAuthorization: what a node refuses about another node's
// job is what a single node refuses, and a forwarded request never acts as
// someone else: two Authorization headers (in either order), another
// caller's key, no key, Basic, an empty Bearer, a key with spaces.
func TestAdv_HostileAuthorization(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	waitNames(t, tc)
	ctx := context.Background()
	id := submit(t, a, "alice-key", "https://example.com/hold")

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

// TestAdv_LongPollClientLeaves: long-polls through another node whose
// clients leave early: the holder's work for them ends at once (no session,
// no handler left waiting), and the job answers as before. (The asking
// node's own leftovers are TestAdvFail_LongPollLeavesAskingGoroutines;
// here they are waited for, the wait kept short, so that the leak check
// stays clean.)
func TestAdv_LongPollClientLeaves(t *testing.T) {
	tc := newTestCluster(t)
	entered := make(chan struct{}, 64)
	a := tc.addOpts("a", nodeOpts{wrap: forwardedCounter("GET /v1/batch/{id}", entered)})
	b := tc.addOpts("b", nodeOpts{timeout: time.Second})
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, a, "alice-key", "https://example.com/hold")

	const n = 8
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan answer, n)
	for range n {
		go func() { done <- send(ctx, b, "GET", "/v1/batch/"+id+"?wait=3s", bearer("alice-key")) }()
	}
	waitChan(t, entered, n, 10*time.Second, "forwarded long-polls on a")
	cancel()
	for _, ans := range waitChan(t, done, n, 5*time.Second, "clients that left") {
		if ans.err == nil {
			t.Errorf("a client that left got an answer: %d %s", ans.code, ans.body)
		}
	}
	// The holder's sessions and their handlers end, long before the 3s.
	if left := untilNone("engine/cluster.(*session).serve", 2*time.Second); len(left) > 0 {
		t.Fatalf("%d sessions left on the holder, e.g.:\n%s", len(left), left[0])
	}
	if left := untilNone("engine.(*Runner).Wait", 2*time.Second); len(left) > 0 {
		t.Fatalf("%d waits left on the holder, e.g.:\n%s", len(left), left[0])
	}
	// The job answers as before, through b: running, then done.
	if got := send(context.Background(), b, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
		t.Fatalf("the job after the clients left: %d %s", got.code, got.body)
	}
	close(tc.release)
	got := send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=20s", bearer("alice-key"))
	if got.code != http.StatusOK || !strings.Contains(string(got.body), `"status":"done"`) {
		t.Fatalf("wait through b after release: %d %s", got.code, got.body)
	}
	// The asking node's futures end by their deadline (1s + 3s).
	if left := untilNone("engine/cluster.(*forwarder).ask", 6*time.Second); len(left) > 0 {
		t.Fatalf("%d asks left on b", len(left))
	}
}

// TestAdv_DeleteEndedJobThroughAnotherNode: a DELETE through another node
// of a job that has just ended is 409, as on its node; DELETEs racing with
// the job's end, through several nodes at once, see exactly one 200 or
// none (then the job ended first), the others 409, and the job's end
// state agrees.
func TestAdv_DeleteEndedJobThroughAnotherNode(t *testing.T) {
	tc := newTestCluster(t)
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	waitNames(t, tc)
	ctx := context.Background()

	id := submit(t, a, "alice-key", "https://example.com/1")
	waitDone(t, a, id)
	want := send(ctx, a, "DELETE", "/v1/batch/"+id, bearer("alice-key"))
	if want.code != http.StatusConflict {
		t.Fatalf("DELETE of an ended job on a: %d %s", want.code, want.body)
	}
	sameAnswer(t, "DELETE ended job on b", send(ctx, b, "DELETE", "/v1/batch/"+id, bearer("alice-key")), want)

	// Racing: the job's one target is released as DELETEs go out from
	// b and c (and a) at once.
	for round := range 3 {
		id := submit(t, a, "alice-key", "https://example.com/hold")
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
			close(tc.release)
		}
		oks := 0
		for _, ans := range waitChan(t, out, 6, 15*time.Second, "racing DELETEs") {
			switch ans.code {
			case http.StatusOK:
				oks++
			case http.StatusConflict:
			default:
				t.Errorf("racing DELETE: %d %s", ans.code, ans.body)
			}
		}
		waitDone(t, a, id)
		got := send(ctx, c, "GET", "/v1/batch/"+id, bearer("alice-key"))
		cancelled := strings.Contains(string(got.body), `"status":"cancelled"`)
		if oks > 1 || (oks == 1) != cancelled {
			t.Errorf("round %d: %d DELETEs answered 200; the job: %s", round, oks, got.body)
		}
	}
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
	req, _ := http.NewRequest("GET", n.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.srv.Client().Do(req)
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
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	waitNames(t, tc)
	var urls []string
	for i := range k {
		urls = append(urls, fmt.Sprintf("https://example.com/big/%d", 256<<10-i))
	}
	id := submit(t, a, "alice-key", urls...)
	waitDone(t, a, id)
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
	if stall {
		paused = make(chan struct{}, n)
	}
	for range n {
		go func() { out <- readHashed(b, path, "alice-key", paused, resume) }()
	}
	var held int64
	if stall {
		waitChan(t, paused, n, 30*time.Second, "readers paused")
		deadline := time.NewTimer(20 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			sending := len(stacks("engine/cluster.(*session).send"))
			writing := 0
			for _, g := range stacks("engine/cluster.(*Node).Forward") {
				if !strings.Contains(g, "engine/cluster.(*forwarder).ask") {
					writing++
				}
			}
			if sending == n && writing == n {
				break
			}
			select {
			case <-tick.C:
			case <-deadline.C:
				t.Fatalf("not stalled: %d sessions sending, %d forwards writing", sending, writing)
			}
		}
		held = live() - base
	}
	close(resume)
	got := waitChan(t, out, n, 120*time.Second, "crowd answers")
	return crowdResult{want: want, got: got, held: held}
}

// TestAdv_ResultReadersMemory: 12 clients read, at once and through
// another node, a job's ?results=1 of 16 MiB: every answer is whole and
// identical to the holder's own; and with the readers stalled after their
// first MiB, the live heap (both nodes, and the clients, which hash and do
// not keep) holds about what 12 forwarded answers hold — a part on each
// side, a result and its JSON on the holder: about 1 MiB each — far from
// 12 whole answers (192 MiB). (12 parts in flight stay under gRPC's 4 MiB
// message limit; 50 readers do not: TestAdvFail_CrowdOfResultReaders.)
func TestAdv_ResultReadersMemory(t *testing.T) {
	const n = 12
	r := crowd(t, n, 64, true)
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

// TestAdv_HolderLeavesMidResults: the holder leaves while a large
// ?results=1 is forwarded (its client has read the first MiB and waits):
// the client sees the answer cut short (an unexpected EOF, incomplete
// JSON), never a whole-looking one; afterwards every request about the job
// through the other node is 503 "node unavailable" with Retry-After, never
// 404.
func TestAdv_HolderLeavesMidResults(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	waitNames(t, tc)
	var urls []string
	for i := range 24 {
		urls = append(urls, fmt.Sprintf("https://example.com/big/%d", 1<<20+i))
	}
	id := submit(t, a, "alice-key", urls...) // 24 MiB: more than any socket buffers
	waitDone(t, a, id)

	req, _ := http.NewRequest("GET", b.srv.URL+"/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	res, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(res.Body, first); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("first MiB: %d %v", res.StatusCode, err)
	}
	tc.stop(a)
	tc.waitMembers(1)
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

// listPage is GET /v1/batch's answer.
type listPage struct {
	Jobs []struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		CreatedAt int64  `json:"created_at"`
	} `json:"jobs"`
	NextCursor  string   `json:"next_cursor"`
	Unavailable []string `json:"unavailable_nodes"`
}

// fakeClock is a clock the test sets, shared by nodes.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock on by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestAdv_ListMerge: a caller's jobs spread on 3 nodes whose clocks tie
// and interleave, listed in pages of 1 to 5, each page asked of another
// node than the one before (a cursor from one node used on another), with
// and without status filters: every job exactly once, newest first, in
// each node's own order for its jobs, in the same order whatever the page
// size; no other caller's job; bad requests answered as by a single node;
// another caller's cursor lists only the caller's jobs after it; a node
// that left is named.
func TestAdv_ListMerge(t *testing.T) {
	tc := newTestCluster(t)
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	o := nodeOpts{now: clock.Now, jobsPerCaller: 8}
	a, b, c := tc.addOpts("a", o), tc.addOpts("b", o), tc.addOpts("c", o)
	tc.waitMembers(3)
	waitNames(t, tc)
	nodes := []*node{a, b, c}
	one := single(t)
	ctx := context.Background()

	base := time.Unix(1_800_000_000, 0)
	created := map[string]int64{} // alice's jobs, by id: their creation time
	status := map[string]string{}
	// Times: some shared by jobs of every node, some by two, some alone.
	steps := []struct {
		at   time.Duration
		on   int
		hold bool
	}{
		{0, 0, false}, {0, 1, false}, {0, 2, false}, // a tie across all three
		{1, 1, false}, {2, 0, true}, {2, 2, false}, {3, 2, false}, {3, 0, false},
		{5, 1, true}, {5, 1, false}, {5, 0, false}, {8, 2, true}, {9, 0, false}, {9, 1, false},
		{10, 2, false}, {10, 2, false}, {10, 2, false},
	}
	var bobs string
	// The held jobs last: each holds its node's one worker.
	for _, hold := range []bool{false, true} {
		for i, s := range steps {
			if s.hold != hold {
				continue
			}
			clock.Set(base.Add(s.at * time.Nanosecond))
			n := nodes[s.on]
			url := fmt.Sprintf("https://example.com/%d", i)
			if s.hold {
				url = "https://example.com/hold"
			}
			id := submit(t, n, "alice-key", url)
			created[id] = base.Add(s.at).UnixNano()
			if !s.hold {
				waitDone(t, n, id)
				status[id] = "done"
			} else {
				status[id] = "running"
			}
			if i == 7 { // bob's job, at a time of its own
				clock.Set(base.Add(4 * time.Nanosecond))
				bobs = submit(t, c, "bob-key", "https://example.com/bob")
				waitDone(t, c, bobs)
			}
		}
	}
	// One of alice's running jobs cancelled.
	for id, st := range status {
		if st == "running" && strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag("b"))) {
			if got := send(ctx, a, "DELETE", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
				t.Fatalf("cancel %s: %d %s", id, got.code, got.body)
			}
			waitDone(t, b, id)
			status[id] = "cancelled"
		}
	}
	// The running ones may be queued or running: "live" covers both.
	// The order each node gives its own jobs.
	own := map[*node][]string{}
	for _, n := range nodes {
		jobs, _, err := n.runner.List("alice", engine.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			own[n] = append(own[n], j.ID)
		}
	}

	listAll := func(t *testing.T, query string, limit, start int) []string {
		t.Helper()
		var ids []string
		cursor := ""
		for page := 0; ; page++ {
			if page > 40 {
				t.Fatal("too many pages")
			}
			n := nodes[(start+page)%3]
			q := fmt.Sprintf("/v1/batch?limit=%d%s", limit, query)
			if cursor != "" {
				q += "&cursor=" + cursor
			}
			got := send(ctx, n, "GET", q, bearer("alice-key"))
			if got.code != http.StatusOK {
				t.Fatalf("GET %s on %s: %d %s", q, n.name, got.code, got.body)
			}
			var p listPage
			if err := json.Unmarshal(got.body, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Unavailable) > 0 || len(p.Jobs) > limit {
				t.Fatalf("GET %s on %s: %d jobs, unavailable %v", q, n.name, len(p.Jobs), p.Unavailable)
			}
			for _, j := range p.Jobs {
				ids = append(ids, j.ID)
			}
			if p.NextCursor == "" {
				return ids
			}
			cursor = p.NextCursor
		}
	}
	check := func(t *testing.T, what string, ids []string, keep func(id string) bool) {
		t.Helper()
		seen := map[string]bool{}
		for i, id := range ids {
			if _, ok := created[id]; !ok || seen[id] || !keep(id) {
				t.Fatalf("%s: job %s listed (twice, or not alice's, or not in the filter)", what, id)
			}
			seen[id] = true
			if i > 0 && created[id] > created[ids[i-1]] {
				t.Fatalf("%s: job %d is newer than job %d", what, i, i-1)
			}
		}
		for id := range created {
			if keep(id) && !seen[id] {
				t.Fatalf("%s: job %s missing", what, id)
			}
		}
		for _, n := range nodes {
			var sub []string
			for _, id := range ids {
				if strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag(n.name))) {
					sub = append(sub, id)
				}
			}
			var want []string
			for _, id := range own[n] {
				if keep(id) {
					want = append(want, id)
				}
			}
			if strings.Join(sub, ",") != strings.Join(want, ",") {
				t.Fatalf("%s: %s's jobs in the order %v, %s lists them %v", what, n.name, sub, n.name, want)
			}
		}
	}
	filters := map[string]func(string) bool{
		"":                  func(string) bool { return true },
		"&status=done":      func(id string) bool { return status[id] == "done" },
		"&status=terminal":  func(id string) bool { return status[id] != "running" },
		"&status=live":      func(id string) bool { return status[id] == "running" },
		"&status=cancelled": func(id string) bool { return status[id] == "cancelled" },
		"&status=failed":    func(string) bool { return false },
	}
	var order string
	for q, keep := range filters {
		for limit := 1; limit <= 5; limit++ {
			for start := range 3 {
				ids := listAll(t, q, limit, start)
				check(t, fmt.Sprintf("list%s limit %d from %s", q, limit, nodes[start].name), ids, keep)
				if q == "" {
					if order == "" {
						order = strings.Join(ids, ",")
					} else if strings.Join(ids, ",") != order {
						t.Fatalf("limit %d from %s: another order", limit, nodes[start].name)
					}
				}
			}
		}
	}
	// Bad requests: as a single node answers them.
	for _, q := range []string{"?cursor=garbage!", "?cursor=AAAA", "?cursor=" + strings.Repeat("A", 40), "?limit=0", "?limit=101", "?limit=x",
		"?status=bogus", "?other=1", "?limit=-1", "?status=DONE"} {
		want := send(ctx, one, "GET", "/v1/batch"+q, bearer("alice-key"))
		for _, n := range nodes {
			sameAnswer(t, "GET /v1/batch"+q+" on "+n.name, send(ctx, n, "GET", "/v1/batch"+q, bearer("alice-key")), want)
		}
	}
	// Bob's cursor, in alice's hands: alice's jobs older than bob's.
	bobPage := send(ctx, c, "GET", "/v1/batch?limit=1", bearer("bob-key"))
	var bp listPage
	if err := json.Unmarshal(bobPage.body, &bp); err != nil || len(bp.Jobs) != 1 || bp.Jobs[0].ID != bobs {
		t.Fatalf("bob's list: %s", bobPage.body)
	}
	jobs, cursors, _, err := engine.PeerOf(c.runner).ListAt("bob", engine.ListOptions{Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatal(err)
	}
	for _, n := range nodes {
		got := send(ctx, n, "GET", "/v1/batch?limit=100&cursor="+cursors[0], bearer("alice-key"))
		var p listPage
		if err := json.Unmarshal(got.body, &p); err != nil || got.code != http.StatusOK {
			t.Fatalf("alice with bob's cursor on %s: %d %s", n.name, got.code, got.body)
		}
		var ids []string
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		check(t, "alice with bob's cursor on "+n.name, ids, func(id string) bool { return created[id] < base.Add(4).UnixNano() })
	}
	// Bob sees his job only, from every node.
	for _, n := range nodes {
		got := send(ctx, n, "GET", "/v1/batch", bearer("bob-key"))
		if got.code != http.StatusOK || !strings.Contains(string(got.body), bobs) || strings.Count(string(got.body), `"id"`) != 1 {
			t.Errorf("bob's list on %s: %s", n.name, got.body)
		}
	}
	// c leaves: the list on a names it, and holds a's and b's jobs.
	tc.stop(c)
	tc.waitMembers(2)
	waitNames(t, tc)
	got := send(ctx, a, "GET", "/v1/batch?limit=100", bearer("alice-key"))
	var p listPage
	if err := json.Unmarshal(got.body, &p); err != nil || strings.Join(p.Unavailable, ",") != "c" {
		t.Fatalf("list after c left: %d %s", got.code, got.body)
	}
	left := 0
	for id := range created {
		if !strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag("c"))) {
			left++
		}
	}
	if len(p.Jobs) != left {
		t.Errorf("list after c left: %d jobs, want %d", len(p.Jobs), left)
	}
}

// TestAdv_NodeLifecycleMisuse: bad configs, Start twice, Close twice,
// Close before Start, Start after Close, Forward before Start and after
// Close, List after Close, Start on an address in use or with a provider
// that cannot start: errors (or answers), never panics; and nothing left
// running (TestMain's leak check).
func TestAdv_NodeLifecycleMisuse(t *testing.T) {
	agent := test.NewInMemAgent()
	prov := cluster.ProtoactorProvider(test.NewTestProvider(agent))
	good := cluster.Config{Name: "c", Node: "x", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "x"), Provider: prov}
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

	tc := newTestCluster(t)
	a := tc.add("a")
	b := tc.add("b")
	tc.waitMembers(2)
	waitNames(t, tc)
	id := submit(t, b, "alice-key", "https://example.com/1")
	waitDone(t, b, id)

	// Start twice: an error, and the node goes on.
	if err := a.node.Start(a.runner, a.api); err == nil {
		t.Error("Start twice: no error")
	}
	if got := send(context.Background(), a, "GET", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
		t.Errorf("a after a second Start: %d %s", got.code, got.body)
	}

	// A node never started: Close, Forward, Members; then Start is refused.
	n, err := cluster.New(cluster.Config{Name: tc.name, Node: "y", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "y"), Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.agent))})
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
	if err := n.Start(nil, a.api); err == nil {
		t.Error("Start with a nil runner: no error")
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close before Start: %v", err)
	}
	if err := n.Start(a.runner, a.api); err == nil {
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
	taken, err := cluster.New(cluster.Config{Name: tc.name, Node: "z", Addr: l.Addr().String(), TLS: nodeTLS(t, "z"), Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.agent))})
	if err != nil {
		t.Fatal(err)
	}
	if err := taken.Start(a.runner, a.api); err == nil {
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
		m, err := cluster.New(cluster.Config{Name: tc.name, Node: "w", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "w"), Provider: p})
		if err != nil {
			continue // refused already
		}
		if err := m.Start(a.runner, a.api); err == nil {
			t.Errorf("Start with %s: no error", what)
		}
		_ = m.Close()
	}
	tc.waitMembers(2) // none of them joined

	// Close twice at once; then Forward and List on the closed node.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- b.node.Close() }()
	}
	for _, err := range waitChan(t, errs, 2, 20*time.Second, "Close twice at once") {
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if len(b.node.Members()) != 0 {
		t.Errorf("members of a closed node: %v", b.node.Members())
	}
	rec = httptest.NewRecorder()
	if b.node.Forward(rec, httptest.NewRequest("GET", "/v1/batch/"+id, nil), id) {
		t.Errorf("a closed node forwards its own job: %d %s", rec.Code, rec.Body)
	}
	jobs, _, unavailable, err := b.node.List(context.Background(), "alice", engine.ListOptions{})
	if err != nil || len(jobs) != 1 || strings.Join(unavailable, ",") != "a" {
		t.Errorf("List on a closed node: %v, %d jobs, unavailable %v", err, len(jobs), unavailable)
	}
	waitSeen(t, a, 1)
	// a, about b's job, b having left: 503, never 404.
	got := send(context.Background(), a, "GET", "/v1/batch/"+id, bearer("alice-key"))
	if got.code != http.StatusServiceUnavailable || got.hdr.Get("Retry-After") == "" {
		t.Errorf("b's job on a after b closed: %d %s", got.code, got.body)
	}
}

// TestAdv_LogsRedacted: at Debug, the lines of every node and of
// protoactor's own (remote, cluster, dead letters), through forwarding,
// long-polls, cancels, lists, hostile keys, answers that time out and
// parts that reach a future gone (dead letters of Parts carrying results),
// hold no API key, no target URL or its host, no result content.
func TestAdv_LogsRedacted(t *testing.T) {
	tc := newTestCluster(t)
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
	a := tc.addOpts("a", nodeOpts{wrap: slow})
	b := tc.addOpts("b", nodeOpts{timeout: time.Second})
	c := tc.add("c")
	tc.waitMembers(3)
	waitNames(t, tc)
	ctx := context.Background()
	const secretURL = "https://secret-host.example:8443/private/path?token=TOPSECRET"
	id := submit(t, a, "alice-key", secretURL, "https://secret-host.example/other?token=TOPSECRET", "https://secret-host.example/hold")
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
	waitDone(t, a, id)
	send(ctx, b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
	tc.stop(a)
	tc.waitMembers(2)
	waitNames(t, tc)
	send(ctx, b, "GET", "/v1/batch/"+id+"?results=1", bearer("alice-key"))
	send(ctx, c, "GET", "/v1/batch", bearer("alice-key"))
	tc.stop(b)
	tc.stop(c)

	logs := tc.logs.String()
	if !strings.Contains(logs, "lib=protoactor") || !strings.Contains(logs, "level=DEBUG") || !strings.Contains(logs, "[DeadLetter]") {
		t.Fatalf("the logs lack protoactor's Debug lines or its dead letters: the test proves nothing")
	}
	for _, bad := range []string{"alice-key", "bob-key", "YWxpY2U6", "secret-host", "TOPSECRET", "private/path", "8443", "https://", "http://", "page "} {
		if i := strings.Index(logs, bad); i >= 0 {
			line := logs[strings.LastIndex(logs[:i], "\n")+1:]
			if j := strings.Index(line, "\n"); j >= 0 {
				line = line[:j]
			}
			t.Errorf("the logs hold %q: %s", bad, line)
		}
	}
}
