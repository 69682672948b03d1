package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// capWatch checks, at each admission a caller's grain makes, that the
// caller's admitted jobs not yet ended are within the cap (through the
// package's test-only observer, cluster.SetObserver). The callers it
// watches are its own: their names begin with a prefix no other watch's
// callers have, so that the tests that watch run in parallel.
type capWatch struct {
	prefix string
	mu     sync.Mutex
	live   map[string]map[string]bool // caller → ids admitted, not ended
	// ended are the ids a node has said ended (its job ended, or was
	// never created: released, or given up when the grain's answer came
	// too late). A grain's admission of such an id observed after its end
	// (the grain admitted it, its answer came after the asking node gave
	// it up) is not live: that job never exists, and the grain counts it
	// only until the node's Settle reaches it, which a grain that moved
	// in between never observes as an end.
	ended      map[string]bool
	admissions int
	retries    int // submits asked again: their key bound to a job of another body
	unanswered int // submits asked again: their key's job's node did not answer the reuse check
	violations []string
}

var (
	// watches are the capWatches of the tests running, by prefix.
	watches sync.Map
	// watchSeq numbers the watches' prefixes.
	watchSeq atomic.Int64
	// observing installs observe, once: it stays for the process.
	observing sync.Once
)

// watchCaps starts a watch of the callers named by its caller and keys
// until the test ends.
func watchCaps(t *testing.T) *capWatch {
	w := &capWatch{prefix: fmt.Sprintf("w%d-", watchSeq.Add(1)), live: map[string]map[string]bool{}, ended: map[string]bool{}}
	observing.Do(func() { cluster.SetObserver(observe) })
	watches.Store(w.prefix, w)
	t.Cleanup(func() { watches.Delete(w.prefix) })
	return w
}

// observe hands an admission or an end to the watch of its caller, if any.
func observe(event, caller, id string, limit int) {
	p, _, ok := strings.Cut(caller, "-")
	if !ok {
		return
	}
	v, ok := watches.Load(p + "-")
	if !ok {
		return
	}
	w := v.(*capWatch)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch event {
	case "admit":
		if w.ended[id] {
			w.admissions++
			return
		}
		if w.live[caller] == nil {
			w.live[caller] = map[string]bool{}
		}
		w.live[caller][id] = true
		w.admissions++
		if n := len(w.live[caller]); n > limit {
			w.violations = append(w.violations, fmt.Sprintf("%s: %d live jobs admitted, cap %d (%v, the last %s)", caller, n, limit, slices.Sorted(maps.Keys(w.live[caller])), id))
		}
	case "end":
		delete(w.live[caller], id)
		w.ended[id] = true
	case "retry":
		w.retries++
	case "unanswered":
		w.unanswered++
	}
}

// caller returns the name of w's caller name.
func (w *capWatch) caller(name string) string { return w.prefix + name }

// keys returns the keys file text (lines of caller and key) with w's
// callers in place of its callers.
func (w *capWatch) keys(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		b.WriteString(w.prefix + line)
	}
	return b.String()
}

// check fails the test if a caller of w went past its cap.
func (w *capWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Fatalf("cap exceeded %d times, first: %s", len(w.violations), w.violations[0])
	}
}

// callerKeys is a keys file of n callers: callerI with key keyI.
func callerKeys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "caller%d key%d\n", i, i)
	}
	return b.String()
}

// liveOf counts caller's live jobs on the runner of every node of tc not
// stopped.
func liveOf(tc *clustertest.Cluster, caller string) int {
	n := 0
	for _, nd := range tc.Nodes() {
		if nd.Stopped() {
			continue
		}
		for _, j := range nd.Runner.Live() {
			if j.Caller == caller {
				n++
			}
		}
	}
	return n
}

// sampleLive counts caller's live jobs on every node until stop is closed,
// and returns the most it saw.
func sampleLive(tc *clustertest.Cluster, caller string, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		most := 0
		for {
			most = max(most, liveOf(tc, caller))
			select {
			case <-stop:
				most = max(most, liveOf(tc, caller))
				out <- most
				return
			default:
			}
		}
	}()
	return out
}

// postUntil posts until the answer is neither 429 nor 503, as a client
// retrying would, and returns it: for a step whose grain must first hear
// of an earlier job's end (not the rule under test).
func postUntil(t *testing.T, n *node, key string, urls ...string) (code int, id string) {
	t.Helper()
	testkit.WaitFor(t, "a submit on "+n.Name+" neither 429 nor 503", func() bool {
		code, id = n.Post(key, urls...)
		return code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable
	})
	return code, id
}

// postUntil503 posts until the answer is not 503 (a topology change under
// way), as a client would after Retry-After, and returns it.
func postUntil503(t *testing.T, n *node, key string, urls ...string) (code int, id string) {
	t.Helper()
	testkit.WaitFor(t, "a submit on "+n.Name+" not 503", func() bool {
		code, id = n.Post(key, urls...)
		return code != http.StatusServiceUnavailable
	})
	return code, id
}

// admitUntil asks adm to admit id for caller until the grain says yes (it
// hears of an earlier release or end on a goroutine of its own), failing
// the test on any answer but ErrCallerBusy.
func admitUntil(t *testing.T, adm engine.Admission, caller, key, id string) {
	t.Helper()
	testkit.WaitFor(t, caller+"'s grain admits "+id, func() bool {
		_, err := adm.Admit(context.Background(), caller, key, "", id)
		if err != nil && !errors.Is(err, engine.ErrCallerBusy) {
			t.Fatalf("admit %s: %v", id, err)
		}
		return err == nil
	})
}

// gatedAdmission is a node's Admission that, while gate is set, holds each
// admitted submission (after its grain said ADMIT, before the runner creates
// the job) until gate is closed: a slow node, to order two first submits.
type gatedAdmission struct {
	engine.Admission
	admitted chan struct{}
	gate     chan struct{}
	armed    atomic.Bool // holds the next admitted submission only
}

func (g *gatedAdmission) Admit(ctx context.Context, caller, key, body, id string) (string, error) {
	reuse, err := g.Admission.Admit(ctx, caller, key, body, id)
	if err == nil && reuse == "" && g.armed.Swap(false) {
		g.admitted <- struct{}{}
		<-g.gate
	}
	return reuse, err
}

