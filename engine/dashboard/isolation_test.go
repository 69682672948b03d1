package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
)

// TestDashboard_Isolation: bob sees nothing of alice's jobs, not even by
// guessing their URLs; another caller's job is answered exactly like a
// missing one. The admin sees and cancels every job, and the cancel is
// logged with its name and the job id, never a key or a URL.
func TestDashboard_Isolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	secretURL := "https://alice.example/secret/hold"
	id := b.submit(t, "alice", secretURL, "https://alice.example/b")

	t.Run("Bob", func(t *testing.T) {
		page := b.do(t, bob, http.MethodGet, "/ui/", nil)
		if strings.Contains(page.body, id) || strings.Contains(page.body, "alice") {
			t.Fatalf("bob's overview shows alice's job: %s", page.body)
		}
		if strings.Contains(page.body, "Workers busy") || strings.Contains(page.body, "Live jobs <") || strings.Contains(page.body, "<svg viewBox=\"0 0 300 60\"") {
			t.Fatalf("bob's overview shows the runner's state or charts: %s", page.body)
		}
		missing := b.do(t, bob, http.MethodGet, "/ui/jobs/"+missingID, nil)
		for _, path := range []string{"/ui/jobs/" + id, "/ui/jobs/" + id + "/0", "/ui/jobs/" + id + "/1", "/ui/events?job=" + id} {
			r := b.do(t, bob, http.MethodGet, path, nil)
			if r.code != http.StatusNotFound || r.body != missing.body {
				t.Errorf("bob GET %s: %d, want the 404 of a missing job: %s", path, r.code, r.body)
			}
			if strings.Contains(r.body, "secret") {
				t.Errorf("bob GET %s shows alice's URL", path)
			}
		}
		r := b.do(t, bob, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {bob.csrf}})
		if r.code != http.StatusNotFound {
			t.Fatalf("bob cancels alice's job: %d", r.code)
		}
		if j, _ := b.Runner.Job(id); j.Status == "cancelled" {
			t.Fatal("bob cancelled alice's job")
		}
	})
	t.Run("Alice", func(t *testing.T) {
		page := b.do(t, alice, http.MethodGet, "/ui/", nil)
		if !strings.Contains(page.body, id) {
			t.Fatalf("alice's overview lacks her job: %s", page.body)
		}
		// Bob's job that ended before any page looked is listed for bob
		// (Runner.List), never for alice.
		bobs := b.submit(t, "bob", "https://bob.example/x")
		b.waitTerminal(t, bobs)
		if strings.Contains(b.do(t, alice, http.MethodGet, "/ui/", nil).body, bobs) {
			t.Fatal("alice's overview shows bob's finished job")
		}
		if body := b.do(t, bob, http.MethodGet, "/ui/", nil).body; !strings.Contains(body, bobs) || !strings.Contains(body, `s-done">done`) {
			t.Fatalf("bob's overview lacks his finished job: %s", body)
		}
		job := b.do(t, alice, http.MethodGet, "/ui/jobs/"+id, nil)
		if job.code != http.StatusOK || !strings.Contains(job.body, secretURL) || !strings.Contains(job.body, `id="cancel"`) {
			t.Fatalf("alice's job page: %d %s", job.code, job.body)
		}
	})
	t.Run("Admin", func(t *testing.T) {
		page := b.do(t, root, http.MethodGet, "/ui/", nil)
		for _, want := range []string{id, "alice", "Workers busy", "Hook panics", `class="badge">admin`} {
			if !strings.Contains(page.body, want) {
				t.Errorf("admin overview lacks %q", want)
			}
		}
		job := b.do(t, root, http.MethodGet, "/ui/jobs/"+id, nil)
		if job.code != http.StatusOK || !strings.Contains(job.body, secretURL) {
			t.Fatalf("admin job page: %d", job.code)
		}
		r := b.do(t, root, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {root.csrf}})
		if r.code != http.StatusSeeOther {
			t.Fatalf("admin cancel: %d %s", r.code, r.body)
		}
		if j, _ := b.Runner.Job(id); j.Status != "cancelled" {
			t.Fatalf("after the admin's cancel: %s", j.Status)
		}
		logs := b.Logs.String()
		var line string
		for l := range strings.SplitSeq(logs, "\n") {
			if strings.Contains(l, "cancelled from the dashboard") {
				line = l
			}
		}
		if !strings.Contains(line, "caller=root") || !strings.Contains(line, "admin=true") || !strings.Contains(line, "job_id="+id) {
			t.Fatalf("cancel log line %q: want the admin's name and the job id", line)
		}
		for _, secret := range []string{"root-key", "alice-key", "bob-key", "alice.example", alice.cookie.Value, root.csrf} {
			if strings.Contains(logs, secret) {
				t.Errorf("the log holds %q", secret)
			}
		}
	})
}

