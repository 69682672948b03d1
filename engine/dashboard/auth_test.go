package dashboard_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
)

func TestDashboard_SignIn(t *testing.T) {
	t.Parallel()
	t.Run("FormWhenSignedOut", func(t *testing.T) {
		t.Parallel()
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
		t.Parallel()
		b := setup(t)
		for _, key := range []string{"", "nobody", "alice-key "} {
			r := b.do(t, nil, http.MethodPost, "/ui/signin", url.Values{"key": {key}})
			if r.code != http.StatusUnauthorized || r.header.Get("Set-Cookie") != "" || !strings.Contains(r.body, "not known") {
				t.Errorf("key %q: %d %v %s", key, r.code, r.header, r.body)
			}
		}
	})
	t.Run("Cookie", func(t *testing.T) {
		t.Parallel()
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
		t.Parallel()
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
	t.Parallel()
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
	b.Clock.Advance(12 * time.Second)
	if rec := signIn("192.0.2.1", "alice-key"); rec.Code != http.StatusSeeOther {
		t.Fatalf("12s later: %d", rec.Code)
	}
	if rec := signIn("192.0.2.1", "alice-key"); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("then again at once: %d", rec.Code)
	}
	if strings.Contains(b.Logs.String(), "192.0.2.") {
		t.Fatal("a client address was logged")
	}
}

// TestDashboard_SessionExpiry: a session ends after SessionTTL, on the
// server too: the old cookie opens nothing.
func TestDashboard_SessionExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := b.signIn(t, "alice-key")
	b.Clock.Advance(12*time.Hour - time.Second)
	if r := b.do(t, br, http.MethodGet, "/ui/", nil); !strings.Contains(r.body, "Sign out") {
		t.Fatalf("before 12h: %s", r.body)
	}
	b.Clock.Advance(time.Second)
	if r := b.do(t, br, http.MethodGet, "/ui/", nil); r.code != http.StatusOK || !strings.Contains(r.body, `action="/ui/signin"`) {
		t.Fatalf("after 12h: %d %s", r.code, r.body)
	}
	if r := b.do(t, br, http.MethodGet, "/ui/jobs/"+missingID, nil); r.code != http.StatusSeeOther {
		t.Fatalf("job page after 12h: %d", r.code)
	}
}

func TestDashboard_SignOut(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	if j, _ := b.Runner.Job(id); j.Status == "cancelled" {
		t.Fatal("a refused cancel cancelled the job")
	}
	r := b.do(t, alice, http.MethodPost, path, url.Values{"csrf": {alice.csrf}})
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/ui/jobs/"+id {
		t.Fatalf("cancel: %d %v", r.code, r.header)
	}
	if j, _ := b.Runner.Job(id); j.Status != "cancelled" {
		t.Fatalf("job %s after cancel", j.Status)
	}
	if r := b.do(t, alice, http.MethodPost, path, url.Values{"csrf": {alice.csrf}}); r.code != http.StatusConflict {
		t.Fatalf("cancel of an ended job: %d", r.code)
	}
}