// TestAdmission_CapAcrossNodes: a caller at her cap on one node is
// refused a second job on every node, another caller is not held up, and
// once her job ends she may submit on another node.
func TestAdmission_CapAcrossNodes(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 1}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")

	held := a.Submit(t, "alice-key", "https://example.com/hold")
	for _, n := range []*node{a, b, c} {
		if code, _ := n.Post("alice-key", "https://example.com/other-"+n.Name); code != http.StatusTooManyRequests {
			t.Fatalf("a second live job of alice on %s: %d, want 429", n.Name, code)
		}
	}
	// bob is not held up by alice.
	if code, _ := b.Post("bob-key", "https://example.com/bob"); code != http.StatusAccepted {
		t.Fatalf("bob on b: %d", code)
	}
	// Once alice's job ends, she may submit on another node. Her grain
	// hears the end a moment after the job's node: ask until admitted.
	if !a.Runner.Cancel(held) {
		t.Fatal("cancel")
	}
	if code, _ := postUntil(t, c, "alice-key", "https://example.com/after"); code != http.StatusAccepted {
		t.Fatalf("alice on c after her job ended: %d", code)
	}
	w.check(t)
}

// TestAdmission_ResubmitReusesOnAnyNode: a resubmit of a done job's
// targets on any node returns that job, unless its node is no member.
func TestAdmission_ResubmitReusesOnAnyNode(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 2}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")

	id := a.Submit(t, "alice-key", "https://example.com/same")
	a.WaitDone(t, id)
	for _, n := range []*node{b, c, a} {
		code, got := n.Post("alice-key", "https://example.com/same")
		if code != http.StatusAccepted || got != id {
			t.Fatalf("resubmit on %s: %d %s, want 202 %s", n.Name, code, got, id)
		}
	}
	// A job whose node is not a member is not reused: a new job starts.
	onC := c.Submit(t, "alice-key", "https://example.com/on-c")
	c.WaitDone(t, onC)
	tc.Stop(c)
	tc.WaitMembers(2)
	code, got := b.Post("alice-key", "https://example.com/on-c")
	if code != http.StatusAccepted || got == onC || got == "" {
		t.Fatalf("resubmit of a job of a node that left: %d %s (its job %s)", code, got, onC)
	}
	w.check(t)
}

// TestAdmission_RetriedAdmitCountsOnce: an admission asked again (as
// protoactor retries a request) counts once against the cap.
func TestAdmission_RetriedAdmitCountsOnce(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Config: engine.Config{JobsPerCaller: 2}}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	carol := w.caller("carol")

	ctx := context.Background()
	adm := a.Node.Admission()
	tag := fmt.Sprintf("%x", cluster.Tag("a"))
	id1, id2, id3 := tag+"000000000000000000000001", tag+"000000000000000000000002", tag+"000000000000000000000003"
	for range 3 { // protoactor retries a request: the same admission, asked again
		if reuse, err := adm.Admit(ctx, carol, "k1", "", id1); err != nil || reuse != "" {
			t.Fatalf("admit %s: %q %v", id1, reuse, err)
		}
	}
	if reuse, err := b.Node.Admission().Admit(ctx, carol, "k2", "", id2); err != nil || reuse != "" {
		t.Fatalf("admit %s on b: %q %v", id2, reuse, err)
	}
	if _, err := adm.Admit(ctx, carol, "k3", "", id3); err != engine.ErrCallerBusy {
		t.Fatalf("a third admission with cap 2: %v, want ErrCallerBusy", err)
	}
	adm.Release(carol, id1)
	admitUntil(t, adm, carol, "k3", id3) // the release reaches the grain on a goroutine of its own
	adm.Release(carol, id2)
	adm.Release(carol, id3)
	w.check(t)
}

// TestAdmission_GrainsMoveAndRebuild holds a live job of each of 20
// callers, then adds two nodes: the grains of some callers move to them,
// and each must rebuild its count from the members: a second job of any
// caller is refused on every node.
func TestAdmission_GrainsMoveAndRebuild(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(callerKeys(20)), Config: engine.Config{JobsPerCaller: 1, JobsTotal: 64}}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	for i := range 20 {
		[]*node{a, b}[i%2].Submit(t, fmt.Sprintf("key%d", i), "https://example.com/hold")
	}
	c, d := tc.AddAll("c", "d")[0], tc.Node("d")
	tc.WaitMembers(4)
	for i := range 20 {
		n := []*node{a, b, c, d}[(i+1)%4]
		code, _ := n.Post(fmt.Sprintf("key%d", i), fmt.Sprintf("https://example.com/second/%d", i))
		if code != http.StatusTooManyRequests {
			t.Fatalf("caller%d's second job on %s after the grains moved: %d, want 429", i, n.Name, code)
		}
	}
	w.check(t)
}

