package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// rowRE finds the jobs a list shows, in order.
var rowRE = regexp.MustCompile(`<a class="id" href="/ui/jobs/([0-9a-f]{32})"`)

// listed returns the ids a page lists, in order.
func listed(body string) []string {
	var ids []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

var nextRE = regexp.MustCompile(`<a href="([^"]+)" id="page-next"`)

// allPages follows a list's "Older" links from path and returns every id
// listed, in order, and the number of pages.
func (b *bundle) allPages(t *testing.T, br *browser, path string) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for path != "" {
		r := b.do(t, br, http.MethodGet, path, nil)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		pages++
		ids = append(ids, listed(r.body)...)
		path = ""
		if m := nextRE.FindStringSubmatch(r.body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	return ids, pages
}

// submitRun submits a job of urls for caller, waits for its end, and
// moves the clock on a second, so that the next job is newer.
func (b *bundle) submitRun(t *testing.T, caller string, urls ...string) string {
	t.Helper()
	id := b.submit(t, caller, urls...)
	b.waitTerminal(t, id)
	b.Clock.Advance(time.Second)
	return id
}

// reversed returns ids newest first.
func reversed(ids []string) []string {
	out := slices.Clone(ids)
	slices.Reverse(out)
	return out
}

// TestDashboard_JobsPage: /ui/jobs lists every job the session may see,
// newest first, 25 a page with a link to the older ones; filters by status
// and, for an admin, by caller (or every caller); searches by id prefix
// and by URL; "Open a job" takes a short id; a bad filter or cursor is
// refused with a message.
func TestDashboard_JobsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	var mine, failed, bobs []string
	for i := range 27 {
		urls := []string{fmt.Sprintf("https://example.com/alice/%d", i)}
		if i%9 == 0 {
			urls = []string{fmt.Sprintf("https://example.com/alice/%d/fail", i)}
		}
		id := b.submitRun(t, "alice", urls...)
		mine = append(mine, id)
		if i%9 == 0 {
			failed = append(failed, id)
		}
		if i%10 == 0 {
			bobs = append(bobs, b.submitRun(t, "bob", fmt.Sprintf("https://example.com/bob/%d", i)))
		}
	}
	all, _, err := b.Runner.ListAll(engine.ListOptions{Limit: engine.MaxListLimit})
	if err != nil || len(all) != len(mine)+len(bobs) {
		t.Fatalf("ListAll: %d jobs, %v", len(all), err)
	}
	var everyone []string
	for _, j := range all {
		everyone = append(everyone, j.ID)
	}

	t.Run("PagesNewestFirst", func(t *testing.T) {
		first := b.do(t, alice, http.MethodGet, "/ui/jobs", nil)
		if got := listed(first.body); len(got) != 25 || !slices.Equal(got, reversed(mine)[:25]) {
			t.Fatalf("alice's first page lists %d jobs, not her newest 25 in order", len(got))
		}
		got, pages := b.allPages(t, alice, "/ui/jobs")
		if pages != 2 || !slices.Equal(got, reversed(mine)) {
			t.Fatalf("alice's pages: %d pages, %d jobs, want 2 pages of her %d, newest first", pages, len(got), len(mine))
		}
	})
	t.Run("StatusFilter", func(t *testing.T) {
		got, _ := b.allPages(t, alice, "/ui/jobs?status=failed")
		if !slices.Equal(got, reversed(failed)) {
			t.Fatalf("status=failed lists %v, want %v", got, reversed(failed))
		}
		if got, _ := b.allPages(t, alice, "/ui/jobs?status=done"); len(got) != len(mine)-len(failed) {
			t.Fatalf("status=done lists %d, want %d", len(got), len(mine)-len(failed))
		}
	})
	t.Run("CallerFilter", func(t *testing.T) {
		if got, _ := b.allPages(t, root, "/ui/jobs?caller=bob"); !slices.Equal(got, reversed(bobs)) {
			t.Fatalf("admin caller=bob lists %v, want %v", got, reversed(bobs))
		}
		for _, path := range []string{"/ui/jobs", "/ui/jobs?caller=%2A"} {
			if got, pages := b.allPages(t, root, path); !slices.Equal(got, everyone) || pages != 2 {
				t.Fatalf("admin %s lists %d jobs on %d pages, want every caller's %d in ListAll's order", path, len(got), pages, len(everyone))
			}
		}
	})
	t.Run("SearchByIDPrefix", func(t *testing.T) {
		id := mine[5]
		for _, q := range []string{id[:4], id[:6], strings.ToUpper(id[:8]), id} {
			got := listed(b.do(t, alice, http.MethodGet, "/ui/jobs?q="+q, nil).body)
			if !slices.Contains(got, id) {
				t.Errorf("q=%s does not list the job", q)
			}
			for _, other := range got {
				if !strings.HasPrefix(other, strings.ToLower(q)) {
					t.Errorf("q=%s lists %s", q, other)
				}
			}
		}
	})
	t.Run("SearchByURL", func(t *testing.T) {
		r := b.do(t, alice, http.MethodGet, "/ui/jobs?q=ALICE/7", nil)
		if got := listed(r.body); !slices.Equal(got, []string{mine[7]}) {
			t.Fatalf("q=ALICE/7 lists %v, want %s", got, mine[7])
		}
		if !strings.Contains(r.body, "Searched the URLs of all 27 jobs") {
			t.Fatalf("the page does not say what it searched: %s", r.body)
		}
		if got := listed(b.do(t, root, http.MethodGet, "/ui/jobs?q=example.com%2Fbob", nil).body); !slices.Equal(got, reversed(bobs)) {
			t.Fatalf("admin q=example.com/bob lists %v", got)
		}
	})
	t.Run("OpenByShortID", func(t *testing.T) {
		id := mine[3]
		for _, q := range []string{engine.ShortID(id), id[:5], strings.ToUpper(id[:8]), " " + id + " "} {
			r := b.do(t, alice, http.MethodGet, "/ui/jobs?id="+url.QueryEscape(q), nil)
			if r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+id {
				t.Errorf("open %q: %d %s", q, r.code, r.header.Get("Location"))
			}
		}
		if r := b.do(t, alice, http.MethodGet, "/ui/jobs?id=", nil); r.code != http.StatusOK || len(listed(r.body)) != 25 {
			t.Errorf("an empty Open a job: %d, want the jobs page", r.code)
		}
		for _, q := range []string{"abc", "zzzzzzzz", missingID[:8]} {
			if r := b.do(t, alice, http.MethodGet, "/ui/jobs?id="+q, nil); r.code != http.StatusNotFound {
				t.Errorf("open %q: %d, want 404", q, r.code)
			}
		}
	})
	t.Run("BadQuery", func(t *testing.T) {
		for _, path := range []string{"/ui/jobs?status=bogus", "/ui/jobs?cursor=not-a-cursor", "/ui/jobs?cursor=" + strings.Repeat("A", 40)} {
			r := b.do(t, alice, http.MethodGet, path, nil)
			if r.code != http.StatusBadRequest || !strings.Contains(r.body, `role="alert"`) || len(listed(r.body)) != 0 {
				t.Errorf("GET %s: %d, want 400 with a message", path, r.code)
			}
		}
	})
}

// TestDashboard_JobsIsolation: on the jobs page a standard key never sees
// another caller's job: not by a caller filter, a search by id prefix or
// by URL, a short id, nor a guessed URL; each looks as if the job did not
// exist. The admin finds it every way.
func TestDashboard_JobsIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	secret := b.submitRun(t, "alice", "https://alice-secret.example/report")
	own := b.submitRun(t, "bob", "https://bob.example/page")
	page := func(br *browser, path string) response {
		t.Helper()
		return b.do(t, br, http.MethodGet, path, nil)
	}
	for _, path := range []string{"/ui/jobs", "/ui/jobs?caller=alice", "/ui/jobs?caller=*", "/ui/jobs?status=done&caller=alice",
		"/ui/jobs?q=" + secret[:4], "/ui/jobs?q=" + secret[:12], "/ui/jobs?q=" + secret, "/ui/jobs?q=alice-secret", "/ui/jobs?q=report", "/ui/jobs?q=example"} {
		r := page(bob, path)
		if r.code != http.StatusOK {
			t.Errorf("bob %s: %d", path, r.code)
		}
		for _, leak := range []string{secret, engine.ShortID(secret), "alice-secret", `class="caller">alice`} {
			if strings.Contains(r.body, leak) && !strings.Contains(path, leak) {
				t.Errorf("bob %s shows %q", path, leak)
			}
		}
		if got := listed(r.body); slices.Contains(got, secret) {
			t.Errorf("bob %s lists alice's job", path)
		}
	}
	if got := listed(page(bob, "/ui/jobs?caller=alice").body); !slices.Equal(got, []string{own}) {
		t.Errorf("bob's caller=alice lists %v, want only his own job", got)
	}
	// A short id or a prefix of alice's job is answered as one of no job.
	for _, q := range []string{engine.ShortID(secret), secret[:4], secret[:16]} {
		got, want := page(bob, "/ui/jobs?id="+q), page(bob, "/ui/jobs?id="+missingID[:len(q)])
		if got.code != http.StatusNotFound || got.body != want.body {
			t.Errorf("bob opens alice's %q: %d, want the 404 of no job", q, got.code)
		}
	}
	if r := page(bob, "/ui/jobs/"+secret); r.code != http.StatusNotFound {
		t.Errorf("bob's guessed URL: %d", r.code)
	}
	// The admin finds it every way.
	for _, path := range []string{"/ui/jobs", "/ui/jobs?caller=alice", "/ui/jobs?q=" + secret[:6], "/ui/jobs?q=alice-secret"} {
		if got := listed(page(root, path).body); !slices.Contains(got, secret) {
			t.Errorf("admin %s does not list alice's job", path)
		}
	}
	if r := page(root, "/ui/jobs?id="+engine.ShortID(secret)); r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+secret {
		t.Errorf("admin opens alice's short id: %d", r.code)
	}
}