// TestDashboard_CookieRefusedByAPI: the session cookie, an admin's too,
// opens nothing under /v1/ on any route, alone or beside a bogus
// Authorization made of it: the API takes Bearer keys only. The same
// request with the key is answered.
func TestDashboard_CookieRefusedByAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"alice-key", "root-key"} {
		br := b.signIn(t, key)
		id := b.submit(t, strings.TrimSuffix(key, "-key"), "https://example.com/hold")
		for _, rq := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/batch", ""},
			{http.MethodGet, "/v1/batch?status=live", ""},
			{http.MethodGet, "/v1/batch/" + id, ""},
			{http.MethodGet, "/v1/batch/" + id + "?wait=1s", ""},
			{http.MethodGet, "/v1/batch/" + id + "/0", ""},
			{http.MethodDelete, "/v1/batch/" + id, ""},
			{http.MethodPost, "/v1/batch", `{"targets":[{"url":"https://example.com/x"}]}`},
		} {
			// Also with the cookie under the API's path and a
			// bogus Authorization.
			for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer " + br.cookie.Value}, {"Authorization": "Cookie " + br.cookie.Value}} {
				r := b.raw(t, br.cookie, rq.method, rq.path, rq.body, hdr)
				if r.code != http.StatusUnauthorized {
					t.Errorf("%s %s %v with %s's cookie: %d %s", rq.method, rq.path, hdr, key, r.code, r.body)
				}
			}
		}
		if j, _ := b.Runner.Job(id); j.Status == engine.StatusCancelled {
			t.Fatal("the cookie cancelled a job through /v1/")
		}
	}
	// The same request with alice's key is answered.
	id := b.submit(t, "alice", "https://example.com/a")
	if r := b.raw(t, nil, http.MethodGet, "/v1/batch/"+id, "", map[string]string{"Authorization": "Bearer alice-key"}); r.code != http.StatusOK {
		t.Fatalf("with the key: %d %s", r.code, r.body)
	}
}