// TestAdmission_Storm: 500 submits from 20 callers over every node, while
// one node joins and one leaves: the cap is never exceeded, checked at
// every admission.
func TestAdmission_Storm(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(callerKeys(20)), Config: engine.Config{JobsPerCaller: 1}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")

	var (
		mu    sync.Mutex
		nodes = []*node{a, b, c}
		codes = map[int]int{}
	)
	pick := func() *node {
		mu.Lock()
		defer mu.Unlock()
		return nodes[rand.IntN(len(nodes))]
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 20 {
		wg.Go(func() {
			<-start
			for j := range 25 {
				code, _ := pick().Post(fmt.Sprintf("key%d", i), fmt.Sprintf("https://example.com/%d/%d", i, j))
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	close(start)
	d := tc.Add("d") // joins
	mu.Lock()
	nodes = []*node{a, c, d}
	mu.Unlock()
	tc.Stop(b) // leaves, gracefully
	wg.Wait()
	w.check(t)
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for code, n := range codes {
		switch code {
		case http.StatusAccepted, http.StatusTooManyRequests, http.StatusServiceUnavailable, 0: // 0: b went away under the request
		default:
			t.Errorf("%d submits answered %d", n, code)
		}
		total += n
	}
	if total != 500 || codes[http.StatusAccepted] == 0 {
		t.Fatalf("answers: %v", codes)
	}
	t.Logf("answers: %v; admissions seen: %d", codes, w.admissions)
}

// 30 goroutines, 10 on each of 3 nodes, submit different work for the same
// caller at once, with JobsPerCaller 1 then 2: the live jobs across every
// runner never exceed the cap, at any moment sampled and at every admission.
func TestAdmission_ConcurrentSameCallerNeverOverCap(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("cap", limit), func(t *testing.T) {
			t.Parallel()
			w := watchCaps(t)
			alice := w.caller("alice")
			tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: limit, JobsTotal: 64}}, "a", "b", "c")
			nodes := tc.Nodes()
			stop := make(chan struct{})
			most := sampleLive(tc, alice, stop)
			start := make(chan struct{})
			var wg sync.WaitGroup
			var accepted atomic.Int32
			codes := make(chan int, 30)
			for i := range 30 {
				wg.Go(func() {
					<-start
					code, _ := nodes[i%3].Post("alice-key", fmt.Sprintf("https://example.com/%d/hold", i))
					codes <- code
					if code == http.StatusAccepted {
						accepted.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			close(stop)
			close(codes)
			for code := range codes {
				if code != http.StatusAccepted && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
					t.Errorf("a submit answered %d", code)
				}
			}
			if m := <-most; m > limit {
				t.Fatalf("%d live jobs of alice seen at once, cap %d", m, limit)
			}
			if n := int(accepted.Load()); n > limit || n == 0 {
				t.Fatalf("%d submits accepted, cap %d (all holding)", n, limit)
			}
			if n := liveOf(tc, alice); n != int(accepted.Load()) {
				t.Fatalf("%d live jobs, %d accepted", n, accepted.Load())
			}
			w.check(t)
		})
	}
}

// The same targets submitted at once on every node, 5 times each: the
// concurrent first submits make one job (each asked again until the first
// admitted exists), never past the cap; every resubmit on any node returns
// that job.
func TestAdmission_ConcurrentIdenticalFirstSubmits(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 3, JobsTotal: 64}}, "a", "b", "c")
	nodes := tc.Nodes()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	for i := range 15 {
		wg.Go(func() {
			<-start
			code, id := nodes[i%3].Post("alice-key", "https://example.com/same/hold")
			mu.Lock()
			defer mu.Unlock()
			if code == http.StatusAccepted {
				ids[id]++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("jobs created by 15 concurrent identical first submits: %v; want one", ids)
	}
	t.Logf("15 concurrent identical first submits created %d job(s): %v", len(ids), ids)
	if n := liveOf(tc, w.caller("alice")); n > 3 {
		t.Fatalf("%d live jobs, cap 3", n)
	}
	// Sequential resubmits now: the same job on every node.
	var first string
	for round := range 2 {
		for _, n := range nodes {
			code, id := n.Post("alice-key", "https://example.com/same/hold")
			if code != http.StatusAccepted || ids[id] == 0 {
				t.Fatalf("resubmit %d on %s: %d %s, not one of %v", round, n.Name, code, id, ids)
			}
			if first == "" {
				first = id
			} else if id != first {
				t.Fatalf("resubmit on %s returned %s, an earlier one %s", n.Name, id, first)
			}
		}
	}
	w.check(t)
}

// Done jobs are reused on any node; failed and cancelled ones never; one
// past its TTL (a fake clock) is not.
func TestAdmission_ReuseByOutcomeAndTTL(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	clock := testkit.NewClock()
	clock.Set(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	hold := testkit.NewGate()
	t.Cleanup(hold.Open)
	page := clustertest.Fetch(hold)
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/fail") {
			return engine.Result{}, errors.New("refused")
		}
		return page(ctx, c, tg)
	}
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Fetch: fetch,
		Config: engine.Config{Now: clock.Now, TTL: time.Hour, JobsPerCaller: 2, JobsTotal: 64}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")

	// done → reused everywhere
	done := a.Submit(t, "alice-key", "https://example.com/done")
	a.WaitDone(t, done)
	for _, n := range []*node{b, c, a} {
		if code, id := n.Post("alice-key", "https://example.com/done"); code != http.StatusAccepted || id != done {
			t.Fatalf("resubmit of a done job on %s: %d %s, want %s", n.Name, code, id, done)
		}
	}
	// failed → never reused
	failed := b.Submit(t, "alice-key", "https://example.com/fail")
	b.WaitDone(t, failed)
	if j, _ := b.Runner.Job(failed); j.Status != engine.StatusFailed {
		t.Fatalf("job %s: %s, want failed", failed, j.Status)
	}
	for _, n := range []*node{c, a, b} {
		code, id := postUntil(t, n, "alice-key", "https://example.com/fail")
		if code != http.StatusAccepted || id == failed {
			t.Fatalf("resubmit of a failed job on %s: %d %s (the failed job %s)", n.Name, code, id, failed)
		}
		n.WaitDone(t, id)
	}
	// cancelled → never reused, even right after the cancel (the first
	// submit once the grain has heard of the failed jobs' ends)
	code, cancelled := postUntil(t, c, "alice-key", "https://example.com/c/hold")
	if code != http.StatusAccepted {
		t.Fatalf("submit on c: %d", code)
	}
	if !c.Runner.Cancel(cancelled) {
		t.Fatal("cancel")
	}
	for _, n := range []*node{a, b} {
		code, id := postUntil(t, n, "alice-key", "https://example.com/c/hold")
		if code != http.StatusAccepted || id == cancelled {
			t.Fatalf("resubmit of a cancelled job on %s: %d %s (the cancelled job %s)", n.Name, code, id, cancelled)
		}
		if !n.Runner.Cancel(id) {
			t.Fatal("cancel")
		}
	}
	// past the TTL → not reused
	clock.Advance(2 * time.Hour)
	// (c's worker may still hold the cancelled job's fetch: the new job may
	// stay queued, which is reusable too.)
	code, id := postUntil(t, c, "alice-key", "https://example.com/done")
	if code != http.StatusAccepted || id == done {
		t.Fatalf("resubmit of a job past its TTL: %d %s (the old job %s)", code, id, done)
	}
	// and the new one is reused in its stead
	if code, again := a.Post("alice-key", "https://example.com/done"); code != http.StatusAccepted || again != id {
		t.Fatalf("resubmit after the TTL renewal on a: %d %s, want %s", code, again, id)
	}
	w.check(t)
}

// A node holding a caller's live job stops being a member without ending
// its jobs (its cluster node closed, its runner left running: as near a
// crash as one process gets): the caller may submit on another node, and
// the lost node's job is not reused.
//
// No cap observer here: the gone node's job never "ends" for the observer,
// and the rule does not count it once its node has left.
func TestAdmission_GoneHolderNotCountedNotReused(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{Config: engine.Config{JobsPerCaller: 1, JobsTotal: 64}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	held := c.Submit(t, "alice-key", "https://example.com/c/hold")
	for _, n := range []*node{a, b} {
		if code, _ := n.Post("alice-key", "https://example.com/x"); code != http.StatusTooManyRequests {
			t.Fatalf("second job on %s while c holds one: %d", n.Name, code)
		}
	}
	_ = c.Node.Close() // leaves; its runner still holds the job
	for _, n := range []*node{a, b} {
		clustertest.WaitSees(t, n, 2)
	}
	code, id := postUntil(t, a, "alice-key", "https://example.com/c/hold")
	if code != http.StatusAccepted || id == held {
		t.Fatalf("resubmit of the gone node's job: %d %s (its job %s)", code, id, held)
	}
	if code, again := b.Post("alice-key", "https://example.com/c/hold"); code != http.StatusAccepted || again != id {
		t.Fatalf("resubmit on b: %d %s, want the new job %s", code, again, id)
	}
	if code, _ := b.Post("alice-key", "https://example.com/other"); code != http.StatusTooManyRequests {
		t.Fatalf("a second live job on b: %d, want 429", code)
	}
	// c's own runner may not admit anything: its node is gone.
	if _, _, err := c.Runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/y"}}); !errors.Is(err, engine.ErrNoAdmission) {
		t.Fatalf("submit on c's runner after its node closed: %v", err)
	}
}

// A node whose grains move away (it leaves gracefully, holding no jobs):
// every caller at its cap stays at its cap on every node left.
func TestAdmission_CapsHoldWhenGrainHostLeaves(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(callerKeys(12)), Config: engine.Config{JobsPerCaller: 1, JobsTotal: 64}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	for i := range 12 {
		[]*node{a, b}[i%2].Submit(t, fmt.Sprintf("key%d", i), "https://example.com/hold")
	}
	tc.Stop(c)
	tc.WaitMembers(2)
	for i := range 12 {
		for _, n := range []*node{a, b} {
			code, _ := postUntil503(t, n, fmt.Sprintf("key%d", i), fmt.Sprintf("https://example.com/second/%d", i))
			if code != http.StatusTooManyRequests {
				t.Fatalf("caller%d's second job on %s after c left: %d, want 429", i, n.Name, code)
			}
		}
	}
	w.check(t)
}

// Caller names that make odd grain identities: '/', unicode, '$', very
// long. Each is admitted, capped and reused across nodes, and apart from
// the others.
func TestAdmission_OddCallerNames(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	names := []string{"a/b", "a", "a/b/../c", "ünïcødé-名前", "$1", "%2F", strings.Repeat("L", 8000)}
	var keys strings.Builder
	for i, nm := range names {
		fmt.Fprintf(&keys, "%s k%d\n", nm, i)
	}
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(keys.String()), Config: engine.Config{JobsPerCaller: 1, JobsTotal: 64}}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	ids := map[string]string{}
	for i := range names {
		ids[names[i]] = []*node{a, b}[i%2].Submit(t, fmt.Sprintf("k%d", i), "https://example.com/n/hold")
	}
	for i, nm := range names {
		other := []*node{b, a}[i%2]
		if code, id := other.Post(fmt.Sprintf("k%d", i), "https://example.com/n/hold"); code != http.StatusAccepted || id != ids[nm] {
			t.Errorf("resubmit of %.20q on %s: %d %s, want %s", nm, other.Name, code, id, ids[nm])
		}
		if code, _ := other.Post(fmt.Sprintf("k%d", i), "https://example.com/n/second"); code != http.StatusTooManyRequests {
			t.Errorf("second job of %.20q on %s: %d, want 429", nm, other.Name, code)
		}
	}
	w.check(t)
}

// Admission called directly with garbage, and after its node closed:
// errors, never a panic; nothing left behind (TestMain's leak check).
func TestAdmission_GarbageAndClosedNeverPanic(t *testing.T) {
	t.Parallel()
	// A short Timeout: an id that is not UTF-8 cannot cross to a grain on
	// the other node (protobuf refuses to marshal it), and each attempt
	// waits it out; the test is about answers, not their time.
	tc := clustertest.Start(t, clustertest.Options{Timeout: 300 * time.Millisecond, Config: engine.Config{JobsPerCaller: 1}}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	ctx := context.Background()
	adm := a.Node.Admission()
	for _, id := range []string{"", "zz", "not-hex-at-all", strings.Repeat("f", 4096), "\x00\xff"} {
		reuse, err := adm.Admit(ctx, "garbage-caller", "k", "", id)
		t.Logf("Admit(id %.12q): %q %v", id, reuse, err)
		adm.Release("garbage-caller", id)
		adm.Ended("garbage-caller", id, "bogus-status")
		adm.Ended("nobody", id, "done")
	}
	// A body that is no hash of targets is never admitted (its grain
	// answers RETRY until the asking node gives up, or its ctx ends).
	for _, body := range []string{"not-a-hash", strings.Repeat("A", 64), strings.Repeat("f", 4096)} {
		bctx, cancel := context.WithTimeout(ctx, time.Second)
		reuse, err := adm.Admit(bctx, "body-caller", "k", body, fmt.Sprintf("%x", rand.Uint64()))
		cancel()
		if err == nil || reuse != "" {
			t.Errorf("Admit with body %.12q: %q %v, want no admission", body, reuse, err)
		}
	}
	// A cancelled context: an error or an answer, no panic.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = adm.Admit(cctx, "ctx-caller", "k", "", "x")
	adm.Release("ctx-caller", "x")
	// Before start and after close: ErrNoAdmission.
	fresh, err := cluster.New(cluster.Config{Name: "x", Node: "fresh", Addr: "127.0.0.1:0", TLS: clustertest.NodeTLS(t, "fresh"), Provider: cluster.ProtoactorProvider(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Admission().Admit(ctx, "alice", "k", "", "id"); !errors.Is(err, engine.ErrNoAdmission) {
		t.Fatalf("Admit before start: %v", err)
	}
	fresh.Admission().Release("alice", "id")
	fresh.Admission().Ended("alice", "id", "done")
	_ = fresh.Close()
	tc.Stop(b)
	if _, err := b.Node.Admission().Admit(ctx, "alice", "k", "", "id"); !errors.Is(err, engine.ErrNoAdmission) {
		t.Fatalf("Admit after close: %v", err)
	}
	b.Node.Admission().Release("alice", "id")
	b.Node.Admission().Ended("alice", "id", "done")
}

// A full node (JobsTotal) answers 429 and gives back the admission it asked
// for: the caller may submit on another node right after, 20 times over.
func TestAdmission_FullNodeReleasesAtOnce(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	w := watchCaps(t)
	alice := w.caller("alice")
	tc := clustertest.New(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 1, JobsTotal: 64}})
	a := tc.AddWith("a", clustertest.NodeOptions{JobsTotal: 1})
	b := tc.Add("b")
	tc.WaitMembers(2)
	a.Submit(t, "bob-key", "https://example.com/bob/hold") // a is full
	// A 503 (the admission's budget missed, under -race on a loaded
	// machine) is submitted again, as a client does: not the rule under
	// test.
	for i := range 20 {
		if code, _ := postUntil503(t, a, "alice-key", fmt.Sprintf("https://example.com/full/%d", i)); code != http.StatusTooManyRequests {
			t.Fatalf("alice on the full node a: %d, want 429", code)
		}
		code, id := postUntil503(t, b, "alice-key", fmt.Sprintf("https://example.com/elsewhere/%d/hold", i))
		if code != http.StatusAccepted {
			t.Fatalf("round %d: alice on b right after a's 429: %d", i, code)
		}
		if !b.Runner.Cancel(id) {
			t.Fatal("cancel")
		}
		// until the grain has heard of the cancel (not the rule under test)
		code, id = postUntil(t, b, "alice-key", fmt.Sprintf("https://example.com/probe/%d/hold", i))
		if code != http.StatusAccepted || !b.Runner.Cancel(id) {
			t.Fatalf("alice stays busy: %d", code)
		}
		// And until it has heard of the probe's cancel too (its end, like
		// every job's, reaches the grain on a goroutine of its own): an
		// admission taken, then released (Release tells the grain before
		// it returns), leaves alice's count at 0 for the next round.
		adm, check := b.Node.Admission(), fmt.Sprintf("%x%024d", cluster.Tag("b"), i)
		admitUntil(t, adm, alice, "check", check)
		adm.Release(alice, check)
	}
	w.check(t)
}

// When the grain cannot decide (a member cannot list the caller's jobs: its
// store is closed), the asking node answers 503 "admission unavailable"
// with Retry-After, and nothing is created.
func TestAdmission_Unavailable503(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{Config: engine.Config{JobsPerCaller: 2, JobsTotal: 64}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	_ = c.Store.Close() // c stays a member, but cannot answer a rebuild
	code, h, body := a.Do(t, "POST", "/v1/batch", "bob-key", `{"targets":[{"url":"https://example.com/u"}]}`)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), "admission unavailable") {
		t.Fatalf("submit while the grain cannot rebuild: %d %q %s", code, h.Get("Retry-After"), body)
	}
	for _, n := range []*node{a, b} {
		if jobs, _, err := n.Runner.List("bob", engine.ListOptions{}); err != nil || len(jobs) != 0 {
			t.Fatalf("bob's jobs on %s: %v %v", n.Name, jobs, err)
		}
	}
}

// TestAdmission_ConcurrentFirstSubmitsMakeOneJob: two first submits of the
// same targets on two nodes at once make one job: while a's job, admitted,
// is not yet created (a slow node holds it), b's submit is asked again
// (its attempts observed), not admitted; once a's job exists, b's submit
// returns it, and so does a resubmit on either node. Not parallel: it
// observes every admission's attempts.
func TestAdmission_ConcurrentFirstSubmitsMakeOneJob(t *testing.T) {
	w := watchCaps(t)
	tc := clustertest.New(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 4, JobsTotal: 64}})
	ga := &gatedAdmission{admitted: make(chan struct{}, 1), gate: make(chan struct{})}
	ga.armed.Store(true)
	a := tc.AddWith("a", clustertest.NodeOptions{Admission: func(adm engine.Admission) engine.Admission { ga.Admission = adm; return ga }})
	b := tc.Add("b")
	tc.WaitMembers(2)

	const url = "https://example.com/same/hold"
	type answer struct {
		code int
		id   string
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		code, id := a.Post("alice-key", url)
		first <- answer{code, id}
	}()
	testkit.Recv(t, ga.admitted) // a's first submit is admitted, its job not created
	attempts := make(chan struct{}, 64)
	cluster.SetAttemptObserver(func(time.Duration) {
		select {
		case attempts <- struct{}{}:
		default:
		}
	})
	t.Cleanup(func() { cluster.SetAttemptObserver(nil) })
	go func() {
		code, id := b.Post("alice-key", url)
		second <- answer{code, id}
	}()
	testkit.Recv(t, attempts)
	testkit.Recv(t, attempts) // b's submit was asked again: not admitted while a's job is not there
	close(ga.gate)
	fa, fb := testkit.Recv(t, first), testkit.Recv(t, second)
	if fa.code != http.StatusAccepted || fb.code != http.StatusAccepted || fa.id != fb.id {
		t.Fatalf("first submits at once: a %d %s, b %d %s; want one job, 202 on both", fa.code, fa.id, fb.code, fb.id)
	}
	for _, n := range []*node{a, b} {
		if code, id := n.Post("alice-key", url); code != http.StatusAccepted || id != fa.id {
			t.Fatalf("resubmit on %s: %d %s, want %s", n.Name, code, id, fa.id)
		}
	}
	w.check(t)
}

