package dashboard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestDashboard_StaticFilesOnly: the embedded assets are served, but no
// directory under /ui/static/ is listed: the root and every path that
// names a directory is 404 (once the mux's redirects to a clean path are
// followed), and no answer names the files.
func TestDashboard_StaticFilesOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for file, ctype := range map[string]string{"app.css": "text/css", "app.js": "text/javascript", "icon.svg": "image/svg+xml"} {
		r := b.do(t, nil, http.MethodGet, "/ui/static/"+file, nil)
		if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), ctype) || r.body == "" {
			t.Errorf("GET /ui/static/%s: %d %s, %d bytes", file, r.code, r.header.Get("Content-Type"), len(r.body))
		}
	}
	for _, p := range []string{"/ui/static/", "/ui/static", "/ui/static/.", "/ui/static/./", "/ui/static//", "/ui/static/x/..", "/ui/static/x/../", "/ui/static/index.html", "/ui/static/missing.css"} {
		// The mux redirects an unclean path (and /ui/static to
		// /ui/static/): follow, a few hops at most.
		at, r := p, b.do(t, nil, http.MethodGet, p, nil)
		for hops := 0; hops < 3 && (r.code == http.StatusMovedPermanently || r.code == http.StatusTemporaryRedirect); hops++ {
			at = r.header.Get("Location")
			r = b.do(t, nil, http.MethodGet, at, nil)
		}
		if r.code != http.StatusNotFound {
			t.Errorf("GET %s (at %s): %d, want 404", p, at, r.code)
		}
		for _, file := range []string{"app.css", "app.js", "icon.svg"} {
			if strings.Contains(r.body, file) {
				t.Errorf("GET %s (at %s) lists %s: %s", p, at, file, r.body)
			}
		}
	}
}

// TestDashboard_NilBody: a request without a Body (nil: not read off a
// connection) panics nowhere: a sign-in without a key is 401, a cancel
// without its CSRF token 403.
func TestDashboard_NilBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/hold")
	for _, tc := range []struct {
		path   string
		cookie bool
		code   int
	}{
		{"/ui/signin", false, http.StatusUnauthorized},
		{"/ui/signout", true, http.StatusForbidden},
		{"/ui/jobs/" + id + "/cancel", true, http.StatusForbidden},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://siftbatch"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // so that the form is read
		if tc.cookie {
			req.AddCookie(alice.cookie)
		}
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("POST %s without a body: %d, want %d", tc.path, rec.Code, tc.code)
		}
	}
}

// TestDashboard_StaticNonUTF8Path: a static path that is not UTF-8 is a
// client error, never a 5xx (http.FileServerFS on the embedded files
// would answer 500), signed in or not.
func TestDashboard_StaticNonUTF8Path(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	for _, p := range []string{"/ui/static/%ff", "/ui/static/%c3%28.css"} {
		for _, c := range []*http.Cookie{alice.cookie, {Name: "other", Value: "x"}} {
			if got := rawGET(t, b.url, p, c); strings.HasPrefix(got, "5") {
				t.Errorf("GET %s (cookie %s): %q", p, c.Name, got)
			}
		}
	}
}