// TestDashboard_OverviewFinishedFromIndex: the admin's "Recently
// finished" lists a job that started and ended without any page looking
// (from the store's index, newest first), and lists it again after a
// restart on the same store.
func TestDashboard_OverviewFinishedFromIndex(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := enginetest.OpenStore(t, dir)
	b := setupOn(t, store, dashboardOptions())
	quick := b.submitRun(t, "bob", "https://example.com/quick")
	root := b.signIn(t, "root-key")
	recent := func(b *bundle, br *browser) []string {
		t.Helper()
		body := b.do(t, br, http.MethodGet, "/ui/", nil).body
		i := strings.Index(body, `id="recent-h"`)
		if i < 0 {
			t.Fatalf("no Recently finished: %s", body)
		}
		return listed(body[i:])
	}
	if got := recent(b, root); !slices.Equal(got, []string{quick}) {
		t.Fatalf("the admin's Recently finished lists %v, want bob's quick job", got)
	}
	b.Runner.Close()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := setupOn(t, enginetest.OpenStore(t, dir), dashboardOptions())
	b2.Clock.Advance(time.Hour) // a new clock starts where the first did: move on past it
	later := b2.submitRun(t, "alice", "https://example.com/later")
	root2 := b2.signIn(t, "root-key")
	if got := recent(b2, root2); !slices.Equal(got, []string{later, quick}) {
		t.Fatalf("after a restart the admin's Recently finished lists %v, want %v", got, []string{later, quick})
	}
}