// submitIdem posts urls on n for key's caller with the Idempotency-Key
// header idem, and returns the answer's status, id and body. It never
// fails the test: a transport error is status 0.
func submitIdem(n *node, key, idem string, urls ...string) (code int, id string, body []byte) {
	code, id, _, body = submitIdemFull(n, key, idem, urls...)
	return code, id, body
}

// submitIdemUntil is submitIdem until the answer is neither 429 nor 503 (a
// grain that has not yet heard of an end, a topology change under way).
func submitIdemUntil(t *testing.T, n *node, key, idem string, urls ...string) (code int, id string, body []byte) {
	t.Helper()
	testkit.WaitFor(t, "a submit on "+n.Name+" neither 429 nor 503", func() bool {
		code, id, body = submitIdem(n, key, idem, urls...)
		return code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable
	})
	return code, id, body
}

// TestAdmission_IdempotencyKeyBoundAcrossNodes: an Idempotency-Key is
// bound to the body it came with on every node, by the caller's grain: the
// same key and targets on another node return the same job; other targets
// answer 422 (ErrIdempotencyMismatch) on every node, the job's own too,
// also once the grain rebuilt (it learns the job's body from the job's
// node); another caller's same key is its own; once the job failed or was
// cancelled, the key is free: it makes a new job, and is bound to that
// one's targets.
func TestAdmission_IdempotencyKeyBoundAcrossNodes(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	hold := testkit.NewGate()
	t.Cleanup(hold.Open)
	page := clustertest.Fetch(hold)
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/fail") {
			return engine.Result{}, errors.New("refused")
		}
		return page(ctx, c, tg)
	}
	// Workers enough for every held fetch: a cancelled job's fetch in
	// flight holds its worker until the test ends.
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Fetch: fetch,
		Config: engine.Config{JobsPerCaller: 8, JobsTotal: 64, Workers: 8}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	const x, y = "https://example.com/x/hold", "https://example.com/y/hold"

	code, job, body := submitIdem(a, "alice-key", "k-1", x)
	if code != http.StatusAccepted {
		t.Fatalf("first submit with key k-1 on a: %d %s", code, body)
	}
	mismatchEverywhere := func(when string) {
		t.Helper()
		for _, n := range []*node{b, c, a} {
			code, id, body := submitIdem(n, "alice-key", "k-1", y)
			if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), engine.ErrIdempotencyMismatch.Error()) {
				t.Fatalf("%s: key k-1 with other targets on %s: %d %s %s, want 422 naming the mismatch", when, n.Name, code, id, body)
			}
		}
	}
	sameEverywhere := func(when, want string, urls ...string) {
		t.Helper()
		for _, n := range []*node{c, b, a} {
			code, id, body := submitIdem(n, "alice-key", "k-1", urls...)
			if code != http.StatusAccepted || id != want || !strings.Contains(string(body), `"reused":true`) {
				t.Fatalf("%s: key k-1 with its targets on %s: %d %s, want 202 reused %s", when, n.Name, code, body, want)
			}
		}
	}
	sameEverywhere("bound", job, x)
	mismatchEverywhere("bound")
	// Its targets and one more: another body.
	if code, _, body := submitIdem(b, "alice-key", "k-1", x, y); code != http.StatusUnprocessableEntity {
		t.Fatalf("key k-1 with an extra target: %d %s, want 422", code, body)
	}
	// Another caller's k-1 is not alice's.
	if code, id, body := submitIdem(c, "bob-key", "k-1", y); code != http.StatusAccepted || id == job {
		t.Fatalf("bob's key k-1: %d %s (alice's job %s)", code, body, job)
	}

	// A new member: every grain rebuilds from the members, which know
	// alice's job by its key, not its body; the job's node tells it.
	d := tc.Add("d")
	tc.WaitMembers(4)
	clustertest.WaitSees(t, d, 4)
	for _, n := range []*node{d, b, c, a} {
		code, id, body := submitIdemUntil(t, n, "alice-key", "k-1", y)
		if code != http.StatusUnprocessableEntity {
			t.Fatalf("after a rebuild: key k-1 with other targets on %s: %d %s %s, want 422", n.Name, code, id, body)
		}
	}
	if code, id, body := submitIdemUntil(t, d, "alice-key", "k-1", x); code != http.StatusAccepted || id != job {
		t.Fatalf("after a rebuild: key k-1 with its targets on d: %d %s, want %s", code, body, job)
	}

	// Cancelled: the key is free, and bound to the new job's targets.
	if !a.Runner.Cancel(job) {
		t.Fatal("cancel")
	}
	code, fresh, body := submitIdemUntil(t, b, "alice-key", "k-1", y)
	if code != http.StatusAccepted || fresh == job || strings.Contains(string(body), `"reused":true`) {
		t.Fatalf("key k-1 after its job was cancelled, other targets on b: %d %s (the cancelled job %s)", code, body, job)
	}
	for _, n := range []*node{c, d, a} {
		if code, id, body := submitIdem(n, "alice-key", "k-1", x); code != http.StatusUnprocessableEntity {
			t.Fatalf("key k-1 bound again, the old targets on %s: %d %s %s, want 422", n.Name, code, id, body)
		}
		if code, id, _ := submitIdem(n, "alice-key", "k-1", y); code != http.StatusAccepted || id != fresh {
			t.Fatalf("key k-1 bound again, its targets on %s: %d %s, want %s", n.Name, code, id, fresh)
		}
	}

	// Failed: the key is free too.
	code, failed, body := submitIdem(c, "alice-key", "k-2", "https://example.com/fail")
	if code != http.StatusAccepted {
		t.Fatalf("submit with key k-2: %d %s", code, body)
	}
	c.WaitDone(t, failed)
	if j, _ := c.Runner.Job(failed); j.Status != engine.StatusFailed {
		t.Fatalf("job %s: %s, want failed", failed, j.Status)
	}
	for _, n := range []*node{a, d} {
		code, id, body := submitIdemUntil(t, n, "alice-key", "k-2", x)
		if code != http.StatusAccepted || id == failed {
			t.Fatalf("key k-2 after its job failed, other targets on %s: %d %s (the failed job %s)", n.Name, code, body, failed)
		}
		if !n.Runner.Cancel(id) { // frees k-2 for the next node's turn
			t.Fatalf("cancel %s on %s", id, n.Name)
		}
	}
	w.check(t)
}