// TestDashboard_SessionCannotBeForgedOrReused: a session is a random token
// the server keeps: a cookie planted before sign-in is not kept, nor
// signed in, by it; another instance's cookie, a forged, truncated,
// extended or respelled token opens nothing; a session expired by the
// clock is forgotten for good; a signed-out session opens nothing
// anywhere, and signing one session out ends only that one.
func TestDashboard_SessionCannotBeForgedOrReused(t *testing.T) {
	t.Parallel()
	t.Run("FixationCookieBeforeSignIn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		planted := &http.Cookie{Name: "siftbatch_session", Value: strings.Repeat("A", 43)}
		if r := b.do(t, &browser{cookie: planted}, http.MethodGet, "/ui/", nil); !signedOut(r) {
			t.Fatalf("a planted cookie opened the overview: %d", r.code)
		}
		r := b.raw(t, planted, http.MethodPost, "/ui/signin", "key=alice-key", nil)
		if r.code != http.StatusSeeOther {
			t.Fatalf("sign-in with a planted cookie: %d", r.code)
		}
		if c := sessionCookie(t, r); c.Value == planted.Value {
			t.Fatal("sign-in kept the planted session token")
		}
		if r := b.do(t, &browser{cookie: planted}, http.MethodGet, "/ui/", nil); !signedOut(r) {
			t.Fatal("the planted cookie is signed in after the victim signed in")
		}
	})
	t.Run("CookieFromAnotherInstance", func(t *testing.T) {
		t.Parallel()
		a, other := setup(t), setup(t)
		br := a.signIn(t, "alice-key")
		if r := other.do(t, br, http.MethodGet, "/ui/", nil); !signedOut(r) {
			t.Fatal("another server instance accepted the cookie")
		}
		if r := other.do(t, br, http.MethodGet, "/ui/events", nil); r.code != http.StatusUnauthorized {
			t.Fatalf("another instance's events: %d", r.code)
		}
	})
	t.Run("ForgedAndTruncated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		br := b.signIn(t, "alice-key")
		v := br.cookie.Value
		flipped := []byte(v)
		if flipped[0] == 'A' {
			flipped[0] = 'B'
		} else {
			flipped[0] = 'A'
		}
		for name, val := range map[string]string{
			"truncated":  v[:len(v)-1],
			"half":       v[:len(v)/2],
			"extended":   v + "A",
			"flipped":    string(flipped),
			"csrf-token": br.csrf,
			"key":        "alice-key",
			"name":       "alice",
			"huge":       strings.Repeat("A", 3000),
			"space":      " " + v,
			"empty-ish":  "=",
			"upper":      strings.ToUpper(v),
			"base64-std": strings.NewReplacer("-", "+", "_", "/").Replace(v),
			"two-tokens": v[:20] + " " + v[20:],
		} {
			c := &http.Cookie{Name: "siftbatch_session", Value: val}
			if val != v && strings.ContainsAny(val, ` ";`) {
				// Not valid cookie syntax for net/http: send it raw.
				r := b.raw(t, nil, http.MethodGet, "/ui/", "", map[string]string{"Cookie": "siftbatch_session=" + val})
				if r.code != http.StatusOK || !signedOut(r) {
					t.Errorf("%s (raw): %d", name, r.code)
				}
				continue
			}
			if val == v {
				continue
			}
			if r := b.do(t, &browser{cookie: c}, http.MethodGet, "/ui/", nil); r.code != http.StatusOK || !signedOut(r) {
				t.Errorf("%s: %d signed in", name, r.code)
			}
			if r := b.do(t, &browser{cookie: c}, http.MethodGet, "/ui/events", nil); r.code != http.StatusUnauthorized {
				t.Errorf("%s events: %d", name, r.code)
			}
		}
	})
	t.Run("ExpiredByClock", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, dashboard.Options{SessionTTL: time.Minute})
		br := b.signIn(t, "alice-key")
		id := b.submit(t, "alice", "https://example.com/hold")
		b.Clock.Advance(time.Minute)
		if r := b.do(t, br, http.MethodGet, "/ui/jobs/"+id, nil); r.code != http.StatusSeeOther {
			t.Fatalf("job page after expiry: %d", r.code)
		}
		if r := b.do(t, br, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {br.csrf}}); r.code != http.StatusUnauthorized {
			t.Fatalf("cancel after expiry: %d", r.code)
		}
		if j, _ := b.Runner.Job(id); j.Status == engine.StatusCancelled {
			t.Fatal("an expired session cancelled a job")
		}
		// Going back in time does not revive it: the server forgot it.
		b.Clock.Advance(-time.Hour)
		if r := b.do(t, br, http.MethodGet, "/ui/", nil); !signedOut(r) {
			t.Fatal("an expired session came back when the clock went back")
		}
	})
	t.Run("AfterSignOutEverywhere", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		br := b.signIn(t, "alice-key")
		id := b.submit(t, "alice", "https://example.com/hold")
		if r := b.do(t, br, http.MethodPost, "/ui/signout", url.Values{"csrf": {br.csrf}}); r.code != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", r.code)
		}
		for _, path := range []string{"/ui/jobs/" + id, "/ui/jobs/" + id + "/0", "/ui/jobs?id=" + id} {
			if r := b.do(t, br, http.MethodGet, path, nil); r.code != http.StatusSeeOther || strings.Contains(r.body, id) {
				t.Errorf("GET %s after sign-out: %d", path, r.code)
			}
		}
		if r := b.do(t, br, http.MethodGet, "/ui/events", nil); r.code != http.StatusUnauthorized {
			t.Errorf("events after sign-out: %d", r.code)
		}
		if r := b.do(t, br, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {br.csrf}}); r.code != http.StatusUnauthorized {
			t.Errorf("cancel after sign-out: %d", r.code)
		}
		if r := b.do(t, br, http.MethodPost, "/ui/signout", url.Values{"csrf": {br.csrf}}); r.code != http.StatusUnauthorized {
			t.Errorf("second sign-out: %d", r.code)
		}
		if j, _ := b.Runner.Job(id); j.Status == engine.StatusCancelled {
			t.Fatal("a signed-out session cancelled a job")
		}
	})
	t.Run("SignOutEndsOnlyThatSession", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		one, two := b.signIn(t, "alice-key"), b.signIn(t, "alice-key")
		if r := b.do(t, one, http.MethodPost, "/ui/signout", url.Values{"csrf": {two.csrf}}); r.code != http.StatusForbidden {
			t.Fatalf("sign-out with the other session's token: %d", r.code)
		}
		if r := b.do(t, one, http.MethodPost, "/ui/signout", url.Values{"csrf": {one.csrf}}); r.code != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", r.code)
		}
		if r := b.do(t, two, http.MethodGet, "/ui/", nil); signedOut(r) {
			t.Fatal("signing one session out ended another")
		}
	})

}