// TestDashboard_JobPageTimings: the job page shows when the job started
// and ended and how long it took, each target's fetch time, when its
// outcome was stored, and the options it ran with; a live job says it has
// not ended.
func TestDashboard_JobPageTimings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{
		{URL: "https://example.com/t/slow", Options: engine.Options{Grep: "needle", JQ: ".items[0]"}},
		{URL: "https://example.com/t/fail"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.waitTerminal(t, id)
	body := b.do(t, alice, http.MethodGet, "/ui/jobs/"+id, nil).body
	for _, want := range []string{
		`<time id="job-started">Jan 2 03:04:05 UTC</time>`,
		`<time id="job-ended">Jan 2 03:04:06 UTC</time>`,
		`id="job-took">1.5 s<`, // to the millisecond, not whole seconds
		`class="took">1.5 s<`,
		`<time>Jan 2 03:04:06 UTC</time>`,
		`<code class="opt">grep: needle</code>`,
		`<code class="opt">jq: .items[0]</code>`,
		"check the URL",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}
	live := b.submit(t, "alice", "https://example.com/t/hold")
	body = b.do(t, alice, http.MethodGet, "/ui/jobs/"+live, nil).body
	if !strings.Contains(body, `<span class="muted" id="job-ended">not yet</span>`) {
		t.Errorf("a live job's page does not say it has not ended")
	}
}

// dashboardOptions are the options setup uses (the zero value: setupOn
// fills them in).
func dashboardOptions() dashboard.Options { return dashboard.Options{} }

// TestDashboard_InFlightOnlyAtWorker: the overview shows a target in
// flight only on the jobs whose target is at a worker: a running job
// waiting its turn in the rotation shows none.
func TestDashboard_InFlightOnlyAtWorker(t *testing.T) {
	t.Parallel()
	b := setup(t) // 2 workers
	root := b.signIn(t, "root-key")
	a := b.submit(t, "alice", "https://example.com/a/stuck")
	c := b.submit(t, "bob", "https://example.com/c/hold", "https://example.com/c/next")
	d := b.submit(t, "alice", "https://example.com/d/stuck")
	// a and c at the workers, d queued; once c's first target is done, d
	// takes its worker, and c waits, running, with none at a worker.
	b.release()
	testkit.WaitFor(t, "c to wait its turn", func() bool {
		j, ts, _ := b.Runner.Targets(c)
		dj, _ := b.Runner.Job(d)
		return j.TargetsDone == 1 && ts[1].Status == engine.TargetPending && dj.Status == engine.StatusRunning
	})
	body := b.do(t, root, http.MethodGet, "/ui/", nil).body
	flight := map[string]bool{}
	for _, li := range strings.Split(body, `<li class="job`)[1:] {
		if m := rowRE.FindStringSubmatch(li); m != nil {
			flight[m[1]] = strings.Contains(li, `class="b-flight"`)
		}
	}
	if !flight[a] || !flight[d] || flight[c] {
		t.Fatalf("in flight: a %v, d %v (at workers), c %v (waiting): want true, true, false\n%s", flight[a], flight[d], flight[c], body)
	}
	if !strings.Contains(body, `class="legend"`) {
		t.Error("the overview has no legend for its bars")
	}
}

var resubmittedRE = regexp.MustCompile(`^/ui/jobs/([0-9a-f]{32})\?from=([0-9a-f]{32})`)

// TestDashboard_Resubmit: "Resubmit failed targets" submits a new job of
// exactly the failed targets, with their options, through Submit: the
// owner's, whoever presses it. An admin's resubmit runs under the owner's
// name (the log names the admin); a refusal of the caps is shown; another
// caller's job is answered as a missing one, a live job has nothing to
// resubmit, and a form without the CSRF token is refused.
func TestDashboard_Resubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	id, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{
		{URL: "https://example.com/r/ok"},
		{URL: "https://example.com/r/one/fail", Options: engine.Options{Grep: "g1"}},
		{URL: "https://example.com/r/two/fail", Options: engine.Options{JQ: ".x"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.waitTerminal(t, id)
	if page := b.do(t, alice, http.MethodGet, "/ui/jobs/"+id, nil).body; !strings.Contains(page, `id="resubmit"`) {
		t.Fatal("no Resubmit button on a partial job's page")
	}
	post := func(br *browser, jobID string, csrf bool) response {
		t.Helper()
		form := url.Values{}
		if csrf {
			form.Set("csrf", br.csrf)
		}
		return b.do(t, br, http.MethodPost, "/ui/jobs/"+jobID+"/resubmit", form)
	}
	wantFailed := []engine.Target{
		{URL: "https://example.com/r/one/fail", Options: engine.Options{Grep: "g1"}},
		{URL: "https://example.com/r/two/fail", Options: engine.Options{JQ: ".x"}},
	}
	check := func(who string, r response) string {
		t.Helper()
		m := resubmittedRE.FindStringSubmatch(r.header.Get("Location"))
		if r.code != http.StatusSeeOther || m == nil || m[2] != id {
			t.Fatalf("%s's resubmit: %d %q %s", who, r.code, r.header.Get("Location"), r.body)
		}
		j, ts, ok := b.Runner.Targets(m[1])
		if !ok || j.Caller != "alice" || len(ts) != len(wantFailed) {
			t.Fatalf("%s's resubmit made %+v with %d targets, want alice's with %d", who, j, len(ts), len(wantFailed))
		}
		for i, tgt := range ts {
			if tgt.URL != wantFailed[i].URL || tgt.Options != wantFailed[i].Options {
				t.Errorf("target %d: %s %+v, want %+v", i, tgt.URL, tgt.Options, wantFailed[i])
			}
		}
		return m[1]
	}
	// Without the CSRF token, and by bob: refused before anything is submitted.
	if r := post(alice, id, false); r.code != http.StatusForbidden {
		t.Fatalf("resubmit without a CSRF token: %d", r.code)
	}
	missing := b.do(t, bob, http.MethodPost, "/ui/jobs/"+missingID+"/resubmit", url.Values{"csrf": {bob.csrf}})
	if r := post(bob, id, true); r.code != http.StatusNotFound || r.body != missing.body {
		t.Fatalf("bob resubmits alice's job: %d, want the 404 of a missing job", r.code)
	}
	if jobs, _, _ := b.Runner.List("alice", engine.ListOptions{}); len(jobs) != 1 {
		t.Fatalf("a refused resubmit made a job: alice has %d", len(jobs))
	}
	first := check("alice", post(alice, id, true))
	b.waitTerminal(t, first)
	// The admin's: a new job under alice's name (the one before failed:
	// Submit reuses none that failed).
	again := post(root, id, true)
	second := check("root", again)
	if second == first || strings.Contains(again.header.Get("Location"), "reused") {
		t.Fatalf("the admin's resubmit: %s, want a new job", again.header.Get("Location"))
	}
	b.waitTerminal(t, second) // alice's: live until its targets fail, it counts against her cap below
	line := ""
	for l := range strings.SplitSeq(b.Logs.String(), "\n") {
		if strings.Contains(l, "resubmitted from the dashboard") && strings.Contains(l, "caller=root") {
			line = l
		}
	}
	for _, want := range []string{"admin=true", "owner=alice", "job_id=" + id, "new_job_id=", "targets=2"} {
		if !strings.Contains(line, want) {
			t.Errorf("the admin's resubmit log line %q lacks %q", line, want)
		}
	}
	testkit.RequireNoneOf(t, b.Logs.String(), "example.com/r/", "root-key", "alice-key")
	// A live job has nothing to resubmit.
	live := b.submit(t, "alice", "https://example.com/r/hold")
	if r := post(alice, live, true); r.code != http.StatusConflict {
		t.Fatalf("resubmit of a live job: %d", r.code)
	}
	// The caps apply: with alice's 4 live jobs, a refusal is shown.
	other, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{{URL: "https://example.com/r/three/fail"}})
	if err != nil {
		t.Fatal(err)
	}
	b.waitTerminal(t, other)
	for i := range 3 {
		b.submit(t, "alice", fmt.Sprintf("https://example.com/r/%d/hold", i))
	}
	r := post(alice, other, true)
	if r.code != http.StatusTooManyRequests || !strings.Contains(r.body, "as many live jobs as it may") {
		t.Fatalf("a resubmit past alice's cap: %d %s", r.code, r.body)
	}
}

// TestDashboard_JobsHostileQuery: hostile filters and searches (markup,
// huge, not UTF-8, bad cursors) on the jobs page answer no 5xx, echo
// nothing unescaped, and a search past 512 bytes is refused with a
// message rather than echoed.
func TestDashboard_JobsHostileQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	b.submitRun(t, "alice", "https://example.com/h/"+url.PathEscape(hostileScript))
	huge := strings.Repeat("q", 60<<10)
	for _, h := range []string{hostileScript, hostileImg, hostileJSURL, "%ff%fe", huge, "*", "..%2f..", strings.Repeat("ab", 40)} {
		for _, br := range []*browser{alice, root} {
			for _, key := range []string{"q", "caller", "status", "cursor", "id"} {
				path := "/ui/jobs?" + key + "=" + url.QueryEscape(h)
				if h == "%ff%fe" {
					path = "/ui/jobs?" + key + "=" + h
				}
				r := b.raw(t, br.cookie, http.MethodGet, path, "", nil)
				if r.code >= 500 {
					t.Errorf("GET %.80s: %d", path, r.code)
				}
				for _, bad := range []string{"<script>alert", "<img src=x", `"><img`, `href="javascript:`} {
					if strings.Contains(r.body, bad) {
						t.Errorf("GET %.80s holds unescaped %q", path, bad)
					}
				}
				if strings.Contains(r.body, huge[:1000]) {
					t.Errorf("GET %.80s echoes a 60 KiB search", path)
				}
			}
		}
	}
	if r := b.do(t, alice, http.MethodGet, "/ui/jobs?q="+url.QueryEscape(huge), nil); r.code != http.StatusBadRequest || !strings.Contains(r.body, "at most 512") {
		t.Errorf("a 60 KiB search: %d", r.code)
	}
	// The hostile URL is found, escaped.
	if r := b.do(t, alice, http.MethodGet, "/ui/jobs?q="+url.QueryEscape("script"), nil); len(listed(r.body)) != 1 {
		t.Errorf("a search for part of a hostile URL lists %d jobs", len(listed(r.body)))
	}
}

// TestDashboard_JobsStoreUnreadable: when the store cannot be read, the
// jobs page answers 503 with a message, lists nothing and names no error
// of the store's; the overview still renders, without finished jobs.
func TestDashboard_JobsStoreUnreadable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	b.submitRun(t, "alice", "https://example.com/u/1")
	if err := b.Store.Close(); err != nil {
		t.Fatal(err)
	}
	for _, br := range []*browser{alice, root} {
		for _, path := range []string{"/ui/jobs", "/ui/jobs?q=example", "/ui/jobs?q=abcd"} {
			r := b.do(t, br, http.MethodGet, path, nil)
			if r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "cannot be read right now") || len(listed(r.body)) != 0 {
				t.Errorf("GET %s with the store closed: %d", path, r.code)
			}
			if strings.Contains(strings.ToLower(r.body), "badger") || strings.Contains(r.body, "closed") {
				t.Errorf("GET %s names the store's error", path)
			}
		}
		if r := b.do(t, br, http.MethodGet, "/ui/", nil); r.code != http.StatusOK || !strings.Contains(r.body, "No finished jobs") {
			t.Errorf("the overview with the store closed: %d", r.code)
		}
	}
}