// TestAdmission_IdempotencyKeyBoundWhileJobIsCreated: a key is bound from
// its admission, before its job exists: while a slow node holds its
// admission for key k-1 (its job not created yet), the same key with
// other targets on another node is held (asked again) and, once the job
// exists, answers 422; never a second job of the key. The same key and
// targets on that node then return the job.
func TestAdmission_IdempotencyKeyBoundWhileJobIsCreated(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.New(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 4, JobsTotal: 64}})
	ga := &gatedAdmission{admitted: make(chan struct{}, 1), gate: make(chan struct{})}
	ga.armed.Store(true)
	a := tc.AddWith("a", clustertest.NodeOptions{Admission: func(adm engine.Admission) engine.Admission { ga.Admission = adm; return ga }})
	b := tc.Add("b")
	tc.WaitMembers(2)

	const x, y = "https://example.com/x/hold", "https://example.com/y/hold"
	type answer struct {
		code int
		id   string
		body []byte
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		code, id, body := submitIdem(a, "alice-key", "k-1", x)
		first <- answer{code, id, body}
	}()
	testkit.Recv(t, ga.admitted) // a's submit is admitted; its job is not created
	w.mu.Lock()
	asked := w.admissions
	w.mu.Unlock()
	go func() {
		code, id, body := submitIdem(b, "alice-key", "k-1", y)
		second <- answer{code, id, body}
	}()
	testkit.WaitFor(t, "b's submit asked again by the grain", func() bool {
		select {
		case s := <-second:
			close(ga.gate)
			t.Fatalf("key k-1 with other targets while its job is created: %d %s %s, want it held until the job exists", s.code, s.id, s.body)
		default:
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.retries > 0
	})
	close(ga.gate)
	fa := testkit.Recv(t, first)
	if fa.code != http.StatusAccepted {
		t.Fatalf("the first submit on a: %d %s", fa.code, fa.body)
	}
	if s := testkit.Recv(t, second); s.code != http.StatusUnprocessableEntity {
		t.Fatalf("key k-1 with other targets once its job exists: %d %s %s, want 422", s.code, s.id, s.body)
	}
	w.mu.Lock()
	if w.admissions != asked {
		t.Errorf("the held submit was admitted: %d admissions, want %d", w.admissions, asked)
	}
	w.mu.Unlock()
	code, id, body := submitIdemUntil(t, b, "alice-key", "k-1", x)
	if code != http.StatusAccepted || id != fa.id {
		t.Fatalf("key k-1 with its targets on b: %d %s, want %s", code, body, fa.id)
	}
	w.check(t)
}