// TestDashboard_NotYoursIsMissing: for bob, alice's live and ended jobs
// are answered exactly as a missing job on every page, result, stream and
// cancel (with or without a CSRF token), and his overview and stream never
// mention them as they move; the admin sees both, their URLs and results.
func TestDashboard_NotYoursIsMissing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	live := b.submit(t, "alice", "https://alice-secret.example/hold", "https://alice-secret.example/b")
	ended := b.submit(t, "alice", "https://alice-secret.example/done", "https://hostile.example/xss-err")
	b.waitTerminal(t, ended)
	missing := missingID

	same := func(path string, got, want response) {
		t.Helper()
		if got.code != want.code || got.body != want.body || got.header.Get("Content-Type") != want.header.Get("Content-Type") ||
			got.header.Get("Location") != want.header.Get("Location") {
			t.Errorf("bob %s: %d %q, missing job: %d %q", path, got.code, got.header.Get("Location"), want.code, want.header.Get("Location"))
		}
		if strings.Contains(got.body, "alice") {
			t.Errorf("bob %s shows something of alice's", path)
		}
	}
	for _, id := range []string{live, ended} {
		for _, suffix := range []string{"", "/0", "/1", "/2", "/-1", "/x", "/99999999999999999999", "/cancel"} {
			same("/ui/jobs/"+id+suffix, b.do(t, bob, http.MethodGet, "/ui/jobs/"+id+suffix, nil), b.do(t, bob, http.MethodGet, "/ui/jobs/"+missing+suffix, nil))
		}
		// The "open a job" form redirects any well-formed id alike.
		if r := b.do(t, bob, http.MethodGet, "/ui/jobs?id="+id, nil); r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+id {
			t.Errorf("bob /ui/jobs?id=%s: %d %v", id, r.code, r.header)
		}
		same("events?job="+id, b.do(t, bob, http.MethodGet, "/ui/events?job="+id, nil), b.do(t, bob, http.MethodGet, "/ui/events?job="+missing, nil))
		same("cancel "+id, b.do(t, bob, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {bob.csrf}}),
			b.do(t, bob, http.MethodPost, "/ui/jobs/"+missing+"/cancel", url.Values{"csrf": {bob.csrf}}))
		// Without a CSRF token a guess is refused before it is looked up.
		same("cancel no csrf "+id, b.do(t, bob, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{}),
			b.do(t, bob, http.MethodPost, "/ui/jobs/"+missing+"/cancel", url.Values{}))
	}
	if j, _ := b.Runner.Job(live); j.Status == engine.StatusCancelled {
		t.Fatal("bob cancelled alice's job")
	}
	// Bob's overview and stream never mention alice's jobs, as they move.
	s := b.openStream(t, bob, "/ui/events")
	ev := s.until(t, "bob's first update", func(ev event) bool { return ev.name == "update" })
	b.release()
	b.waitTerminal(t, live)
	for _, body := range []string{ev.data, b.do(t, bob, http.MethodGet, "/ui/", nil).body} {
		for _, leak := range []string{live, ended, live[:8], ended[:8], "alice", "Workers busy"} {
			if strings.Contains(body, leak) {
				t.Errorf("bob's overview shows %q", leak)
			}
		}
	}
	// The admin sees both, their URLs and the result.
	for _, id := range []string{live, ended} {
		if r := b.do(t, root, http.MethodGet, "/ui/jobs/"+id, nil); r.code != http.StatusOK || !strings.Contains(r.body, "alice-secret.example") {
			t.Errorf("admin job page %s: %d", id, r.code)
		}
	}
	if r := b.do(t, root, http.MethodGet, "/ui/jobs/"+ended+"/0", nil); r.code != http.StatusOK || !strings.Contains(r.body, "alice-secret.example/done") {
		t.Errorf("admin result page: %d", r.code)
	}
	if r := b.do(t, root, http.MethodGet, "/ui/", nil); !strings.Contains(r.body, live[:8]) {
		t.Error("admin overview lacks alice's job")
	}
}