// TestDashboard_ShortIDsOfANode: on a cluster node, whose every id begins
// with its 4-byte tag, lists show hex digits 9-16 as the short id, and
// "Open a job" takes them; a prefix that several jobs share lists them to
// choose from (for their owner; for another caller it is a missing job).
func TestDashboard_ShortIDsOfANode(t *testing.T) {
	t.Parallel()
	b := setupWith(t, dashboard.Options{Config: engine.Config{NodeTag: []byte{0xd0, 0x0d, 0xfe, 0xed}}})
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	var ids []string
	for i := range 17 {
		ids = append(ids, b.submitRun(t, "alice", fmt.Sprintf("https://example.com/n/%d", i)))
	}
	page := b.do(t, alice, http.MethodGet, "/ui/jobs", nil).body
	for _, id := range ids {
		if !strings.HasPrefix(id, "d00dfeed") || engine.ShortID(id) != id[8:16] {
			t.Fatalf("job %s on a node tagged d00dfeed: short id %s", id, engine.ShortID(id))
		}
		if !strings.Contains(page, "<code>"+id[8:16]+"</code>") {
			t.Errorf("the jobs page does not show %s's short id %s", id, id[8:16])
		}
		if r := b.do(t, alice, http.MethodGet, "/ui/jobs?id="+id[8:16], nil); r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+id {
			t.Errorf("open %s: %d %s", id[8:16], r.code, r.header.Get("Location"))
		}
	}
	if strings.Contains(page, "<code>d00dfeed</code>") {
		t.Error("the jobs page shows the node's tag as a short id")
	}
	// 17 jobs, 16 hex digits: two share their 9th digit.
	byDigit := map[byte][]string{}
	for _, id := range ids {
		byDigit[id[8]] = append(byDigit[id[8]], id)
	}
	var shared []string
	for _, group := range byDigit {
		if len(group) > len(shared) {
			shared = group
		}
	}
	prefix := shared[0][:9]
	r := b.do(t, alice, http.MethodGet, "/ui/jobs?id="+prefix, nil)
	got := listed(r.body)
	slices.Sort(got)
	slices.Sort(shared)
	if r.code != http.StatusOK || !slices.Equal(got, shared) || !strings.Contains(r.body, "More than one job begins with these digits") {
		t.Fatalf("open the shared prefix %s: %d, lists %v, want the candidates %v", prefix, r.code, got, shared)
	}
	if r := b.do(t, bob, http.MethodGet, "/ui/jobs?id="+prefix, nil); r.code != http.StatusNotFound {
		t.Errorf("bob opens alice's shared prefix: %d", r.code)
	}
}

