package dashboard_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/dashboard"
)

func TestDashboard_SignIn(t *testing.T) {
	t.Run("FormWhenSignedOut", func(t *testing.T) {
		b := setup(t)
		r := b.do(t, nil, http.MethodGet, "/ui/", nil)
		if r.code != http.StatusOK || !strings.Contains(r.body, `action="/ui/signin"`) || !strings.Contains(r.body, `type="password"`) {
			t.Fatalf("GET /ui/ signed out: %d %s", r.code, r.body)
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Fatalf("CSP %q", csp)
		}
		for _, path := range []string{"/ui/jobs/" + missingID, "/ui/jobs?id=" + missingID} {
			if r := b.do(t, nil, http.MethodGet, path, nil); r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
				t.Errorf("GET %s signed out: %d %v", path, r.code, r.header)
			}
		}
		if r := b.do(t, nil, http.MethodGet, "/ui/events", nil); r.code != http.StatusUnauthorized {
			t.Errorf("events signed out: %d", r.code)
		}
	})
	t.Run("WrongKey", func(t *testing.T) {
		b := setup(t)
		for _, key := range []string{"", "nobody", "alice-key "} {
			r := b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {key}})
			if r.code != http.StatusUnauthorized || r.header.Get("Set-Cookie") != "" || !strings.Contains(r.body, "not known") {
				t.Errorf("key %q: %d %v %s", key, r.code, r.header, r.body)
			}
		}
	})
	t.Run("Cookie", func(t *testing.T) {
		b := setup(t)
		r := b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {"alice-key"}})
		if r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
			t.Fatalf("sign in: %d %v", r.code, r.header)
		}
		c := sessionCookie(t, r)
		raw := r.header.Get("Set-Cookie")
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.Secure {
			t.Errorf("cookie %q: want HttpOnly, SameSite=Strict, Path=/ui/, not Secure over plain HTTP", raw)
		}
		if c.MaxAge != int((12 * time.Hour).Seconds()) {
			t.Errorf("cookie %q: Max-Age %d, want 12h", raw, c.MaxAge)
		}
		if strings.Contains(c.Value, "alice") || len(c.Value) < 40 {
			t.Errorf("cookie value %q: want a random token, never the key", c.Value)
		}
		page := b.do(t, &browser{cookie: c}, http.MethodGet, "/ui/", nil)
		if page.code != http.StatusOK || !strings.Contains(page.body, "Your live jobs") || !strings.Contains(page.body, ">alice") {
			t.Fatalf("overview: %d %s", page.code, page.body)
		}
		if strings.Contains(page.body, "alice-key") {
			t.Fatal("the overview shows the key")
		}
		// Two sign-ins are two sessions.
		if other := sessionCookie(t, b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {"alice-key"}})); other.Value == c.Value {
			t.Fatal("two sign-ins got the same token")
		}
	})
	t.Run("Secure", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			tlsProxy bool
			tls      bool
		}{{"TLS", false, true}, {"TLSProxy", true, false}} {
			t.Run(tc.name, func(t *testing.T) {
				b := setupWith(t, dashboard.Options{TLSProxy: tc.tlsProxy, SessionTTL: time.Hour})
				req := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader("key=alice-key"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if tc.tls {
					req.TLS = &tls.ConnectionState{}
				}
				rec := httptest.NewRecorder()
				b.handler.ServeHTTP(rec, req)
				c := sessionCookie(t, response{code: rec.Code, header: rec.Header()})
				if !c.Secure || c.MaxAge != 3600 {
					t.Fatalf("cookie %q: want Secure, Max-Age 3600", rec.Header().Get("Set-Cookie"))
				}
			})
		}
	})
}

// TestDashboard_Throttle: 5 sign-in attempts a minute per client address,
// right or wrong; then 429 with Retry-After, even for the right key;
// another address is not held up; an attempt comes back every 12 s.
func TestDashboard_Throttle(t *testing.T) {
	b := setup(t)
	signIn := func(addr, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader("key="+key))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr + ":40000"
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		return rec
	}
	for i := range 5 {
		if rec := signIn("192.0.2.1", "wrong"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i+1, rec.Code)
		}
	}
	rec := signIn("192.0.2.1", "alice-key")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Set-Cookie") != "" {
		t.Fatalf("6th attempt: %d %v", rec.Code, rec.Header())
	}
	if s, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || s < 1 || s > 13 {
		t.Fatalf("Retry-After %q", rec.Header().Get("Retry-After"))
	}
	if rec := signIn("192.0.2.2", "alice-key"); rec.Code != http.StatusSeeOther {
		t.Fatalf("another address: %d", rec.Code)
	}
	b.clock.Advance(12 * time.Second)
	if rec := signIn("192.0.2.1", "alice-key"); rec.Code != http.StatusSeeOther {
		t.Fatalf("12s later: %d", rec.Code)
	}
	if rec := signIn("192.0.2.1", "alice-key"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("then again at once: %d", rec.Code)
	}
	if strings.Contains(b.logs.String(), "192.0.2.") {
		t.Fatal("a client address was logged")
	}
}

