package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
)

// capWatch is the test-only observer of every admission and every end,
// with caller and job id: it checks at each admission that the caller's
// admitted jobs not yet ended are within the cap.
type capWatch struct {
	mu         sync.Mutex
	live       map[string]map[string]bool // caller → ids admitted, not ended
	admissions int
	violations []string
}

func watchCaps(t *testing.T) *capWatch {
	w := &capWatch{live: map[string]map[string]bool{}}
	cluster.SetObserver(func(event, caller, id string, limit int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch event {
		case "admit":
			if w.live[caller] == nil {
				w.live[caller] = map[string]bool{}
			}
			w.live[caller][id] = true
			w.admissions++
			if n := len(w.live[caller]); n > limit {
				w.violations = append(w.violations, fmt.Sprintf("%s: %d live jobs admitted, cap %d", caller, n, limit))
			}
		case "end":
			delete(w.live[caller], id)
		}
	})
	t.Cleanup(func() { cluster.SetObserver(nil) })
	return w
}

func (w *capWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Fatalf("cap exceeded %d times, first: %s", len(w.violations), w.violations[0])
	}
}

// post submits urls on n for key's caller and returns the status code and id.
func post(t testing.TB, n *node, key string, urls ...string) (int, string) {
	t.Helper()
	var ts []string
	for _, u := range urls {
		ts = append(ts, fmt.Sprintf(`{"url":%q}`, u))
	}
	req, err := http.NewRequest("POST", n.srv.URL+"/v1/batch", strings.NewReader(`{"targets":[`+strings.Join(ts, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := n.srv.Client().Do(req)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	var out struct {
		ID     string
		Reused bool
	}
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out.ID
}

func TestAdmission_CapAcrossNodes(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller = 1
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)

	held := submit(t, a, "alice-key", "https://example.com/hold")
	for _, n := range []*node{a, b, c} {
		if code, _ := post(t, n, "alice-key", "https://example.com/other-"+n.name); code != http.StatusTooManyRequests {
			t.Fatalf("a second live job of alice on %s: %d, want 429", n.name, code)
		}
	}
	// bob is not held up by alice.
	if code, _ := post(t, b, "bob-key", "https://example.com/bob"); code != http.StatusAccepted {
		t.Fatalf("bob on b: %d", code)
	}
	// Once alice's job ends, she may submit on another node. Her grain
	// hears the end a moment after the job's node: ask until admitted.
	if !a.runner.Cancel(held) {
		t.Fatal("cancel")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := post(t, c, "alice-key", "https://example.com/after")
		if code == http.StatusAccepted {
			break
		}
		if code != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("alice on c after her job ended: %d", code)
		}
		<-time.After(20 * time.Millisecond) // retrying a submit, as a client would after a 429
	}
	w.check(t)
}

func TestAdmission_ResubmitReusesOnAnyNode(t *testing.T) {
	watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller = 2
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)

	id := submit(t, a, "alice-key", "https://example.com/same")
	waitDone(t, a, id)
	for _, n := range []*node{b, c, a} {
		code, got := post(t, n, "alice-key", "https://example.com/same")
		if code != http.StatusAccepted || got != id {
			t.Fatalf("resubmit on %s: %d %s, want 202 %s", n.name, code, got, id)
		}
	}
	// A job whose node is not a member is not reused: a new job starts.
	onC := submit(t, c, "alice-key", "https://example.com/on-c")
	waitDone(t, c, onC)
	tc.stop(c)
	tc.waitMembers(2)
	code, got := post(t, b, "alice-key", "https://example.com/on-c")
	if code != http.StatusAccepted || got == onC || got == "" {
		t.Fatalf("resubmit of a job of a node that left: %d %s (its job %s)", code, got, onC)
	}
}

func TestAdmission_RetriedAdmitCountsOnce(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller = 2
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)

	ctx := context.Background()
	adm := a.node.Admission()
	tag := fmt.Sprintf("%x", cluster.Tag("a"))
	id1, id2, id3 := tag+"000000000000000000000001", tag+"000000000000000000000002", tag+"000000000000000000000003"
	for range 3 { // protoactor retries a request: the same admission, asked again
		if reuse, err := adm.Admit(ctx, "carol", "k1", id1); err != nil || reuse != "" {
			t.Fatalf("admit %s: %q %v", id1, reuse, err)
		}
	}
	if reuse, err := b.node.Admission().Admit(ctx, "carol", "k2", id2); err != nil || reuse != "" {
		t.Fatalf("admit %s on b: %q %v", id2, reuse, err)
	}
	if _, err := adm.Admit(ctx, "carol", "k3", id3); err != engine.ErrCallerBusy {
		t.Fatalf("a third admission with cap 2: %v, want ErrCallerBusy", err)
	}
	adm.Release("carol", id1)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := adm.Admit(ctx, "carol", "k3", id3)
		if err == nil {
			break
		}
		if err != engine.ErrCallerBusy || time.Now().After(deadline) {
			t.Fatalf("admit after a release: %v", err)
		}
		<-time.After(20 * time.Millisecond) // the release reaches the grain on a goroutine of its own
	}
	adm.Release("carol", id2)
	adm.Release("carol", id3)
	w.check(t)
}

// TestAdmission_GrainsMoveAndRebuild holds a live job of each of 20
// callers, then adds two nodes: the grains of some callers move to them,
// and each must rebuild its count from the members: a second job of any
// caller is refused on every node.
func TestAdmission_GrainsMoveAndRebuild(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 1, 64
	var keys strings.Builder
	for i := range 20 {
		fmt.Fprintf(&keys, "caller%d key%d\n", i, i)
	}
	tc.keys = keys.String()
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	for i := range 20 {
		submit(t, []*node{a, b}[i%2], fmt.Sprintf("key%d", i), "https://example.com/hold")
	}
	c, d := tc.add("c"), tc.add("d")
	tc.waitMembers(4)
	for i := range 20 {
		n := []*node{a, b, c, d}[(i+1)%4]
		code, _ := post(t, n, fmt.Sprintf("key%d", i), fmt.Sprintf("https://example.com/second/%d", i))
		if code != http.StatusTooManyRequests {
			t.Fatalf("caller%d's second job on %s after the grains moved: %d, want 429", i, n.name, code)
		}
	}
	w.check(t)
}

// TestAdmission_Storm: 500 submits from 20 callers over every node, while
// one node joins and one leaves: the cap is never exceeded, checked at
// every admission.
func TestAdmission_Storm(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller = 1
	var keys strings.Builder
	for i := range 20 {
		fmt.Fprintf(&keys, "caller%d key%d\n", i, i)
	}
	tc.keys = keys.String()
	a, b, c := tc.add("a"), tc.add("b"), tc.add("c")
	tc.waitMembers(3)

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
				code, _ := post(t, pick(), fmt.Sprintf("key%d", i), fmt.Sprintf("https://example.com/%d/%d", i, j))
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	close(start)
	d := tc.add("d") // joins
	mu.Lock()
	nodes = []*node{a, c, d}
	mu.Unlock()
	tc.stop(b) // leaves, gracefully
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