// TestDashboard_JobsPageLive: a list's first page is live (an event
// stream with its filters): a job submitted after it opened shows without
// a reload, and its progress moves. Bob's stream, even with a caller
// filter naming alice, never carries her jobs; a search or an older page
// has no stream.
func TestDashboard_JobsPageLive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	page := b.do(t, alice, http.MethodGet, "/ui/jobs?status=live", nil)
	if !strings.Contains(page.body, `data-stream="/ui/events?list=1&amp;status=live"`) {
		t.Fatalf("the jobs page has no stream: %s", page.body)
	}
	s := b.openStream(t, alice, "/ui/events?list=1&status=live")
	s.until(t, "the first update", func(ev event) bool { return ev.name == "update" && strings.Contains(ev.data, "No jobs match") })
	bobs := b.openStream(t, bob, "/ui/events?list=1&caller=alice")
	bobs.until(t, "bob's first update", func(ev event) bool { return ev.name == "update" })
	id := b.submit(t, "alice", "https://example.com/live/hold")
	s.until(t, "the new job, live", func(ev event) bool { return strings.Contains(ev.data, engine.ShortID(id)) })
	b.release()
	b.waitTerminal(t, id)
	s.until(t, "the job gone from the live list", func(ev event) bool { return ev.name == "update" && !strings.Contains(ev.data, engine.ShortID(id)) })
	own := b.submitRun(t, "bob", "https://example.com/bob/live")
	ev := bobs.until(t, "bob's own job", func(ev event) bool { return strings.Contains(ev.data, engine.ShortID(own)) })
	if strings.Contains(ev.data, id) || strings.Contains(ev.data, "alice") {
		t.Fatalf("bob's stream carries alice's job: %s", ev.data)
	}
	s.close()
	bobs.close()
	for _, path := range []string{"/ui/jobs?q=example", "/ui/jobs?cursor=abc"} {
		if r := b.do(t, alice, http.MethodGet, path, nil); strings.Contains(r.body, "data-stream") {
			t.Errorf("GET %s is live", path)
		}
	}
	if code := b.streamCode(t, alice, "/ui/events?list=1&q=example"); code != http.StatusNotFound {
		t.Errorf("a stream of a search: %d, want 404", code)
	}
}