// TestDashboard_SessionExpiry: a session ends after SessionTTL, on the
// server too: the old cookie opens nothing.
func TestDashboard_SessionExpiry(t *testing.T) {
	b := setup(t)
	br := b.signIn(t, "alice-key")
	b.clock.Advance(12*time.Hour - time.Second)
	if r := b.do(t, br, http.MethodGet, "/ui/", nil); !strings.Contains(r.body, "Sign out") {
		t.Fatalf("before 12h: %s", r.body)
	}
	b.clock.Advance(time.Second)
	if r := b.do(t, br, http.MethodGet, "/ui/", nil); r.code != http.StatusOK || !strings.Contains(r.body, `action="/ui/signin"`) {
		t.Fatalf("after 12h: %d %s", r.code, r.body)
	}
	if r := b.do(t, br, http.MethodGet, "/ui/jobs/"+missingID, nil); r.code != http.StatusSeeOther {
		t.Fatalf("job page after 12h: %d", r.code)
	}
}

func TestDashboard_SignOut(t *testing.T) {
	b := setup(t)
	br := b.signIn(t, "alice-key")
	if r := b.do(t, br, http.MethodPost, "/ui/signout", url.Values{}); r.code != http.StatusForbidden {
		t.Fatalf("sign-out without CSRF: %d", r.code)
	}
	if r := b.do(t, br, http.MethodGet, "/ui/", nil); !strings.Contains(r.body, "Sign out") {
		t.Fatal("a sign-out without CSRF ended the session")
	}
	r := b.do(t, br, http.MethodPost, "/ui/signout", url.Values{"csrf": {br.csrf}})
	if r.code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d %s", r.code, r.body)
	}
	if c := sessionCookie(t, r); c.MaxAge >= 0 || c.Value != "" || c.Path != "/ui/" {
		t.Fatalf("sign-out cookie %q: want it cleared", r.header.Get("Set-Cookie"))
	}
	// The old cookie, replayed, opens nothing.
	if r := b.do(t, br, http.MethodGet, "/ui/", nil); !strings.Contains(r.body, `action="/ui/signin"`) {
		t.Fatalf("after sign-out: %s", r.body)
	}
}

// TestDashboard_CSRF: a cancel needs the session's own CSRF token, and a
// POST from another origin is refused.
func TestDashboard_CSRF(t *testing.T) {
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	id := b.submit(t, "alice", "https://example.com/hold")
	path := "/ui/jobs/" + id + "/cancel"
	for name, form := range map[string]url.Values{
		"none":        {},
		"wrong":       {"csrf": {"x" + alice.csrf}},
		"bob's token": {"csrf": {bob.csrf}},
	} {
		if r := b.do(t, alice, http.MethodPost, path, form); r.code != http.StatusForbidden {
			t.Errorf("%s: %d", name, r.code)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(url.Values{"csrf": {alice.csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.AddCookie(alice.cookie)
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin: %d", resp.StatusCode)
	}
	if j, _ := b.runner.Job(id); j.Status == "cancelled" {
		t.Fatal("a refused cancel cancelled the job")
	}
	r := b.do(t, alice, http.MethodPost, path, url.Values{"csrf": {alice.csrf}})
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+id {
		t.Fatalf("cancel: %d %v", r.code, r.header)
	}
	if j, _ := b.runner.Job(id); j.Status != "cancelled" {
		t.Fatalf("job %s after cancel", j.Status)
	}
	if r := b.do(t, alice, http.MethodPost, path, url.Values{"csrf": {alice.csrf}}); r.code != http.StatusConflict {
		t.Fatalf("cancel of an ended job: %d", r.code)
	}
}

// TestDashboard_CookieRefusedByAPI: the session cookie opens nothing under
// /v1/: the API takes Bearer keys only.
func TestDashboard_CookieRefusedByAPI(t *testing.T) {
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/a")
	for _, rq := range []struct{ method, path string }{
		{http.MethodGet, "/v1/batch/" + id},
		{http.MethodGet, "/v1/batch/" + id + "/0"},
		{http.MethodDelete, "/v1/batch/" + id},
		{http.MethodPost, "/v1/batch"},
	} {
		if r := b.do(t, alice, rq.method, rq.path, nil); r.code != http.StatusUnauthorized {
			t.Errorf("%s %s with the session cookie: %d %s", rq.method, rq.path, r.code, r.body)
		}
	}
	// The same request with alice's key is answered.
	req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+id, nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with the key: %d", resp.StatusCode)
	}
}
