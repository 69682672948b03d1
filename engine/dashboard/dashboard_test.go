package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDashboard_StaticFilesOnly: the embedded assets are served, but no
// directory under /ui/static/ is listed: the root and every path that
// names a directory is 404 (once the mux's redirects to a clean path are
// followed), and no answer names the files.
func TestDashboard_StaticFilesOnly(t *testing.T) {
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
