package dashboard_test

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// hasNav reports whether a page has the navigation bar and Sign out.
func hasNav(body string) bool {
	return strings.Contains(body, `id="nav-jobs"`) && strings.Contains(body, `id="signout"`)
}

// TestDashboard_ShortIDInThePath: /ui/jobs/SHORTID (the short id every
// list shows, or 4 or more of its first digits, any case) opens the one
// job of the session's that begins so, lists several, and answers another
// caller's exactly as an unknown id: the same 404, the same page.
func TestDashboard_ShortIDInThePath(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	ids := []string{
		"7d1181fb00000000000000000000a001", // alice
		"7d1181fc00000000000000000000a002", // alice
		"7d11aa0000000000000000000000a003", // alice
		"7d11bb0000000000000000000000b001", // bob
	}
	owners := []string{"alice", "alice", "alice", "bob"}
	fillJobs(t, store, len(ids), testkit.Start, func(i int) string { return ids[i] }, func(i int) string { return owners[i] })
	b := setupOn(t, store, dashboard.Options{})
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	for _, c := range []struct {
		who  string
		br   *browser
		path string
		want []string // the candidates; one: opened; none: 404
	}{
		{"alice", alice, "7d1181fc", []string{ids[1]}},
		{"alice", alice, "7D1181FC", []string{ids[1]}},
		{"alice", alice, "7d11a", []string{ids[2]}},
		{"alice", alice, "7d11", []string{ids[0], ids[1], ids[2]}},
		{"alice", alice, strings.ToUpper(ids[0]), []string{ids[0]}},
		{"alice", alice, "7d11bb00", nil}, // bob's
		{"alice", alice, "7d1", nil},      // too short to search
		{"alice", alice, "not-hex", nil},
		{"bob", bob, "7d11", []string{ids[3]}},
		{"bob", bob, "7d1181fc", nil}, // alice's
		{"root", root, "7d11", []string{ids[0], ids[1], ids[2], ids[3]}},
		{"root", root, "7d1181fc", []string{ids[1]}},
	} {
		r := b.do(t, c.br, http.MethodGet, "/ui/jobs/"+url.PathEscape(c.path), nil)
		switch len(c.want) {
		case 0:
			unknown := b.do(t, c.br, http.MethodGet, "/ui/jobs/ffff0000", nil)
			if r.code != http.StatusNotFound || r.body != unknown.body || !strings.Contains(r.body, "Job not found") {
				t.Errorf("%s opens /ui/jobs/%s: %d, want the 404 of an unknown id", c.who, c.path, r.code)
			}
			if !hasNav(r.body) {
				t.Errorf("%s opens /ui/jobs/%s: the 404 page lost the navigation", c.who, c.path)
			}
			for _, id := range ids {
				if strings.Contains(r.body, id[:8]) {
					t.Errorf("%s opens /ui/jobs/%s: the page names job %s", c.who, c.path, id)
				}
			}
		case 1:
			if r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+c.want[0] {
				t.Errorf("%s opens /ui/jobs/%s: %d %q, want job %s", c.who, c.path, r.code, r.header.Get("Location"), c.want[0])
				continue
			}
			if p := b.do(t, c.br, http.MethodGet, r.header.Get("Location"), nil); p.code != http.StatusOK || !strings.Contains(p.body, c.want[0]) {
				t.Errorf("%s follows to job %s: %d", c.who, c.want[0], p.code)
			}
		default:
			got := listed(r.body)
			slices.Sort(got)
			if r.code != http.StatusOK || !slices.Equal(got, c.want) || !strings.Contains(r.body, "More than one job begins with these digits: choose one.") || !hasNav(r.body) {
				t.Errorf("%s opens /ui/jobs/%s: %d, lists %v, want the candidates %v", c.who, c.path, r.code, got, c.want)
			}
		}
	}
}

// TestDashboard_ErrorPagesKeepTheNavigation: every error page a signed-in
// session gets has the navigation bar and Sign out; one for a session
// that has ended has not.
func TestDashboard_ErrorPagesKeepTheNavigation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/a")
	b.waitTerminal(t, id)
	for _, c := range []struct {
		name, method, path string
		form               url.Values
		code               int
	}{
		{"unknown job", http.MethodGet, "/ui/jobs/" + missingID, nil, http.StatusNotFound},
		{"unknown short id", http.MethodGet, "/ui/jobs/ffff0000", nil, http.StatusNotFound},
		{"unknown page", http.MethodGet, "/ui/nosuch", nil, http.StatusNotFound},
		{"no result", http.MethodGet, "/ui/jobs/" + id + "/0x", nil, http.StatusNotFound},
		{"target out of range", http.MethodGet, "/ui/jobs/" + id + "/5", nil, http.StatusNotFound},
		{"cancel an ended job", http.MethodPost, "/ui/jobs/" + id + "/cancel", url.Values{"csrf": {alice.csrf}}, http.StatusConflict},
		{"a form without its token", http.MethodPost, "/ui/jobs/" + id + "/cancel", url.Values{}, http.StatusForbidden},
		{"resubmit without failed targets", http.MethodPost, "/ui/jobs/" + id + "/resubmit", url.Values{"csrf": {alice.csrf}}, http.StatusConflict},
	} {
		r := b.do(t, alice, c.method, c.path, c.form)
		if r.code != c.code || !hasNav(r.body) || !strings.Contains(r.body, "alice") {
			t.Errorf("%s: %d (want %d), navigation %v", c.name, r.code, c.code, hasNav(r.body))
		}
	}
	if r := b.do(t, nil, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{}); r.code != http.StatusUnauthorized || hasNav(r.body) {
		t.Errorf("signed out: %d, navigation %v; want 401 without it", r.code, hasNav(r.body))
	}
}

