package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

func TestNode_ListMergesEveryNode(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	want := map[string]bool{}
	for i := range 9 {
		n := []*node{a, b, c}[i%3]
		id := n.Submit(t, "alice-key", fmt.Sprintf("https://example.com/%d", i))
		n.WaitDone(t, id)
		want[id] = true
	}
	bobs := b.Submit(t, "bob-key", "https://example.com/bob")
	b.WaitDone(t, bobs)

	// Pages of 4 from c, followed by cursor, hold each of alice's 9 jobs
	// once, newest first, and none of bob's.
	var (
		got    []string
		cursor string
	)
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("too many pages")
		}
		code, _, body := c.Do(t, "GET", "/v1/batch?limit=4&cursor="+cursor, "alice-key", "")
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, body)
		}
		var out struct {
			Jobs []struct {
				ID        string `json:"id"`
				CreatedAt int64  `json:"created_at"`
			} `json:"jobs"`
			NextCursor  string   `json:"next_cursor"`
			Unavailable []string `json:"unavailable_nodes"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Unavailable) != 0 {
			t.Fatalf("unavailable nodes: %v", out.Unavailable)
		}
		for _, j := range out.Jobs {
			got = append(got, j.ID)
		}
		if out.NextCursor == "" {
			break
		}
		cursor = out.NextCursor
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d jobs, want %d: %v", len(got), len(want), got)
	}
	seen := map[string]bool{}
	for _, id := range got {
		if !want[id] || seen[id] {
			t.Fatalf("listed %s: not alice's, or twice", id)
		}
		seen[id] = true
	}
	// Newest first: the order of ListAt's cursors, across the nodes.
	var all []engine.Job
	for _, n := range []*node{a, b, c} {
		jobs, _, err := n.Runner.List("alice", engine.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, jobs...)
	}
	for i := 1; i < len(got); i++ {
		if createdOf(all, got[i]) > createdOf(all, got[i-1]) {
			t.Fatalf("job %d is newer than job %d", i, i-1)
		}
	}
}

// TestNode_ListAllMergesEveryNode: an admin's ?caller=* on any node lists
// every caller's jobs of every node once, newest first, each with its
// caller, in pages whose cursor goes on on another node; ?caller=bob
// lists bob's of every node; Node.ListAll is the same list; a standard
// key's ?caller= is 403 on every node.
func TestNode_ListAllMergesEveryNode(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b", "c")
	a, b, c := tc.Node("a"), tc.Node("b"), tc.Node("c")
	nodes := []*node{a, b, c}
	callerOf := map[string]string{}
	for i := range 8 {
		n := nodes[i%3]
		key := []string{"alice-key", "bob-key"}[i%2]
		id := n.Submit(t, key, fmt.Sprintf("https://example.com/all%d", i))
		n.WaitDone(t, id)
		callerOf[id] = strings.TrimSuffix(key, "-key")
	}
	list := func(from *node, query string) (ids, callers []string) {
		t.Helper()
		cursor := ""
		for page := 0; ; page++ {
			if page > 10 {
				t.Fatal("too many pages")
			}
			n := nodes[page%3] // each page asked of another node
			if from != nil {
				n = from
			}
			code, _, body := n.Do(t, "GET", "/v1/batch?"+query+"&cursor="+cursor, "root-key", "")
			if code != http.StatusOK {
				t.Fatalf("list: %d %s", code, body)
			}
			var out listPage
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Unavailable) != 0 {
				t.Fatalf("unavailable nodes: %v", out.Unavailable)
			}
			for _, j := range out.Jobs {
				ids, callers = append(ids, j.ID), append(callers, j.Caller)
			}
			if out.NextCursor == "" {
				return ids, callers
			}
			cursor = out.NextCursor
		}
	}
	ids, callers := list(nil, "caller=*&limit=3")
	if len(ids) != len(callerOf) {
		t.Fatalf("listed %d jobs, want %d: %v", len(ids), len(callerOf), ids)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if callerOf[id] == "" || seen[id] {
			t.Fatalf("listed %s: not submitted, or twice", id)
		}
		seen[id] = true
		if callers[i] != callerOf[id] {
			t.Fatalf("job %s listed as %q's, want %q's", id, callers[i], callerOf[id])
		}
	}
	var all []engine.Job
	for _, n := range nodes {
		jobs, _, err := n.Runner.ListAll(engine.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, jobs...)
	}
	for i := 1; i < len(ids); i++ {
		if createdOf(all, ids[i]) > createdOf(all, ids[i-1]) {
			t.Fatalf("job %d is newer than job %d", i, i-1)
		}
	}
	bobs, callers := list(a, "caller=bob&limit=2")
	for i, id := range bobs {
		if callerOf[id] != "bob" || callers[i] != "bob" {
			t.Fatalf("caller=bob listed %s (%q)", id, callers[i])
		}
	}
	if len(bobs) != 4 {
		t.Fatalf("caller=bob: %d jobs, want 4", len(bobs))
	}
	jobs, next, unavailable, err := b.Node.ListAll(context.Background(), engine.ListOptions{Limit: 100})
	if err != nil || next != "" || len(unavailable) != 0 {
		t.Fatalf("ListAll: %v %q %v", err, next, unavailable)
	}
	if len(jobs) != len(ids) {
		t.Fatalf("ListAll: %d jobs, want %d", len(jobs), len(ids))
	}
	for i := range jobs {
		if jobs[i].ID != ids[i] || jobs[i].Caller != callerOf[ids[i]] {
			t.Fatalf("ListAll job %d: %s (%s), want %s", i, jobs[i].ID, jobs[i].Caller, ids[i])
		}
	}
	for _, n := range nodes {
		for _, q := range []string{"caller=*", "caller=alice", "caller=bob"} {
			if code, _, body := n.Do(t, "GET", "/v1/batch?"+q, "alice-key", ""); code != http.StatusForbidden {
				t.Fatalf("alice's %s: %d %s", q, code, body)
			}
		}
	}
}

// TestNode_ListMergePagesAcrossNodes: a caller's jobs spread on 3 nodes whose clocks tie
// and interleave, listed in pages of 1 to 5, each page asked of another
// node than the one before (a cursor from one node used on another), with
// and without status filters: every job exactly once, newest first, in
// each node's own order for its jobs, in the same order whatever the page
// size; no other caller's job; bad requests answered as by a single node;
// another caller's cursor lists only the caller's jobs after it; a node
// that left is named.
func TestNode_ListMergePagesAcrossNodes(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	// A long Timeout: the test is about the pages' merge, not about how
	// fast; under -race on a loaded machine a node's page took longer than
	// the default 3 s (listed as unavailable).
	tc := clustertest.New(t, clustertest.Options{Timeout: 20 * time.Second})
	clock := testkit.NewClock()
	clock.Set(time.Unix(1_800_000_000, 0))
	o := clustertest.NodeOptions{Now: clock.Now, JobsPerCaller: 8}
	a, b, c := tc.AddWith("a", o), tc.AddWith("b", o), tc.AddWith("c", o)
	tc.WaitMembers(3)
	nodes := []*node{a, b, c}
	one := solo(t)
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
				url = fmt.Sprintf("https://example.com/%d/hold", i) // apart: the same targets would reuse a live job
			}
			id := n.Submit(t, "alice-key", url)
			created[id] = base.Add(s.at).UnixNano()
			if !s.hold {
				n.WaitDone(t, id)
				status[id] = "done"
			} else {
				status[id] = "running"
			}
			if i == 7 { // bob's job, at a time of its own
				clock.Set(base.Add(4 * time.Nanosecond))
				bobs = c.Submit(t, "bob-key", "https://example.com/bob")
				c.WaitDone(t, bobs)
			}
		}
	}
	// One of alice's running jobs cancelled.
	for id, st := range status {
		if st == "running" && strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag("b"))) {
			if got := send(ctx, a, "DELETE", "/v1/batch/"+id, bearer("alice-key")); got.code != http.StatusOK {
				t.Fatalf("cancel %s: %d %s", id, got.code, got.body)
			}
			b.WaitDone(t, id)
			status[id] = "cancelled"
		}
	}
	// The running ones may be queued or running: "live" covers both.
	// The order each node gives its own jobs.
	own := map[*node][]string{}
	for _, n := range nodes {
		jobs, _, err := n.Runner.List("alice", engine.ListOptions{Limit: 100})
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
				t.Fatalf("GET %s on %s: %d %s", q, n.Name, got.code, got.body)
			}
			var p listPage
			if err := json.Unmarshal(got.body, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Unavailable) > 0 || len(p.Jobs) > limit {
				t.Fatalf("GET %s on %s: %d jobs, unavailable %v", q, n.Name, len(p.Jobs), p.Unavailable)
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
				if strings.HasPrefix(id, fmt.Sprintf("%x", cluster.Tag(n.Name))) {
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
				t.Fatalf("%s: %s's jobs in the order %v, %s lists them %v", what, n.Name, sub, n.Name, want)
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
				check(t, fmt.Sprintf("list%s limit %d from %s", q, limit, nodes[start].Name), ids, keep)
				if q == "" {
					if order == "" {
						order = strings.Join(ids, ",")
					} else if strings.Join(ids, ",") != order {
						t.Fatalf("limit %d from %s: another order", limit, nodes[start].Name)
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
			sameAnswer(t, "GET /v1/batch"+q+" on "+n.Name, send(ctx, n, "GET", "/v1/batch"+q, bearer("alice-key")), want)
		}
	}
	// Bob's cursor, in alice's hands: alice's jobs older than bob's.
	bobPage := send(ctx, c, "GET", "/v1/batch?limit=1", bearer("bob-key"))
	var bp listPage
	if err := json.Unmarshal(bobPage.body, &bp); err != nil || len(bp.Jobs) != 1 || bp.Jobs[0].ID != bobs {
		t.Fatalf("bob's list: %s", bobPage.body)
	}
	jobs, cursors, _, err := engine.PeerOf(c.Runner).ListAt("bob", engine.ListOptions{Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatal(err)
	}
	for _, n := range nodes {
		got := send(ctx, n, "GET", "/v1/batch?limit=100&cursor="+cursors[0], bearer("alice-key"))
		var p listPage
		if err := json.Unmarshal(got.body, &p); err != nil || got.code != http.StatusOK {
			t.Fatalf("alice with bob's cursor on %s: %d %s", n.Name, got.code, got.body)
		}
		var ids []string
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		check(t, "alice with bob's cursor on "+n.Name, ids, func(id string) bool { return created[id] < base.Add(4).UnixNano() })
	}
	// Bob sees his job only, from every node.
	for _, n := range nodes {
		got := send(ctx, n, "GET", "/v1/batch", bearer("bob-key"))
		if got.code != http.StatusOK || !strings.Contains(string(got.body), bobs) || strings.Count(string(got.body), `"id"`) != 1 {
			t.Errorf("bob's list on %s: %s", n.Name, got.body)
		}
	}
	// c leaves: the list on a names it, and holds a's and b's jobs.
	tc.Stop(c)
	tc.WaitMembers(2)
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

func createdOf(jobs []engine.Job, id string) int64 {
	for _, j := range jobs {
		if j.ID == id {
			return j.CreatedAt
		}
	}
	return -1
}

// listPage is GET /v1/batch's answer.
type listPage struct {
	Jobs []struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		CreatedAt int64  `json:"created_at"`
		Caller    string `json:"caller"`
	} `json:"jobs"`
	NextCursor  string   `json:"next_cursor"`
	Unavailable []string `json:"unavailable_nodes"`
}

// TestNode_ListAllMergesPagesCutByTheScan: a node whose page is cut short
// by engine.ListScan (a status few of its jobs have) has listed its jobs
// only down to its next cursor, so the merged page stops there: another
// node's jobs older than that wait for the next page, after the first
// node's older matches, and every match is listed once, newest first.
func TestNode_ListAllMergesPagesCutByTheScan(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	now := time.Now().UnixNano()
	put := func(n *node, i int, failed bool) string {
		t.Helper()
		created := now - int64(i+1)*int64(time.Millisecond) // i = 0 is the newest
		j := persistence.JobRecord{ID: fmt.Sprintf("%s%024x", n.Name[:1]+"0000000", i+1), Caller: "alice", Status: persistence.StatusDone,
			Settled: true, TargetsTotal: 1, TargetsDone: 1, Created: created, Lease: now, Started: created, Ended: created}
		j.Key[0], j.Key[1], j.Key[2] = n.Name[0], byte(i>>8), byte(i)
		if failed {
			j.Status, j.TargetsDone, j.TargetsFailed = persistence.StatusFailed, 0, 1
		}
		if err := n.Store.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/scan"}}); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	last := engine.ListScan * 3 / 2
	for i := range last - 1 {
		put(a, i, false)
	}
	// a's failed jobs are past its first page's scan; b's are one between
	// a's frontier and a's failed jobs, and one older than all.
	want := []string{put(b, engine.ListScan+100, true), put(a, last-1, true), put(a, last, true), put(b, last+100, true)}
	var got []string
	opt := engine.ListOptions{Status: "failed", Limit: 10}
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("too many pages")
		}
		jobs, next, unavailable, err := []*node{a, b}[page%2].Node.ListAll(context.Background(), opt)
		if err != nil || len(unavailable) != 0 {
			t.Fatalf("page %d: %v %v", page, err, unavailable)
		}
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if next == "" {
			break
		}
		opt.Cursor = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
}