// TestDashboard_HostileInput: hostile ids, indexes and paths (huge, not
// UTF-8, traversals, markup, respellings of an id) answer no 5xx, serve
// no file outside the static ones, echo nothing; huge forms and wrong
// content types on every POST are refused; none of it signs alice out.
func TestDashboard_HostileInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/a")
	b.waitTerminal(t, id)
	huge := strings.Repeat("a", 60<<10)
	hostile := []string{huge, "%ff%fe%00", "..%2f..%2f..%2fetc%2fpasswd", "%2e%2e", "<script>", strings.ToUpper(id), id + "%00", " " + id, id + "/../" + id}
	for _, h := range hostile {
		for _, path := range []string{"/ui/jobs/" + h, "/ui/jobs/" + id + "/" + h, "/ui/jobs/" + h + "/0", "/ui/jobs?id=" + h, "/ui/events?job=" + h, "/ui/static/" + h, "/ui/" + h} {
			r := b.raw(t, alice.cookie, http.MethodGet, path, "", nil)
			if r.code >= 500 || r.code == http.StatusOK && !strings.HasPrefix(path, "/ui/jobs/"+id+"/") && !strings.HasPrefix(path, "/ui/jobs/"+id+"%") {
				// The only 200s are the job's own pages reached by
				// a path the server cleans.
				if !(r.code == http.StatusOK && strings.Contains(path, id+"/../"+id)) {
					t.Errorf("GET %.80s: %d", path, r.code)
				}
			}
			if strings.Contains(r.body, "root:x:") || strings.Contains(r.body, "package dashboard") || len(h) > 1000 && strings.Contains(r.body, huge[:1000]) {
				t.Errorf("GET %.80s leaked or echoed: %.200s", path, r.body)
			}
		}
		r := b.raw(t, alice.cookie, http.MethodPost, "/ui/jobs/"+h+"/cancel", "csrf="+url.QueryEscape(alice.csrf), nil)
		if r.code >= 500 || r.code == http.StatusOK {
			t.Errorf("POST cancel %.80s: %d", h, r.code)
		}
	}
	// Path traversal out of the static files, raw on the wire.
	for _, p := range []string{"/ui/static/../../../../etc/passwd", "/ui/static/..%2f..%2f..%2fetc%2fpasswd", "/ui/static/%2e%2e/%2e%2e/go.mod", "/ui/static/../dashboard.go", "/ui/static/../templates/layout.html"} {
		conn := rawGET(t, b.url, p, alice.cookie)
		if strings.Contains(conn, "root:x:") || strings.Contains(conn, "module github.com") || strings.Contains(conn, "package dashboard") || strings.Contains(conn, `{{define`) {
			t.Errorf("GET %s served a file outside static/", p)
		}
	}
	// Huge forms on every POST: refused, no 500.
	big := "csrf=" + url.QueryEscape(alice.csrf) + "&pad=" + strings.Repeat("x", 1<<20)
	for _, p := range []string{"/ui/jobs/" + id + "/cancel", "/ui/signin"} {
		if r := b.raw(t, alice.cookie, http.MethodPost, p, big, nil); r.code >= 500 || r.code == http.StatusSeeOther {
			t.Errorf("POST %s with a 1 MiB form: %d", p, r.code)
		}
	}
	// Wrong content types.
	for _, ct := range []string{"application/json", "multipart/form-data; boundary=x", "text/plain"} {
		r := b.raw(t, alice.cookie, http.MethodPost, "/ui/jobs/"+id+"/cancel", `{"csrf":"`+alice.csrf+`"}`, map[string]string{"Content-Type": ct})
		if r.code != http.StatusForbidden {
			t.Errorf("cancel as %s: %d", ct, r.code)
		}
	}
	if r := b.do(t, alice, http.MethodGet, "/ui/", nil); signedOut(r) {
		t.Fatal("hostile input signed alice out")
	}
}

// rawGET sends path byte for byte (no client cleaning) and returns the
// whole answer.
func rawGET(t testing.TB, base, path string, c *http.Cookie) string {
	t.Helper()
	u, _ := url.Parse(base)
	req, err := http.NewRequest(http.MethodGet, base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path
	req.Host = u.Host
	req.AddCookie(c)
	resp, err := (&http.Client{Timeout: testkit.Deadline, Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return fmt.Sprint(resp.StatusCode) + "\n" + string(data)
}

// TestDashboard_LogsCarryNoSecrets: sign-ins (wrong keys, a forged line),
// pages, an admin's cancel, a panicked target and a sign-out are logged
// with names and job ids only: no key, cookie, CSRF token, URL, host,
// panic value, client address or forged line; a panicked target shows as
// an internal error.
func TestDashboard_LogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wrongKey := "WRONG-KEY-d41d8cd98f00"
	b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {wrongKey}})
	b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {"\xff" + wrongKey + "\n level=ERROR msg=forged"}})
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	secretURL := "https://log-secret.example/path?token=abc/hold"
	id := b.submit(t, "alice", secretURL, "https://hostile.example/panic", "https://hostile.example/xss-err")
	b.do(t, alice, http.MethodGet, "/ui/jobs/"+id, nil)
	b.do(t, root, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {root.csrf}})
	b.waitTerminal(t, id)
	panicJob := b.submit(t, "bob", "https://hostile.example/panic")
	b.waitTerminal(t, panicJob)
	bob := b.signIn(t, "bob-key")
	page := b.do(t, bob, http.MethodGet, "/ui/jobs/"+panicJob, nil)
	if !strings.Contains(page.body, "internal error") || strings.Contains(page.body, "PANIC-VALUE") || strings.Contains(page.body, "panic-secret") {
		t.Errorf("the job page of a panicked target: %s", page.body)
	}
	b.do(t, alice, http.MethodPost, "/ui/signout", url.Values{"csrf": {alice.csrf}})
	logs := b.Logs.String()
	if !strings.Contains(logs, "dashboard sign-in") || !strings.Contains(logs, "job_id="+id) {
		t.Fatalf("the dashboard logged nothing to check: %s", logs)
	}
	testkit.RequireNoneOf(t, logs, "alice-key", "root-key", "bob-key", wrongKey, alice.cookie.Value, root.cookie.Value, bob.cookie.Value,
		alice.csrf, root.csrf, "log-secret", "hostile.example", "PANIC-VALUE", "panic-secret", "127.0.0.1", "msg=forged")
}
