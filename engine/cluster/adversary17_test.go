package cluster_test

// Adversarial checks of issue 17 (callers as virtual actors): rules that
// hold. The ones that do not are in adversary17_failing_test.go.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
)

// liveOf counts caller's live jobs on every node's runner that is not
// closed (a node whose cluster node was closed but whose runner runs is
// skipped only if skip says so).
func liveOf(tc *testCluster, caller string, skip ...*node) int {
	n := 0
outer:
	for _, nd := range tc.nodes {
		if nd.closed {
			continue
		}
		for _, s := range skip {
			if s == nd {
				continue outer
			}
		}
		for _, j := range nd.runner.Live() {
			if j.Caller == caller {
				n++
			}
		}
	}
	return n
}

// sampleLive counts caller's live jobs on every node until stop is closed,
// and returns the most it saw.
func sampleLive(tc *testCluster, caller string, stop <-chan struct{}) <-chan int {
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

// postUntil posts until the answer is not 429/503 or the deadline, as a
// client retrying would; it returns the last code and id.
func postUntil(t *testing.T, n *node, key string, urls ...string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, id := post(t, n, key, urls...)
		if (code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			return code, id
		}
		<-time.After(20 * time.Millisecond) // a client retrying after 429
	}
}

// 30 goroutines, 10 on each of 3 nodes, submit different work for the same
// caller at once, with JobsPerCaller 1 then 2: the live jobs across every
// runner never exceed the cap, at any moment sampled and at every admission.
func TestAdv17_ConcurrentSameCallerNeverOverCap(t *testing.T) {
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("cap", limit), func(t *testing.T) {
			w := watchCaps(t)
			tc := newTestCluster(t)
			tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = limit, 64
			a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
			tc.waitMembers(3)
			nodes := []*node{a, b, c}
			stop := make(chan struct{})
			most := sampleLive(tc, "alice", stop)
			start := make(chan struct{})
			var wg sync.WaitGroup
			var accepted atomic.Int32
			codes := make(chan int, 30)
			for i := range 30 {
				wg.Go(func() {
					<-start
					code, _ := post(t, nodes[i%3], "alice-key", fmt.Sprintf("https://example.com/%d/hold", i))
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
			if n := liveOf(tc, "alice"); n != int(accepted.Load()) {
				t.Fatalf("%d live jobs, %d accepted", n, accepted.Load())
			}
			w.check(t)
		})
	}
}

// The same targets submitted at once on every node, 5 times each: the
// concurrent first submits may race, but never past the cap; once one has
// been answered, every resubmit on any node returns one and the same job.
func TestAdv17_ConcurrentIdempotentFirstSubmits(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 3, 64
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	nodes := []*node{a, b, c}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	for i := range 15 {
		wg.Go(func() {
			<-start
			code, id := post(t, nodes[i%3], "alice-key", "https://example.com/same/hold")
			mu.Lock()
			defer mu.Unlock()
			if code == http.StatusAccepted {
				ids[id]++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(ids) == 0 || len(ids) > 3 {
		t.Fatalf("jobs created by 15 concurrent identical first submits: %v (cap 3)", ids)
	}
	t.Logf("15 concurrent identical first submits created %d job(s): %v", len(ids), ids)
	if n := liveOf(tc, "alice"); n > 3 {
		t.Fatalf("%d live jobs, cap 3", n)
	}
	// Sequential resubmits now: the same job on every node.
	var first string
	for round := range 2 {
		for _, n := range nodes {
			code, id := post(t, n, "alice-key", "https://example.com/same/hold")
			if code != http.StatusAccepted || ids[id] == 0 {
				t.Fatalf("resubmit %d on %s: %d %s, not one of %v", round, n.name, code, id, ids)
			}
			if first == "" {
				first = id
			} else if id != first {
				t.Fatalf("resubmit on %s returned %s, an earlier one %s", n.name, id, first)
			}
		}
	}
	w.check(t)
}

// Done jobs are reused on any node; failed and cancelled ones never; one
// past its TTL (a fake clock) is not.
func TestAdv17_ReuseByOutcomeAndTTL(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	tc.cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	tc.cfg.TTL = time.Hour
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 2, 64
	hold := tc.fetch
	tc.fetch = func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/fail") {
			return engine.Result{}, errors.New("refused")
		}
		return hold(ctx, c, tg)
	}
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)

	// done → reused everywhere
	done := submit(t, a, "alice-key", "https://example.com/done")
	waitDone(t, a, done)
	for _, n := range []*node{b, c, a} {
		if code, id := post(t, n, "alice-key", "https://example.com/done"); code != http.StatusAccepted || id != done {
			t.Fatalf("resubmit of a done job on %s: %d %s, want %s", n.name, code, id, done)
		}
	}
	// failed → never reused
	failed := submit(t, b, "alice-key", "https://example.com/fail")
	waitDone(t, b, failed)
	if j, _ := b.runner.Job(failed); j.Status != engine.StatusFailed {
		t.Fatalf("job %s: %s, want failed", failed, j.Status)
	}
	for _, n := range []*node{c, a, b} {
		code, id := postUntil(t, n, "alice-key", "https://example.com/fail")
		if code != http.StatusAccepted || id == failed {
			t.Fatalf("resubmit of a failed job on %s: %d %s (the failed job %s)", n.name, code, id, failed)
		}
		waitDone(t, n, id)
	}
	// cancelled → never reused, even right after the cancel
	cancelled := submit(t, c, "alice-key", "https://example.com/c/hold")
	if !c.runner.Cancel(cancelled) {
		t.Fatal("cancel")
	}
	for _, n := range []*node{a, b} {
		code, id := postUntil(t, n, "alice-key", "https://example.com/c/hold")
		if code != http.StatusAccepted || id == cancelled {
			t.Fatalf("resubmit of a cancelled job on %s: %d %s (the cancelled job %s)", n.name, code, id, cancelled)
		}
		if !n.runner.Cancel(id) {
			t.Fatal("cancel")
		}
	}
	// past the TTL → not reused
	clock.Add(int64(2 * time.Hour))
	// (c's worker may still hold the cancelled job's fetch: the new job may
	// stay queued, which is reusable too.)
	code, id := postUntil(t, c, "alice-key", "https://example.com/done")
	if code != http.StatusAccepted || id == done {
		t.Fatalf("resubmit of a job past its TTL: %d %s (the old job %s)", code, id, done)
	}
	// and the new one is reused in its stead
	if code, again := post(t, a, "alice-key", "https://example.com/done"); code != http.StatusAccepted || again != id {
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
func TestAdv17_HolderGoneNotCountedNotReused(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 1, 64
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	held := submit(t, c, "alice-key", "https://example.com/c/hold")
	for _, n := range []*node{a, b} {
		if code, _ := post(t, n, "alice-key", "https://example.com/x"); code != http.StatusTooManyRequests {
			t.Fatalf("second job on %s while c holds one: %d", n.name, code)
		}
	}
	_ = c.node.Close() // leaves; its runner still holds the job
	for _, n := range []*node{a, b} {
		for {
			changed := n.node.Changed()
			if len(n.node.Members()) == 2 {
				break
			}
			select {
			case <-changed:
			case <-time.After(20 * time.Second):
				t.Fatal("c did not leave")
			}
		}
	}
	code, id := postUntil(t, a, "alice-key", "https://example.com/c/hold")
	if code != http.StatusAccepted || id == held {
		t.Fatalf("resubmit of the gone node's job: %d %s (its job %s)", code, id, held)
	}
	if code, again := post(t, b, "alice-key", "https://example.com/c/hold"); code != http.StatusAccepted || again != id {
		t.Fatalf("resubmit on b: %d %s, want the new job %s", code, again, id)
	}
	if code, _ := post(t, b, "alice-key", "https://example.com/other"); code != http.StatusTooManyRequests {
		t.Fatalf("a second live job on b: %d, want 429", code)
	}
	// c's own runner may not admit anything: its node is gone.
	if _, _, err := c.runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/y"}}); !errors.Is(err, engine.ErrNoAdmission) {
		t.Fatalf("submit on c's runner after its node closed: %v", err)
	}
}

// A node whose grains move away (it leaves gracefully, holding no jobs):
// every caller at its cap stays at its cap on every node left.
func TestAdv17_GrainHostLeavesCapsHold(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 1, 64
	var keys strings.Builder
	for i := range 12 {
		fmt.Fprintf(&keys, "caller%d key%d\n", i, i)
	}
	tc.keys = keys.String()
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	for i := range 12 {
		submit(t, []*node{a, b}[i%2], fmt.Sprintf("key%d", i), "https://example.com/hold")
	}
	tc.stop(c)
	tc.waitMembers(2)
	for i := range 12 {
		for _, n := range []*node{a, b} {
			code, _ := postUntil503(t, n, fmt.Sprintf("key%d", i), fmt.Sprintf("https://example.com/second/%d", i))
			if code != http.StatusTooManyRequests {
				t.Fatalf("caller%d's second job on %s after c left: %d, want 429", i, n.name, code)
			}
		}
	}
	w.check(t)
}

// postUntil503 posts again while the answer is 503 (a topology change under
// way), as a client would after Retry-After.
func postUntil503(t *testing.T, n *node, key string, urls ...string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, id := post(t, n, key, urls...)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code, id
		}
		<-time.After(50 * time.Millisecond)
	}
}

// Caller names that make odd grain identities: '/', unicode, '$', very
// long. Each is admitted, capped and reused across nodes, and apart from
// the others.
func TestAdv17_HostileCallerNames(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 1, 64
	names := []string{"a/b", "a", "a/b/../c", "ünïcødé-名前", "$1", "%2F", strings.Repeat("L", 8000)}
	var keys strings.Builder
	for i, nm := range names {
		fmt.Fprintf(&keys, "%s k%d\n", nm, i)
	}
	tc.keys = keys.String()
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	ids := map[string]string{}
	for i := range names {
		ids[names[i]] = submit(t, []*node{a, b}[i%2], fmt.Sprintf("k%d", i), "https://example.com/n/hold")
	}
	for i, nm := range names {
		other := []*node{b, a}[i%2]
		if code, id := post(t, other, fmt.Sprintf("k%d", i), "https://example.com/n/hold"); code != http.StatusAccepted || id != ids[nm] {
			t.Errorf("resubmit of %.20q on %s: %d %s, want %s", nm, other.name, code, id, ids[nm])
		}
		if code, _ := post(t, other, fmt.Sprintf("k%d", i), "https://example.com/n/second"); code != http.StatusTooManyRequests {
			t.Errorf("second job of %.20q on %s: %d, want 429", nm, other.name, code)
		}
	}
	w.check(t)
}

// Admission called directly with garbage, and after its node closed:
// errors, never a panic; nothing left behind (TestMain's leak check).
func TestAdv17_AdmissionGarbageAndClosed(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller = 1
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	ctx := context.Background()
	adm := a.node.Admission()
	for _, id := range []string{"", "zz", "not-hex-at-all", strings.Repeat("f", 4096), "\x00\xff"} {
		reuse, err := adm.Admit(ctx, "garbage-caller", "k", id)
		t.Logf("Admit(id %.12q): %q %v", id, reuse, err)
		adm.Release("garbage-caller", id)
		adm.Ended("garbage-caller", id, "bogus-status")
		adm.Ended("nobody", id, "done")
	}
	// A cancelled context: an error or an answer, no panic.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = adm.Admit(cctx, "ctx-caller", "k", "x")
	adm.Release("ctx-caller", "x")
	// Before start and after close: ErrNoAdmission.
	fresh, err := cluster.New(cluster.Config{Name: "x", Node: "fresh", Addr: "127.0.0.1:0", TLS: nodeTLS(t, "fresh"), Provider: cluster.ProtoactorProvider(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Admission().Admit(ctx, "alice", "k", "id"); !errors.Is(err, engine.ErrNoAdmission) {
		t.Fatalf("Admit before start: %v", err)
	}
	fresh.Admission().Release("alice", "id")
	fresh.Admission().Ended("alice", "id", "done")
	_ = fresh.Close()
	tc.stop(b)
	if _, err := b.node.Admission().Admit(ctx, "alice", "k", "id"); !errors.Is(err, engine.ErrNoAdmission) {
		t.Fatalf("Admit after close: %v", err)
	}
	b.node.Admission().Release("alice", "id")
	b.node.Admission().Ended("alice", "id", "done")
}

// A full node (JobsTotal) answers 429 and gives back the admission it asked
// for: the caller may submit on another node right after, 20 times over.
func TestAdv17_FullNodeReleasesAtOnce(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 1, 1
	a := tc.add("a")
	tc.cfg.JobsTotal = 64
	b := tc.add("b")
	tc.waitMembers(2)
	submit(t, a, "bob-key", "https://example.com/bob/hold") // a is full
	for i := range 20 {
		if code, _ := post(t, a, "alice-key", fmt.Sprintf("https://example.com/full/%d", i)); code != http.StatusTooManyRequests {
			t.Fatalf("alice on the full node a: %d, want 429", code)
		}
		code, id := post(t, b, "alice-key", fmt.Sprintf("https://example.com/elsewhere/%d/hold", i))
		if code != http.StatusAccepted {
			t.Fatalf("round %d: alice on b right after a's 429: %d", i, code)
		}
		if !b.runner.Cancel(id) {
			t.Fatal("cancel")
		}
		// until the grain has heard of the cancel (not the rule under test)
		code, id = postUntil(t, b, "alice-key", fmt.Sprintf("https://example.com/probe/%d/hold", i))
		if code != http.StatusAccepted || !b.runner.Cancel(id) {
			t.Fatalf("alice stays busy: %d", code)
		}
		// And until it has heard of the probe's cancel too (its end, like
		// every job's, reaches the grain on a goroutine of its own): an
		// admission taken, then released (Release tells the grain before
		// it returns), leaves alice's count at 0 for the next round.
		adm, check := b.node.Admission(), fmt.Sprintf("%x%024d", cluster.Tag("b"), i)
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, err := adm.Admit(context.Background(), "alice", "check", check)
			if err == nil {
				break
			}
			if !errors.Is(err, engine.ErrCallerBusy) || time.Now().After(deadline) {
				t.Fatalf("alice's probe never ends at her grain: %v", err)
			}
			<-time.After(20 * time.Millisecond) // asking again, as a client would after a 429
		}
		adm.Release("alice", check)
	}
	w.check(t)
}

// When the grain cannot decide (a member cannot list the caller's jobs: its
// store is closed), the asking node answers 503 "admission unavailable"
// with Retry-After, and nothing is created.
func TestAdv17_AdmissionUnavailable503(t *testing.T) {
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 2, 64
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)
	_ = c.store.Close() // c stays a member, but cannot answer a rebuild
	code, h, body := do(t, a, "POST", "/v1/batch", "bob-key", `{"targets":[{"url":"https://example.com/u"}]}`)
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), "admission unavailable") {
		t.Fatalf("submit while the grain cannot rebuild: %d %q %s", code, h.Get("Retry-After"), body)
	}
	for _, n := range []*node{a, b} {
		if jobs, _, err := n.runner.List("bob", engine.ListOptions{}); err != nil || len(jobs) != 0 {
			t.Fatalf("bob's jobs on %s: %v %v", n.name, jobs, err)
		}
	}
}