// TestDashboard_ResubmitReused: when Submit gives back a job that is
// there (a resubmit, pressed twice, of a target whose fetch succeeded the
// second time), the page opened is that job's, and it says so; no new job
// is made.
func TestDashboard_ResubmitReused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	id := b.submit(t, "alice", "https://example.com/again/ok", "https://example.com/again/flaky")
	if j := b.waitTerminal(t, id); j.Status != engine.StatusPartial {
		t.Fatalf("the first job: %s, want partial", j.Status)
	}
	resubmit := func(br *browser) (string, string) {
		t.Helper()
		r := b.do(t, br, http.MethodPost, "/ui/jobs/"+id+"/resubmit", url.Values{"csrf": {br.csrf}})
		loc := r.header.Get("Location")
		m := resubmittedRE.FindStringSubmatch(loc)
		if r.code != http.StatusSeeOther || m == nil || m[2] != id {
			t.Fatalf("resubmit: %d %q", r.code, loc)
		}
		return m[1], loc
	}
	first, loc := resubmit(alice)
	if strings.Contains(loc, "reused") {
		t.Fatalf("the first resubmit: %s, want a new job", loc)
	}
	if j := b.waitTerminal(t, first); j.Status != engine.StatusDone {
		t.Fatalf("the resubmitted job: %s, want done (the fetch succeeds the second time)", j.Status)
	}
	page := b.do(t, alice, http.MethodGet, loc, nil).body
	if !strings.Contains(page, "Resubmitted: the failed targets of job") {
		t.Errorf("a new job's page does not say it was resubmitted: %s", page)
	}
	// Pressed again, by the owner and by an admin: Submit gives back the
	// done job of the same targets.
	for _, br := range []*browser{alice, root} {
		again, loc := resubmit(br)
		if again != first || !strings.Contains(loc, "reused=1") {
			t.Fatalf("the resubmit pressed again: %s, want job %s reused", loc, first)
		}
		page := b.do(t, br, http.MethodGet, loc, nil)
		if page.code != http.StatusOK || !strings.Contains(page.body, `id="resubmitted"`) ||
			!strings.Contains(page.body, "are already in this job (the same targets, submitted before): it is shown instead of a new one") {
			t.Fatalf("the reused job's page: %d, does not say it was reused: %s", page.code, page.body)
		}
	}
	if jobs, _, _ := b.Runner.List("alice", engine.ListOptions{}); len(jobs) != 2 {
		t.Fatalf("alice has %d jobs, want 2 (the resubmit reused the second)", len(jobs))
	}
	if !strings.Contains(b.Logs.String(), "reused=true") {
		t.Error("no log line says that the resubmit reused a job")
	}
}