// TestDashboard_CountsAddUpAndResultIsThePagesSize: a job cancelled with a
// target in flight and one pending reads "2 / 3 stored · 1 failed · 1 not
// run" on its page and in the lists, the pending target's hint says it
// will not run, and the Result column gives the page's size (the
// content's), not the stored JSON's.
func TestDashboard_CountsAddUpAndResultIsThePagesSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/a", "https://example.com/hold", "https://example.com/c")
	testkit.Recv(t, b.gate.Entered())
	if !b.Runner.Cancel(id) {
		t.Fatal("cancel: false")
	}
	testkit.WaitFor(t, "the target in flight at the cancel stored", func() bool {
		j, ok := b.Runner.Job(id)
		return ok && j.TargetsDone == 2
	})
	r := b.do(t, alice, http.MethodGet, "/ui/jobs/"+id, nil)
	if r.code != http.StatusOK {
		t.Fatalf("job page: %d", r.code)
	}
	for _, want := range []string{
		`2 / 3 stored · <span class="failed">1 failed</span> · <span class="notrun"`, `>1 not run</span>`,
		`aria-label="1 done, 1 failed, 0 pending, 1 not run"`,
		`not run: the job was cancelled before this target started`,
		"Result (page size)",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("job page lacks %q", want)
		}
	}
	content := "<h1>page</h1> of https://example.com/a" // what the fake fetch answers
	stored, _ := b.Runner.ResultJSON(id, 0)
	if len(stored) == len(content) {
		t.Fatal("the stored JSON is the content's size: the test cannot tell them apart")
	}
	if want := ">" + strconv.Itoa(len(content)) + " B</a>"; !strings.Contains(r.body, want) {
		t.Errorf("the Result column lacks the page's size %q (the stored JSON is %d B)", want, len(stored))
	}
	for _, path := range []string{"/ui/jobs", "/ui/"} {
		if r := b.do(t, alice, http.MethodGet, path, nil); !strings.Contains(r.body, `2/3 · <span class="failed">1 failed</span> · <span class="notrun">1 not run</span>`) {
			t.Errorf("%s lacks the job's counts, not run included", path)
		}
	}
}

// TestDashboard_JobARestartFailedSaysWhatWillNotRun: a job a restart
// failed with 1 of 3 targets stored reads "1 / 3 stored · 2 not run", and
// each of the 2 says the restart is why it will not run.
func TestDashboard_JobARestartFailedSaysWhatWillNotRun(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	const id = "feed0000000000000000000000000001"
	j := persistence.JobRecord{ID: id, Caller: "alice", Status: persistence.StatusRunning, TargetsTotal: 3,
		Created: testkit.Start.UnixNano(), Lease: testkit.Start.UnixNano()}
	ts := []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/a"}, {Idx: 1, URL: "https://example.com/b"}, {Idx: 2, URL: "https://example.com/c"}}
	if err := store.CreateJob(&j, ts); err != nil {
		t.Fatal(err)
	}
	ts[0].Status, ts[0].Result, ts[0].Stored = persistence.TargetDone, []byte(`{"content":"x"}`), testkit.Start.UnixNano()
	j.TargetsDone = 1
	if err := store.SaveTarget(&j, &ts[0]); err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, store, dashboard.Options{}) // the runner fails the running job "restart"
	if got, _ := b.Runner.Job(id); got.Status != engine.StatusFailed || got.Error != "restart" {
		t.Fatalf("job %s %q after the restart", got.Status, got.Error)
	}
	alice := b.signIn(t, "alice-key")
	r := b.do(t, alice, http.MethodGet, "/ui/jobs/"+id[:8], nil)
	if r.code != http.StatusSeeOther {
		t.Fatalf("short id: %d", r.code)
	}
	r = b.do(t, alice, http.MethodGet, r.header.Get("Location"), nil)
	if !strings.Contains(r.body, `1 / 3 stored · <span class="notrun"`) || !strings.Contains(r.body, ">2 not run</span>") {
		t.Errorf("job page lacks 1 / 3 stored · 2 not run")
	}
	if n := strings.Count(r.body, "not run: the server restarted"); n != 2 {
		t.Errorf("%d targets say the restart is why they will not run, want 2", n)
	}
}