// TestAdmission_IdempotencyKeyCrowdMakesOneJob: 12 first submits of one
// Idempotency-Key at once over 3 nodes, half with one body, half with
// another, make one job: the submits of its body answer it (202), the
// others 422; none answers another job.
func TestAdmission_IdempotencyKeyCrowdMakesOneJob(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Config: engine.Config{JobsPerCaller: 8, JobsTotal: 64}}, "a", "b", "c")
	nodes := tc.Nodes()
	urls := [2]string{"https://example.com/crowd/x/hold", "https://example.com/crowd/y/hold"}
	type answer struct {
		body int // which of urls
		code int
		id   string
		text []byte
	}
	answers := make(chan answer, 12)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			<-start
			code, id, text := submitIdem(nodes[i%3], "alice-key", "k-crowd", urls[i%2])
			answers <- answer{i % 2, code, id, text}
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	ids := map[string]bool{}
	accepted := map[int]int{} // body → 202s
	for a := range answers {
		switch a.code {
		case http.StatusAccepted:
			ids[a.id] = true
			accepted[a.body]++
		case http.StatusUnprocessableEntity, http.StatusServiceUnavailable:
		default:
			t.Errorf("a submit of body %d: %d %s", a.body, a.code, a.text)
		}
	}
	if len(ids) != 1 || len(accepted) != 1 {
		t.Fatalf("12 submits of one key made jobs %v, accepted by body %v: want one job, of one body", ids, accepted)
	}
	t.Logf("one job, 202 to %v submits of its body", accepted)
	jobs := 0
	for _, n := range nodes {
		list, _, err := n.Runner.List(w.caller("alice"), engine.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jobs += len(list)
	}
	if jobs != 1 {
		t.Fatalf("alice has %d jobs on the nodes, want 1", jobs)
	}
	w.check(t)
}

