package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// clusterFetch is a cluster's fetch for the dashboard's tests: a URL that
// ends in /hold waits at g, one that ends in /fail fails with a hint,
// anything else succeeds.
func clusterFetch(g *testkit.Gate) engine.FetchFunc {
	return func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			if err := g.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		return engine.Result{Content: "page " + t.URL}, nil
	}
}

// clusterDash serves a dashboard of cluster node n (Options.Cluster its
// node), as serve does, and returns it as a bundle to sign in to and ask
// (its runner bundle unset).
func clusterDash(t *testing.T, n *clustertest.Node) *bundle {
	t.Helper()
	keys, err := httpapi.ReadKeys(strings.NewReader(clustertest.Keys))
	if err != nil {
		t.Fatal(err)
	}
	dash, err := dashboard.New(n.Runner, keys, dashboard.Options{Cluster: n.Node, Refresh: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Prefix, dash)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.RegisterOnShutdown(dash.Close)
	srv.Start()
	transport := &http.Transport{}
	t.Cleanup(func() {
		dash.Close()
		transport.CloseIdleConnections()
		srv.Close()
	})
	return &bundle{url: srv.URL, dash: dash, client: &http.Client{Transport: transport, Timeout: testkit.Deadline,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// TestDashboard_Cluster: on a cluster node, the dashboard lists every
// node's jobs the session may see (the jobs page, by caller, by short id,
// the overview's "Recently finished"); opens another node's job by its
// id or short id (digits 9-16), read from that node; resubmits its failed
// targets as a new job of this node; refuses to cancel it, saying where;
// keeps a caller to its own jobs; and, once that node has gone, says
// which node is missing (503 for its job, never "no such job").
func TestDashboard_Cluster(t *testing.T) {
	t.Parallel()
	gate := testkit.NewGate()
	c := clustertest.Start(t, clustertest.Options{Fetch: clusterFetch(gate)}, "a", "b")
	t.Cleanup(gate.Open) // before the cluster's stop (cleanups run last first)
	a, b := c.Node("a"), c.Node("b")
	onA := a.Submit(t, "alice-key", "https://example.com/c/a1")
	a.WaitDone(t, onA)
	onB := b.Submit(t, "alice-key", "https://example.com/c/b1", "https://example.com/c/b1/fail")
	b.WaitDone(t, onB)
	bobs := b.Submit(t, "bob-key", "https://example.com/c/bob")
	b.WaitDone(t, bobs)
	liveB := b.Submit(t, "alice-key", "https://example.com/c/b2/hold")
	short := func(id string) string { return id[8:16] }

	d := clusterDash(t, a)
	alice, bob, root := d.signIn(t, "alice-key"), d.signIn(t, "bob-key"), d.signIn(t, "root-key")

	// The lists: every node's.
	sorted := func(ids ...string) []string { s := slices.Clone(ids); slices.Sort(s); return s }
	for _, c := range []struct {
		who  string
		br   *browser
		path string
		want []string
	}{
		{"alice", alice, "/ui/jobs", []string{onA, onB, liveB}},
		{"alice, filtered by bob", alice, "/ui/jobs?caller=bob", []string{onA, onB, liveB}},
		{"bob", bob, "/ui/jobs", []string{bobs}},
		{"root", root, "/ui/jobs", []string{onA, onB, bobs, liveB}},
		{"root, bob's", root, "/ui/jobs?caller=bob", []string{bobs}},
		{"root, live", root, "/ui/jobs?status=live", []string{liveB}},
		{"alice, by short id", alice, "/ui/jobs?q=" + short(onB), []string{onB}},
		{"bob, by alice's short id", bob, "/ui/jobs?q=" + short(onB), nil},
	} {
		r := d.do(t, c.br, http.MethodGet, c.path, nil)
		if got := sorted(listed(r.body)...); r.code != http.StatusOK || !slices.Equal(got, sorted(c.want...)) {
			t.Errorf("%s: GET %s: %d, lists %v, want %v", c.who, c.path, r.code, got, c.want)
		}
		if strings.Contains(r.body, `id="jobs-missing"`) {
			t.Errorf("%s: GET %s says a node is missing with both up", c.who, c.path)
		}
	}
	for _, c := range []struct {
		who  string
		br   *browser
		want []string
	}{{"alice", alice, []string{onA, onB}}, {"root", root, []string{onA, onB, bobs}}} {
		r := d.do(t, c.br, http.MethodGet, "/ui/", nil)
		recent := r.body[strings.Index(r.body, `id="recent-h"`):]
		if got := sorted(listed(recent)...); !slices.Equal(got, sorted(c.want...)) {
			t.Errorf("%s's Recently finished: %v, want %v", c.who, got, c.want)
		}
		if live := listed(r.body[:strings.Index(r.body, `id="recent-h"`)]); !slices.Contains(live, liveB) {
			t.Errorf("%s's live jobs: %v, want node b's %s among them", c.who, live, liveB)
		}
	}
	if r := d.do(t, bob, http.MethodGet, "/ui/", nil); slices.Contains(listed(r.body), onB) || slices.Contains(listed(r.body), liveB) {
		t.Error("bob's overview lists alice's jobs of node b")
	}

	// Opening node b's job from node a: by short id, by id.
	if r := d.do(t, alice, http.MethodGet, "/ui/jobs?id="+short(onB), nil); r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+onB {
		t.Fatalf("alice opens %s: %d %q", short(onB), r.code, r.header.Get("Location"))
	}
	for _, br := range []*browser{alice, root} {
		r := d.do(t, br, http.MethodGet, "/ui/jobs/"+onB, nil)
		if r.code != http.StatusOK || !strings.Contains(r.body, "https://example.com/c/b1/fail") || !strings.Contains(r.body, "check the URL") ||
			!strings.Contains(r.body, `id="job-node"`) || !strings.Contains(r.body, "held by node b") {
			t.Fatalf("node b's job opened on node a: %d %s", r.code, r.body)
		}
	}
	missing := d.do(t, bob, http.MethodGet, "/ui/jobs/"+missingID, nil)
	for _, path := range []string{"/ui/jobs/" + onB, "/ui/jobs?id=" + short(onB), "/ui/jobs/" + onB + "/0"} {
		if r := d.do(t, bob, http.MethodGet, path, nil); r.code != http.StatusNotFound || r.body != missing.body {
			t.Errorf("bob: GET %s: %d, want the 404 of a missing job", path, r.code)
		}
	}
	if r := d.do(t, alice, http.MethodGet, "/ui/jobs/"+onB+"/0", nil); r.code != http.StatusNotImplemented || !strings.Contains(r.body, "stored on node b") {
		t.Errorf("a result of node b's job: %d %s", r.code, r.body)
	}

	// Cancel is refused, saying where; the job goes on.
	r := d.do(t, alice, http.MethodPost, "/ui/jobs/"+liveB+"/cancel", url.Values{"csrf": {alice.csrf}})
	if r.code != http.StatusConflict || !strings.Contains(r.body, "This job runs on node b") || !strings.Contains(r.body, "DELETE /v1/batch/"+liveB) {
		t.Errorf("cancel of node b's job from node a: %d %s", r.code, r.body)
	}
	if j, ok := b.Runner.Job(liveB); !ok || !engine.IsLive(j.Status) {
		t.Errorf("node b's job after the refused cancel: %+v", j)
	}
	if page := d.do(t, alice, http.MethodGet, "/ui/jobs/"+liveB, nil).body; strings.Contains(page, `id="cancel"`) {
		t.Error("node b's live job offers Cancel on node a")
	}

	// Resubmit works through the cluster: a new job of alice's on node a.
	r = d.do(t, root, http.MethodPost, "/ui/jobs/"+onB+"/resubmit", url.Values{"csrf": {root.csrf}})
	m := resubmittedRE.FindStringSubmatch(r.header.Get("Location"))
	if r.code != http.StatusSeeOther || m == nil || m[2] != onB {
		t.Fatalf("resubmit of node b's job from node a: %d %q %s", r.code, r.header.Get("Location"), r.body)
	}
	j, ts, ok := a.Runner.Targets(m[1])
	if !ok || j.Caller != "alice" || len(ts) != 1 || ts[0].URL != "https://example.com/c/b1/fail" {
		t.Fatalf("the resubmitted job on node a: %+v %+v", j, ts)
	}
	a.WaitDone(t, m[1])

	// A job whose targets are too many to read whole from node b: the
	// page says how many are not shown, and its resubmit is refused. (The
	// held job ends first: it keeps a worker of b's.)
	gate.Open()
	b.WaitDone(t, liveB)
	var big []engine.Target
	for i := range 8 {
		big = append(big, engine.Target{URL: fmt.Sprintf("https://example.com/c/%d/%s/fail", i, strings.Repeat("x", 64<<10))})
	}
	bigB, _, err := b.Runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", big)
	if err != nil {
		t.Fatal(err)
	}
	b.WaitDone(t, bigB)
	if r := d.do(t, alice, http.MethodGet, "/ui/jobs/"+bigB, nil); r.code != http.StatusOK || !strings.Contains(r.body, `id="targets-unlisted"`) {
		t.Errorf("node b's job of 8 targets of 64 KiB: %d, no word of the targets not shown", r.code)
	}
	r = d.do(t, alice, http.MethodPost, "/ui/jobs/"+bigB+"/resubmit", url.Values{"csrf": {alice.csrf}})
	if r.code != http.StatusConflict || !strings.Contains(r.body, "too many targets to be read from this node whole") {
		t.Errorf("resubmit of node b's job too big to read: %d %.300s", r.code, r.body)
	}

	// Node b goes: its jobs are said to be missing, its job is 503.
	c.Stop(b)
	clustertest.WaitSees(t, a, 1)
	r = d.do(t, alice, http.MethodGet, "/ui/jobs", nil)
	if got := sorted(listed(r.body)...); r.code != http.StatusOK || !slices.Equal(got, sorted(onA, m[1])) ||
		!strings.Contains(r.body, `id="jobs-missing"`) || !strings.Contains(r.body, "Node b did not answer") {
		t.Errorf("alice's jobs with node b gone: %d, lists %v: %s", r.code, got, r.body)
	}
	if r := d.do(t, root, http.MethodGet, "/ui/", nil); !strings.Contains(r.body, `id="overview-missing"`) {
		t.Errorf("the overview with node b gone does not say so: %s", r.body)
	}
	for _, path := range []string{"/ui/jobs/" + onB, "/ui/jobs?id=" + short(onB)} {
		r := d.do(t, alice, http.MethodGet, path, nil)
		if r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "node b") || r.header.Get("Retry-After") == "" {
			t.Errorf("GET %s with node b gone: %d %s", path, r.code, r.body)
		}
	}
	testkit.RequireNoneOf(t, c.Logs.String(), "alice-key", "root-key", "example.com/c/")
}