// TestDashboard_AmbiguousShortID: plain ids (a single node, no tag) that
// share their first 4+ digits: "Open a job" with those digits lists the
// candidates the session may see (a caller's own, an admin's every
// caller's), and with enough digits to tell them apart opens the one.
func TestDashboard_AmbiguousShortID(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	ids := []string{
		"7d1181fb00000000000000000000a001", // alice
		"7d1181fc00000000000000000000a002", // alice
		"7d11aa0000000000000000000000a003", // alice
		"7d11bb0000000000000000000000b001", // bob
		"7d2000000000000000000000000a0004", // alice
	}
	owners := []string{"alice", "alice", "alice", "bob", "alice"}
	fillJobs(t, store, len(ids), testkit.Start, func(i int) string { return ids[i] }, func(i int) string { return owners[i] })
	b := setupOn(t, store, dashboard.Options{})
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	for _, c := range []struct {
		who    string
		br     *browser
		prefix string
		want   []string // the candidates; one: opened
	}{
		{"alice", alice, "7d11", []string{ids[0], ids[1], ids[2]}},
		{"alice", alice, "7D1181F", []string{ids[0], ids[1]}},
		{"alice", alice, "7d1181fc", []string{ids[1]}},
		{"alice", alice, "7d11a", []string{ids[2]}},
		{"bob", bob, "7d11", []string{ids[3]}},
		{"root", root, "7d11", []string{ids[0], ids[1], ids[2], ids[3]}},
		{"root", root, "7d1", nil}, // too short: no search
	} {
		r := b.do(t, c.br, http.MethodGet, "/ui/jobs?id="+url.QueryEscape(c.prefix), nil)
		switch len(c.want) {
		case 0:
			if r.code != http.StatusNotFound {
				t.Errorf("%s opens %s: %d, want 404", c.who, c.prefix, r.code)
			}
		case 1:
			if r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+c.want[0] {
				t.Errorf("%s opens %s: %d %q, want job %s", c.who, c.prefix, r.code, r.header.Get("Location"), c.want[0])
			}
		default:
			got := listed(r.body)
			slices.Sort(got)
			if r.code != http.StatusOK || !slices.Equal(got, c.want) || !strings.Contains(r.body, "More than one job begins with these digits: choose one.") {
				t.Errorf("%s opens %s: %d, lists %v, want the candidates %v", c.who, c.prefix, r.code, got, c.want)
			}
			for _, id := range c.want {
				if !strings.Contains(r.body, "<code>"+id[:8]+"</code>") {
					t.Errorf("%s opens %s: candidate %s is not shown by its short id", c.who, c.prefix, id)
				}
			}
		}
	}
	// The search field finds the same candidates, newest first.
	r := b.do(t, alice, http.MethodGet, "/ui/jobs?q=7d11", nil)
	if got := listed(r.body); r.code != http.StatusOK || !slices.Equal(got, []string{ids[2], ids[1], ids[0]}) {
		t.Errorf("alice searches 7d11: %d, lists %v", r.code, got)
	}
}

// TestDashboard_URLSearchScansNewest5000: with more than 5,000 jobs
// stored, a search by URL reads the newest 5,000 only and says so: a job
// among them is found, the one just older is not.
func TestDashboard_URLSearchScansNewest5000(t *testing.T) {
	t.Parallel()
	const n = 5_100
	store := enginetest.OpenStore(t, "")
	fillJobs(t, store, n, testkit.Start, nil, func(int) string { return "alice" })
	b := setupOn(t, store, dashboard.Options{})
	for _, br := range []*browser{b.signIn(t, "alice-key"), b.signIn(t, "root-key")} {
		// Job n-5000 is the 5,000th newest; job n-5001 the next older.
		in := b.do(t, br, http.MethodGet, "/ui/jobs?q="+url.QueryEscape(fmt.Sprintf("bench/%d/a", n-5000)), nil)
		if got := listed(in.body); in.code != http.StatusOK || len(got) != 1 {
			t.Fatalf("search for the 5,000th newest job's URL: %d, lists %v", in.code, got)
		}
		out := b.do(t, br, http.MethodGet, "/ui/jobs?q="+url.QueryEscape(fmt.Sprintf("bench/%d/a", n-5001)), nil)
		if got := listed(out.body); out.code != http.StatusOK || len(got) != 0 {
			t.Fatalf("search for the 5,001st newest job's URL: %d, lists %v", out.code, got)
		}
		for _, r := range []response{in, out} {
			if !strings.Contains(r.body, "Searched the URLs of the newest 5,000 jobs only (a search reads at most 5,000): filter by status or caller to reach older ones.") {
				t.Errorf("the search does not say it read the newest 5,000 jobs only: %s", r.body)
			}
		}
	}
	// A narrower list (a status none of them has) is read whole.
	r := b.do(t, b.signIn(t, "alice-key"), http.MethodGet, "/ui/jobs?status=failed&q=bench", nil)
	if !strings.Contains(r.body, "Searched the URLs of all 0 jobs.") {
		t.Errorf("a search of no job: %s", r.body)
	}
}