// TestAdmission_HangingGrainMemberBounded: a member that hangs with its
// ports open (it accepts connections and never answers) and owns the
// caller's grain costs a submit at most cluster.AdmitBudget in all, not
// every attempt's whole Timeout (8 attempts of 3 s here: 24 s), then 503
// "admission unavailable", nothing created. Not parallel: it observes
// every admission's attempts.
func TestAdmission_HangingGrainMemberBounded(t *testing.T) {
	testkit.Long(t)
	_, a, caller := hangingGrainCluster(t)
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	cluster.SetAttemptObserver(func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() })
	t.Cleanup(func() { cluster.SetAttemptObserver(nil) })
	code, h, body := a.Do(t, "POST", "/v1/batch", caller+"-key", `{"targets":[{"url":"https://example.com/u"}]}`)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), "admission unavailable") {
		t.Fatalf("submit whose grain hangs: %d %q %s", code, h.Get("Retry-After"), body)
	}
	mu.Lock()
	defer mu.Unlock()
	var total time.Duration
	for _, d := range waits {
		total += d
	}
	if len(waits) < 2 || total > cluster.AdmitBudget {
		t.Fatalf("the admission's attempts waited %v (%d attempts, %v in all); want 2 or more, at most %v in all", waits, len(waits), total, cluster.AdmitBudget)
	}
	if jobs, _, err := a.Runner.List(caller, engine.ListOptions{}); err != nil || len(jobs) != 0 {
		t.Fatalf("%s's jobs: %v %v", caller, jobs, err)
	}
}

// hangingMember listens on loopback, accepts connections and never reads
// nor answers them: a member that hangs with its ports open. It stops at
// the test's end.
func hangingMember(t *testing.T) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		held []net.Conn
	)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-accepted
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().(*net.TCPAddr)
}

// hangingGrainCluster starts node a (timeout 3 s) in a cluster whose other
// member hangs with its ports open, and returns a caller (of the keys
// "NAME NAME-key") whose grain the hanging member owns.
func hangingGrainCluster(t *testing.T) (*clustertest.Cluster, *node, string) {
	t.Helper()
	hang := hangingMember(t)
	var keys strings.Builder
	for i := range 32 {
		fmt.Fprintf(&keys, "hang%d hang%d-key\n", i, i)
	}
	tc := clustertest.Start(t, clustertest.Options{Keys: keys.String(), Timeout: 3 * time.Second}, "a")
	a := tc.Node("a")
	tc.Agent.RegisterService(test.NewAgentServiceStatus("hanging", hang.IP.String(), hang.Port, []string{"siftbatch-caller"}))
	clustertest.WaitSees(t, a, 2)
	sys := cluster.SystemOf(a.Node)
	host, port, _ := sys.GetHostPort()
	rdv := pacluster.NewRendezvous()
	rdv.UpdateMembers([]*pacluster.Member{
		{Id: sys.ID, Host: host, Port: int32(port), Kinds: []string{"siftbatch-caller"}},
		{Id: "hanging", Host: hang.IP.String(), Port: int32(hang.Port), Kinds: []string{"siftbatch-caller"}},
	})
	for i := range 32 {
		name := fmt.Sprintf("hang%d", i)
		if rdv.GetByClusterIdentity(&pacluster.ClusterIdentity{Identity: name, Kind: "siftbatch-caller"}) == hang.String() {
			return tc, a, name
		}
	}
	t.Fatal("no caller's grain on the hanging member")
	return nil, nil, ""
}

