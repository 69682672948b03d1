package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestDashboard_EscapesHostileText: hostile URLs, error texts, hints,
// contents and meta are shown escaped on every page (overview, job,
// result) and in the job's stream, for the owner and the admin; every
// page, an error page too, carries a strict CSP, an HTML Content-Type and
// nosniff, and a 404 never echoes a hostile path.
func TestDashboard_EscapesHostileText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	hostileURLs := []string{
		"https://hostile.example/ok?q=" + hostileScript + "&x=" + hostileImg,
		hostileJSURL,
		"https://hostile.example/xss-err",
		"https://hostile.example/ok/'onmouseover='alert(1)",
	}
	id := b.submit(t, "alice", hostileURLs...)
	b.waitTerminal(t, id)
	raw := []string{"<script>alert", "<img src=x", `"><img`, `href="javascript:`, `src="javascript:`, `'onmouseover='`}
	check := func(who, path string, r response) {
		t.Helper()
		if r.code != http.StatusOK {
			t.Fatalf("%s %s: %d", who, path, r.code)
		}
		for _, bad := range raw {
			if strings.Contains(r.body, bad) {
				t.Errorf("%s %s holds unescaped %q", who, path, bad)
			}
		}
		csp := r.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s %s CSP %q lacks %q", who, path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "*") {
			t.Errorf("%s %s CSP %q is weak", who, path, csp)
		}
		if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s %s Content-Type %q", who, path, ct)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s without nosniff", who, path)
		}
	}
	for _, br := range []*browser{alice, root} {
		job := b.do(t, br, http.MethodGet, "/ui/jobs/"+id, nil)
		check("job page", id, job)
		// Not vacuous: the hostile text is there, escaped.
		for _, want := range []string{"&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;", "javascript:alert(document.cookie)", "boom "} {
			if !strings.Contains(job.body, want) {
				t.Errorf("job page lacks the escaped %q", want)
			}
		}
		for i := range 2 {
			res := b.do(t, br, http.MethodGet, fmt.Sprintf("/ui/jobs/%s/%d", id, i), nil)
			check("result page", fmt.Sprint(i), res)
			if !strings.Contains(res.body, "content &lt;script&gt;") {
				t.Errorf("result %d lacks the escaped content", i)
			}
		}
		check("overview", "/ui/", b.do(t, br, http.MethodGet, "/ui/", nil))
		s := b.openStream(t, br, "/ui/events?job="+id)
		ev := s.until(t, "the job's update", func(ev event) bool { return ev.name == "update" && strings.Contains(ev.data, "boom") })
		for _, bad := range raw {
			if strings.Contains(ev.data, bad) {
				t.Errorf("job stream holds unescaped %q", bad)
			}
		}
		s.close()
	}
	// Error pages carry the CSP too, and never echo a hostile path.
	r := b.do(t, alice, http.MethodGet, "/ui/"+url.PathEscape(hostileScript), nil)
	if r.code != http.StatusNotFound || strings.Contains(r.body, "<script>alert") || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("404 page: %d %q", r.code, r.header.Get("Content-Security-Policy"))
	}
}