// TestDashboard_JobsCrowd: a crowd of sessions lists, pages and searches
// (by URL and id prefix) while alice's jobs come, run and end: every answer
// is 200, or 429 for a search by URL past the two that run at once, never
// a 5xx; bob's pages never show a job of alice's, by any of them; and once
// the jobs have ended, the admin's search finds every one of them.
func TestDashboard_JobsCrowd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	own := b.submitRun(t, "bob", "https://bob.example/page")
	first := b.submitRun(t, "alice", "https://alice-secret.example/0")
	get := func(br *browser, path string) (int, string, error) {
		req, err := http.NewRequest(http.MethodGet, b.url+path, nil)
		if err != nil {
			return 0, "", err
		}
		req.AddCookie(br.cookie)
		resp, err := b.client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	bobPaths := []string{"/ui/jobs", "/ui/jobs?caller=alice", "/ui/jobs?caller=*", "/ui/jobs?q=alice-secret", "/ui/jobs?q=" + first[:4],
		"/ui/jobs?q=" + first[:10], "/ui/jobs?status=done&q=example", "/ui/jobs?id=" + engine.ShortID(first)}
	rootPaths := []string{"/ui/jobs", "/ui/jobs?q=alice-secret", "/ui/jobs?caller=alice&q=secret", "/ui/jobs?status=terminal", "/ui/"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served atomic.Int64
	crowd := func(br *browser, paths []string, who string, leaks bool) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			path := paths[i%len(paths)]
			code, body, err := get(br, path)
			if err != nil {
				t.Errorf("%s %s: %v", who, path, err)
				return
			}
			served.Add(1)
			switch {
			case code == http.StatusTooManyRequests && strings.Contains(path, "q="):
			case code == http.StatusNotFound && strings.Contains(path, "id="):
			case code != http.StatusOK:
				t.Errorf("%s %s: %d", who, path, code)
				return
			}
			if leaks && (strings.Contains(body, "alice-secret.example") || strings.Contains(body, `class="caller">alice`)) {
				t.Errorf("%s %s shows a job of alice's", who, path)
				return
			}
		}
	}
	for range 3 {
		wg.Add(2)
		go crowd(bob, bobPaths, "bob", true)
		go crowd(root, rootPaths, "root", false)
	}
	ids := []string{first}
	for i := 1; i < 12; i++ {
		ids = append(ids, b.submitRun(t, "alice", "https://alice-secret.example/"+strconv.Itoa(i)))
	}
	for served.Load() < 200 && !t.Failed() {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	got := listed(b.do(t, root, http.MethodGet, "/ui/jobs?q=alice-secret", nil).body)
	for _, id := range ids {
		if !slices.Contains(got, id) {
			t.Errorf("the admin's search lacks alice's job %s", id)
		}
	}
	if got := listed(b.do(t, bob, http.MethodGet, "/ui/jobs", nil).body); !slices.Equal(got, []string{own}) {
		t.Errorf("bob's list: %v, want only his own %s", got, own)
	}
}

// TestDashboard_JobsPageShortByTheScan: a status few stored jobs have
// gives pages cut short by engine.ListScan: such a page says how many
// jobs it looked at and links to the older ones, and following "Older →"
// lists every match, newest first.
func TestDashboard_JobsPageShortByTheScan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	now := b.Clock.Now().UnixNano()
	n := engine.ListScan + engine.ListScan/2
	var failed []string
	for i := range n { // i = 0 is the newest
		created := now - int64(i+1)*int64(time.Millisecond)
		j := persistence.JobRecord{ID: fmt.Sprintf("%032x", i+1), Caller: "alice", Status: persistence.StatusDone,
			Settled: true, TargetsTotal: 1, TargetsDone: 1, Created: created, Lease: now, Started: created, Ended: created}
		j.Key[0], j.Key[1] = byte(i>>8), byte(i)
		if i >= n-3 { // the three oldest failed: past the first page's scan
			j.Status, j.TargetsDone, j.TargetsFailed = persistence.StatusFailed, 0, 1
			failed = append(failed, j.ID)
		}
		if err := b.Store.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/scan"}}); err != nil {
			t.Fatal(err)
		}
	}
	first := b.do(t, alice, http.MethodGet, "/ui/jobs?status=failed", nil)
	if got := listed(first.body); len(got) != 0 {
		t.Fatalf("the first page lists %d jobs, want none among the newest %d", len(got), engine.ListScan)
	}
	if !strings.Contains(first.body, "looked at 1,000 jobs") || nextRE.FindStringSubmatch(first.body) == nil {
		t.Fatalf("a page cut short by the scan says neither how many it looked at nor links on:\n%s", first.body)
	}
	got, pages := b.allPages(t, alice, "/ui/jobs?status=failed")
	if !slices.Equal(got, failed) || pages != 2 {
		t.Fatalf("status=failed lists %v on %d pages, want %v on 2", got, pages, failed)
	}
}
