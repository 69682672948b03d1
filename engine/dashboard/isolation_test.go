package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestDashboard_Isolation: bob sees nothing of alice's jobs, not even by
// guessing their URLs; another caller's job is answered exactly like a
// missing one. The admin sees and cancels every job, and the cancel is
// logged with its name and the job id, never a key or a URL.
func TestDashboard_Isolation(t *testing.T) {
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
		if j, _ := b.runner.Job(id); j.Status == "cancelled" {
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
		if j, _ := b.runner.Job(id); j.Status != "cancelled" {
			t.Fatalf("after the admin's cancel: %s", j.Status)
		}
		logs := b.logs.String()
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