// TestAdmission_IdempotencyKeyFreeAfterTTLAcrossNodes: a key bound to a
// done job is free once that job is past its TTL, on every node: the same
// key with other targets on another node makes a fresh job (not 422), which
// the key is then bound to everywhere; a crowd of two callers sending
// that key at once over three nodes gets one job each, never the other's.
func TestAdmission_IdempotencyKeyFreeAfterTTLAcrossNodes(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	clock := testkit.NewClock()
	clock.Set(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys),
		Config: engine.Config{Now: clock.Now, TTL: time.Hour, JobsPerCaller: 8, JobsTotal: 64}}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	const x, y = "https://example.com/ttl/x", "https://example.com/ttl/y"

	code, old, body := submitIdem(a, "alice-key", "k-ttl", x)
	if code != http.StatusAccepted {
		t.Fatalf("first submit: %d %s", code, body)
	}
	a.WaitDone(t, old)
	if code, _, body := submitIdem(b, "alice-key", "k-ttl", y); code != http.StatusUnprocessableEntity {
		t.Fatalf("bound, other targets on b: %d %s, want 422", code, body)
	}
	clock.Advance(2 * time.Hour)
	code, fresh, body := submitIdemUntil(t, b, "alice-key", "k-ttl", y)
	if code != http.StatusAccepted || fresh == old || strings.Contains(string(body), `"reused":true`) {
		t.Fatalf("past the TTL, other targets on b: %d %s (the old job %s); want a fresh job", code, body, old)
	}
	for _, n := range []*node{c, a} {
		if code, id, body := submitIdemUntil(t, n, "alice-key", "k-ttl", y); code != http.StatusAccepted || id != fresh {
			t.Fatalf("the key's new targets on %s: %d %s, want %s", n.Name, code, body, fresh)
		}
		if code, _, body := submitIdemUntil(t, n, "alice-key", "k-ttl", x); code != http.StatusUnprocessableEntity {
			t.Fatalf("the key's old targets on %s: %d %s, want 422", n.Name, code, body)
		}
	}

	// Two callers, one key, at once over three nodes.
	nodes := tc.Nodes()
	keys := [2]string{"alice-key", "bob-key"}
	type answer struct {
		caller, code int
		id           string
		body         []byte
	}
	answers := make(chan answer, 12)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			<-start
			code, id, body := submitIdem(nodes[i%3], keys[i%2], "k-crowd-2", "https://example.com/crowd2/"+strconv.Itoa(i%2))
			answers <- answer{i % 2, code, id, body}
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	ids := [2]map[string]bool{{}, {}}
	for an := range answers {
		switch an.code {
		case http.StatusAccepted:
			ids[an.caller][an.id] = true
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		default:
			t.Errorf("caller %d: %d %s", an.caller, an.code, an.body)
		}
	}
	if len(ids[0]) != 1 || len(ids[1]) != 1 {
		t.Fatalf("jobs by caller %v: want one each", ids)
	}
	for id := range ids[0] {
		if ids[1][id] {
			t.Fatalf("both callers answered job %s", id)
		}
	}
	w.check(t)
}

// silences are the gates that hold the reuse checks of the callers of a
// watch (by its prefix) until they open; silencing installs the package's
// reuse-check hook, once: it stays for the process.
var (
	silences  sync.Map
	silencing sync.Once
)

// silence holds every reuse check a node answers for w's callers (the
// node that holds a job playing dead, as a restarting one does) until the
// returned gate opens; it opens when the test ends, too.
func silence(t *testing.T, w *capWatch) *testkit.Gate {
	silencing.Do(func() {
		cluster.SetReusableAnswering(func(caller string) {
			if p, _, ok := strings.Cut(caller, "-"); ok {
				if g, ok := silences.Load(p + "-"); ok {
					_ = g.(*testkit.Gate).Wait(context.Background())
				}
			}
		})
	})
	g := testkit.NewGate()
	silences.Store(w.prefix, g)
	t.Cleanup(func() { silences.Delete(w.prefix); g.Open() })
	return g
}

// TestAdmission_IdempotencyKeyNeverTwoJobsWhenItsNodeIsSilent: a resubmit
// of an Idempotency-Key whose job's node does not answer the grain's reuse
// check in time (a node restarting) creates no second job: it answers 503
// with Retry-After, naming that cause, or (the grain on the job's own node)
// the job; once the node answers, the resubmit returns the job on every
// node.
func TestAdmission_IdempotencyKeyNeverTwoJobsWhenItsNodeIsSilent(t *testing.T) {
	t.Parallel()
	w := watchCaps(t)
	tc := clustertest.Start(t, clustertest.Options{Keys: w.keys(clustertest.Keys), Fetch: clustertest.Fetch(nil),
		Config: engine.Config{JobsPerCaller: 8, JobsTotal: 64, Workers: 8}}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	const x = "https://example.com/x"

	// One done job on each node: the caller's grain lives on one of them,
	// and checks the other's job by asking its node. (A live job is never
	// admitted twice: the grain counts it.)
	jobs := map[string]string{}
	for key, n := range map[string]*node{"k-a": a, "k-b": b} {
		code, id, body := submitIdemUntil(t, n, "alice-key", key, x)
		if code != http.StatusAccepted || id == "" {
			t.Fatalf("first submit with key %s on %s: %d %s", key, n.Name, code, body)
		}
		n.WaitDone(t, id)
		jobs[key] = id
	}
	testkit.WaitFor(t, "the grain has heard both jobs ended", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.live[w.caller("alice")]) == 0
	})

	quiet := silence(t, w)
	for key, n := range map[string]*node{"k-a": b, "k-b": a} { // each on the other node
		code, id, retryAfter, body := submitIdemFull(n, "alice-key", key, x)
		switch {
		case code == http.StatusAccepted && id == jobs[key]:
			// the grain is on the job's node: it needed no answer
		case code == http.StatusServiceUnavailable:
			if retryAfter == "" || !strings.Contains(string(body), "did not answer whether it may be reused") {
				t.Errorf("resubmit of %s on %s while its job's node is silent: 503 Retry-After %q %s, want Retry-After and the cause", key, n.Name, retryAfter, body)
			}
		default:
			t.Errorf("resubmit of %s on %s while its job's node is silent: %d %s %s, want 503 or the job %s, never a second job", key, n.Name, code, id, body, jobs[key])
		}
	}
	w.mu.Lock()
	unanswered := w.unanswered
	w.mu.Unlock()
	if unanswered == 0 {
		t.Fatal("no reuse check went unanswered: the test does not test what it says")
	}

	quiet.Open()
	for _, n := range []*node{a, b} {
		for key, want := range jobs {
			if code, id, body := submitIdemUntil(t, n, "alice-key", key, x); code != http.StatusAccepted || id != want {
				t.Fatalf("resubmit of %s on %s once its node answers: %d %s, want the job %s", key, n.Name, code, body, want)
			}
		}
	}
	w.check(t)
}

// submitIdemFull is submitIdem, with the answer's Retry-After.
func submitIdemFull(n *node, key, idem string, urls ...string) (code int, id, retryAfter string, body []byte) {
	ts := make([]string, len(urls))
	for i, u := range urls {
		ts[i] = fmt.Sprintf(`{"url":%q}`, u)
	}
	req, err := http.NewRequest("POST", n.Srv.URL+"/v1/batch", strings.NewReader(`{"targets":[`+strings.Join(ts, ",")+`]}`))
	if err != nil {
		return 0, "", "", nil
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", idem)
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		return 0, "", "", nil
	}
	defer res.Body.Close()
	body, _ = io.ReadAll(res.Body)
	var out struct{ ID string }
	_ = json.Unmarshal(body, &out)
	return res.StatusCode, out.ID, res.Header.Get("Retry-After"), body
}