// TestDashboard_CSRFRefusals: a POST without the session's own token in
// its form (no token, another session's, the session token, one in the
// query or a header, a wrong first of two, a huge or non-UTF-8 one), from
// a foreign, null or lookalike Origin, or with a foreign Referer and no
// Origin, and a cancel by another method, change nothing; nor does a GET
// sign-out or a key in a sign-in's query; a sign-in (login CSRF) or a
// sign-out from another origin is refused too. The right token from the
// same origin works.
func TestDashboard_CSRFRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	alice2 := b.signIn(t, "alice-key")
	bob := b.signIn(t, "bob-key")
	id := b.submit(t, "alice", "https://example.com/hold")
	cancelPath := "/ui/jobs/" + id + "/cancel"
	form := func(tok string) string { return url.Values{"csrf": {tok}}.Encode() }
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   string
		hdr    map[string]string
		want   int
	}{
		{"no token", http.MethodPost, cancelPath, "", nil, http.StatusForbidden},
		{"empty token", http.MethodPost, cancelPath, "csrf=", nil, http.StatusForbidden},
		{"truncated token", http.MethodPost, cancelPath, form(alice.csrf[:len(alice.csrf)-1]), nil, http.StatusForbidden},
		{"another alice session's token", http.MethodPost, cancelPath, form(alice2.csrf), nil, http.StatusForbidden},
		{"bob's token", http.MethodPost, cancelPath, form(bob.csrf), nil, http.StatusForbidden},
		{"session token as csrf", http.MethodPost, cancelPath, form(alice.cookie.Value), nil, http.StatusForbidden},
		{"token in query only", http.MethodPost, cancelPath + "?csrf=" + url.QueryEscape(alice.csrf), "", nil, http.StatusForbidden},
		{"token in header only", http.MethodPost, cancelPath, "", map[string]string{"X-CSRF-Token": alice.csrf}, http.StatusForbidden},
		{"token twice, first wrong", http.MethodPost, cancelPath, "csrf=x&csrf=" + url.QueryEscape(alice.csrf), nil, http.StatusForbidden},
		{"foreign origin", http.MethodPost, cancelPath, form(alice.csrf), map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"null origin", http.MethodPost, cancelPath, form(alice.csrf), map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"origin with another port", http.MethodPost, cancelPath, form(alice.csrf), map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"foreign referer, no origin", http.MethodPost, cancelPath, form(alice.csrf), map[string]string{"Referer": "https://evil.example/attack.html"}, http.StatusForbidden},
		{"origin lookalike", http.MethodPost, cancelPath, form(alice.csrf), map[string]string{"Origin": strings.TrimSuffix(b.url, "/") + ".evil.example"}, http.StatusForbidden},
		{"huge token", http.MethodPost, cancelPath, form(strings.Repeat(alice.csrf, 400)), nil, http.StatusForbidden},
		{"non-UTF-8 token", http.MethodPost, cancelPath, "csrf=%ff%fe" + url.QueryEscape(alice.csrf), nil, http.StatusForbidden},
		{"GET cancel", http.MethodGet, cancelPath + "?csrf=" + url.QueryEscape(alice.csrf), "", nil, http.StatusNotFound},
		{"PUT cancel", http.MethodPut, cancelPath, form(alice.csrf), nil, 0},
		{"DELETE job", http.MethodDelete, "/ui/jobs/" + id, form(alice.csrf), nil, 0},
	} {
		r := b.raw(t, alice.cookie, tc.method, tc.path, tc.body, tc.hdr)
		if tc.want != 0 && r.code != tc.want || tc.want == 0 && r.code < 400 {
			t.Errorf("%s: %d, want %d", tc.name, r.code, tc.want)
		}
		if j, _ := b.Runner.Job(id); j.Status == engine.StatusCancelled {
			t.Fatalf("%s cancelled the job", tc.name)
		}
	}
	// GET sign-out, GET sign-in with a key in the query: nothing changes.
	if r := b.raw(t, alice.cookie, http.MethodGet, "/ui/signout?csrf="+url.QueryEscape(alice.csrf), "", nil); r.code < 400 {
		t.Errorf("GET /ui/signout: %d", r.code)
	}
	if r := b.do(t, alice, http.MethodGet, "/ui/", nil); signedOut(r) {
		t.Fatal("a GET signed alice out")
	}
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		r := b.raw(t, nil, m, "/ui/signin?key=alice-key", "", nil)
		if r.header.Get("Set-Cookie") != "" {
			t.Errorf("%s /ui/signin with the key in the query signed in: %d", m, r.code)
		}
	}
	// Sign-in from another origin (login CSRF) is refused too, by its
	// Origin or, without one, its Referer.
	for _, hdr := range []map[string]string{{"Origin": "https://evil.example"}, {"Origin": "null"}, {"Referer": "https://evil.example/attack.html"}} {
		r := b.raw(t, nil, http.MethodPost, "/ui/signin", "key=bob-key", hdr)
		if r.code != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
			t.Errorf("sign-in with %v: %d", hdr, r.code)
		}
	}
	// Sign-out from a foreign origin with the right token is refused.
	if r := b.raw(t, alice.cookie, http.MethodPost, "/ui/signout", form(alice.csrf), map[string]string{"Origin": "https://evil.example"}); r.code != http.StatusForbidden {
		t.Errorf("sign-out from another origin: %d", r.code)
	}
	// The right token, same origin, works (the refusals above were not
	// from a broken form).
	if r := b.raw(t, alice.cookie, http.MethodPost, cancelPath, form(alice.csrf), map[string]string{"Origin": b.url}); r.code != http.StatusSeeOther {
		t.Fatalf("the real cancel: %d %s", r.code, r.body)
	}
}

// TestDashboard_ThrottleByClientAddress: the sign-in throttle counts a
// client by its address: X-Forwarded-For and its kin are ignored unless
// TLSProxy says a proxy appends it, and then only its rightmost entry
// counts (so one client behind the proxy locks out no other, and a forged
// leftmost entry is no way around); another source port is the same
// address, an IPv6 one counts too; hostile keys count as attempts; past
// the limit even the right key is 429 until Retry-After has passed; 40
// concurrent attempts let exactly 5 through.
func TestDashboard_ThrottleByClientAddress(t *testing.T) {
	t.Parallel()
	t.Run("XForwardedForIgnoredWithoutTLSProxy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range 5 {
			rec := signInAt(b.handler, "192.0.2.9:1", "wrong", map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i), "X-Real-IP": fmt.Sprintf("198.51.100.%d", i)})
			if rec.Code != http.StatusUnauthorized {
				t.Fatalf("attempt %d: %d", i, rec.Code)
			}
		}
		for i := range 5 {
			rec := signInAt(b.handler, "192.0.2.9:2", "alice-key", map[string]string{"X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i), "Forwarded": fmt.Sprintf("for=203.0.113.%d", i)})
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Set-Cookie") != "" {
				t.Fatalf("spoofed X-Forwarded-For %d bypassed the throttle: %d", i, rec.Code)
			}
		}
	})
	t.Run("SpoofedLeftmostXFFBehindTLSProxy", func(t *testing.T) {
		t.Parallel()
		// Behind a proxy that appends the client's address, a client
		// rotating a forged leftmost entry is still one client.
		b := setupWith(t, dashboard.Options{TLSProxy: true})
		for i := range 5 {
			signInAt(b.handler, "127.0.0.1:1", "wrong", map[string]string{"X-Forwarded-For": fmt.Sprintf("10.0.0.%d, 198.51.100.7", i)})
		}
		rec := signInAt(b.handler, "127.0.0.1:1", "alice-key", map[string]string{"X-Forwarded-For": "10.9.9.9, 198.51.100.7"})
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("forged leftmost X-Forwarded-For bypassed: %d", rec.Code)
		}
	})
	t.Run("OneClientBehindTLSProxyLocksOutNoOther", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, dashboard.Options{TLSProxy: true})
		const proxy = "127.0.0.1:5000"
		for range 5 {
			signInAt(b.handler, proxy, "wrong", map[string]string{"X-Forwarded-For": "198.51.100.7"})
		}
		if rec := signInAt(b.handler, proxy, "wrong", map[string]string{"X-Forwarded-For": "198.51.100.7"}); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("the attacker's 6th attempt: %d", rec.Code)
		}
		rec := signInAt(b.handler, proxy, "alice-key", map[string]string{"X-Forwarded-For": "203.0.113.20"})
		if rec.Code != http.StatusSeeOther {
			t.Fatalf("another client behind the proxy, right key: %d (one client's wrong keys lock everyone out)", rec.Code)
		}
	})
	t.Run("PortAndIPv6", func(t *testing.T) {
		t.Parallel()
		// Another source port is the same address; an IPv6 address in
		// any spelling is limited too.
		b := setup(t)
		for i := range 5 {
			signInAt(b.handler, fmt.Sprintf("192.0.2.77:%d", 1000+i), "wrong", nil)
		}
		if rec := signInAt(b.handler, "192.0.2.77:9999", "alice-key", nil); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("another port: %d", rec.Code)
		}
		for i := range 5 {
			signInAt(b.handler, fmt.Sprintf("[2001:db8::1]:%d", 1000+i), "wrong", nil)
		}
		if rec := signInAt(b.handler, "[2001:db8::1]:1", "alice-key", nil); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("ipv6: %d", rec.Code)
		}
	})
	t.Run("RightKeyAfterLimitAndBodyAttacks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Huge and non-UTF-8 keys count as attempts and are refused
		// cleanly.
		for _, key := range []string{strings.Repeat("k", 64<<10), "\xff\xfe\x00alice-key", "alice-key\x00"} {
			rec := signInAt(b.handler, "192.0.2.50:1", key, nil)
			if rec.Code != http.StatusUnauthorized && rec.Code != http.StatusRequestEntityTooLarge {
				t.Errorf("hostile key: %d", rec.Code)
			}
			if rec.Header().Get("Set-Cookie") != "" || strings.Contains(rec.Body.String(), "kkkkkkkk") {
				t.Errorf("hostile key: signed in or echoed")
			}
		}
		signInAt(b.handler, "192.0.2.50:1", "x", nil)
		signInAt(b.handler, "192.0.2.50:1", "x", nil)
		for range 3 {
			rec := signInAt(b.handler, "192.0.2.50:1", "root-key", nil)
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Set-Cookie") != "" {
				t.Fatalf("right key past the limit: %d", rec.Code)
			}
		}
		// Waiting out Retry-After lets exactly one through.
		b.Clock.Advance(12 * time.Second)
		if rec := signInAt(b.handler, "192.0.2.50:1", "root-key", nil); rec.Code != http.StatusSeeOther {
			t.Fatalf("after 12 s: %d", rec.Code)
		}
	})
	t.Run("ConcurrentBurst", func(t *testing.T) {
		t.Parallel()
		// 40 concurrent wrong attempts from one address: at most 5
		// get past the throttle.
		b := setup(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		passed := 0
		for range 40 {
			wg.Go(func() {
				rec := signInAt(b.handler, "192.0.2.60:1", "alice-key", nil)
				if rec.Code != http.StatusTooManyRequests {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if passed != 5 {
			t.Fatalf("%d of 40 concurrent attempts passed, want 5", passed)
		}
	})
}
