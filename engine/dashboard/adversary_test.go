package dashboard_test

// Adversarial black-box tests of the dashboard (issue 15): sessions,
// CSRF, the sign-in throttle, isolation, escaping, hostile input, event
// stream crowds and the logging rules. Every test here passes; the ones
// that found a broken rule are in adversary_failing_test.go.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/persistence"
)

// Hostile strings a fetch hands back or a caller submits.
const (
	advScript    = `<script>alert("xss")</script>`
	advImg       = `"><img src=x onerror=alert(1)>`
	advJSURL     = `javascript:alert(document.cookie)//hostile.example/ok`
	advPanicText = "PANIC-VALUE-7f3a https://panic-secret.example/"
)

// hostileFetch answers URLs on hostile.example with hostile error texts,
// hints, results and panics; any other URL goes to the suite's fakeFetch.
func hostileFetch(release <-chan struct{}) engine.FetchFunc {
	base := fakeFetch(release)
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		if !strings.Contains(t.URL, "hostile.example") {
			return base(ctx, c, t)
		}
		switch {
		case strings.Contains(t.URL, "/xss-err"):
			return engine.Result{}, &engine.TargetError{Status: 500, Msg: "boom " + advScript + advImg, Hint: "try " + advJSURL + " " + advScript}
		case strings.Contains(t.URL, "/cr-err"):
			return engine.Result{}, &engine.TargetError{Status: 500, Msg: "line1\r\revent: signedout\rdata: injected\r\rtail", Hint: "h\rretry: 1"}
		case strings.Contains(t.URL, "/panic"):
			panic(advPanicText)
		}
		return engine.Result{Content: "content " + advScript + advImg + " " + advJSURL,
			Meta: map[string]any{"k" + advScript: advImg, "link": advJSURL}}, nil
	}
}

// advSetup is setupWith with a fetch of the test's own (nil: hostileFetch).
func advSetup(t testing.TB, fetch func(<-chan struct{}) engine.FetchFunc, o dashboard.Options) *bundle {
	t.Helper()
	if fetch == nil {
		fetch = hostileFetch
	}
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	b := &bundle{clock: &fakeClock{now: time.Now()}, logs: &syncBuffer{},
		release: func() { once.Do(func() { close(release) }) }}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	cfg := engine.Config{JobsPerCaller: 4, JobsTotal: 8, Workers: 2, Hooks: m.Hooks()}
	runner, err := engine.New(store, fetch(release), cfg, log)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	m.Attach(runner)
	b.runner = runner
	if o.Log == nil {
		o.Log = log
	}
	if o.Now == nil {
		o.Now = b.clock.Now
	}
	if o.Refresh == 0 {
		o.Refresh = 10 * time.Millisecond
	}
	if o.ChartStep == 0 {
		o.ChartStep = 10 * time.Millisecond
	}
	o.Gatherer = reg
	o.Config = cfg
	dash, err := dashboard.New(runner, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	b.dash = dash
	api, err := httpapi.New(runner, keys, httpapi.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.Handle(dashboard.Prefix, dash)
	b.handler = mux
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.active.Add(1)
		defer b.active.Add(-1)
		mux.ServeHTTP(w, r)
	}))
	srv.Config.WriteTimeout = writeTimeout
	srv.Config.RegisterOnShutdown(dash.Close)
	srv.Start()
	b.url = srv.URL
	transport := &http.Transport{}
	b.client = &http.Client{Transport: transport, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(func() {
		b.release()
		dash.Close()
		transport.CloseIdleConnections()
		srv.Close()
		runner.Close()
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// raw sends a request with a raw body, headers and optional cookie.
func (b *bundle) raw(t testing.TB, c *http.Cookie, method, path, body string, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c != nil {
		req.AddCookie(c)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: string(data)}
}

// signInAt posts key through the handler as a client at remoteAddr, with
// extra headers.
func signInAt(h http.Handler, remoteAddr, key string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader(url.Values{"key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remoteAddr
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func signedOut(r response) bool {
	return strings.Contains(r.body, `action="/ui/signin"`) && !strings.Contains(r.body, "Sign out")
}

func randomHexID(t testing.TB) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// --- Sessions -----------------------------------------------------------

func TestAdversary_Session(t *testing.T) {
	t.Run("FixationCookieBeforeSignIn", func(t *testing.T) {
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
		b := setupWith(t, dashboard.Options{SessionTTL: time.Minute})
		br := b.signIn(t, "alice-key")
		id := b.submit(t, "alice", "https://example.com/hold")
		b.clock.Advance(time.Minute)
		if r := b.do(t, br, http.MethodGet, "/ui/jobs/"+id, nil); r.code != http.StatusSeeOther {
			t.Fatalf("job page after expiry: %d", r.code)
		}
		if r := b.do(t, br, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {br.csrf}}); r.code != http.StatusUnauthorized {
			t.Fatalf("cancel after expiry: %d", r.code)
		}
		if j, _ := b.runner.Job(id); j.Status == engine.StatusCancelled {
			t.Fatal("an expired session cancelled a job")
		}
		// Going back in time does not revive it: the server forgot it.
		b.clock.Advance(-time.Hour)
		if r := b.do(t, br, http.MethodGet, "/ui/", nil); !signedOut(r) {
			t.Fatal("an expired session came back when the clock went back")
		}
	})
	t.Run("StreamEndsOnExpiry", func(t *testing.T) {
		b := setupWith(t, dashboard.Options{SessionTTL: time.Minute})
		br := b.signIn(t, "alice-key")
		s := b.openStream(t, br, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		b.clock.Advance(2 * time.Minute)
		s.until(t, "signedout", func(ev event) bool { return ev.name == "signedout" })
		if _, err := s.next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after signedout: %v, want EOF", err)
		}
		b.waitStreamsEnded(t)
	})
	t.Run("AfterSignOutEverywhere", func(t *testing.T) {
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
		if j, _ := b.runner.Job(id); j.Status == engine.StatusCancelled {
			t.Fatal("a signed-out session cancelled a job")
		}
	})
	t.Run("SignOutEndsOnlyThatSession", func(t *testing.T) {
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
	t.Run("CookieRefusedByEveryV1Route", func(t *testing.T) {
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
			if j, _ := b.runner.Job(id); j.Status == engine.StatusCancelled {
				t.Fatal("the cookie cancelled a job through /v1/")
			}
		}
	})
}

// --- CSRF ---------------------------------------------------------------

func TestAdversary_CSRF(t *testing.T) {
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
		if j, _ := b.runner.Job(id); j.Status == engine.StatusCancelled {
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
	// Sign-in from another origin (login CSRF) is refused too.
	for _, o := range []string{"https://evil.example", "null"} {
		r := b.raw(t, nil, http.MethodPost, "/ui/signin", "key=alice-key", map[string]string{"Origin": o})
		if r.code != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
			t.Errorf("sign-in from Origin %q: %d", o, r.code)
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

// --- Throttle -----------------------------------------------------------

func TestAdversary_Throttle(t *testing.T) {
	t.Run("XForwardedForIgnoredWithoutTLSProxy", func(t *testing.T) {
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
	t.Run("PortAndIPv6", func(t *testing.T) {
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
		b.clock.Advance(12 * time.Second)
		if rec := signInAt(b.handler, "192.0.2.50:1", "root-key", nil); rec.Code != http.StatusSeeOther {
			t.Fatalf("after 12 s: %d", rec.Code)
		}
	})
	t.Run("ConcurrentBurst", func(t *testing.T) {
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

// --- Isolation ----------------------------------------------------------

func TestAdversary_Isolation(t *testing.T) {
	b := advSetup(t, nil, dashboard.Options{})
	bob := b.signIn(t, "bob-key")
	root := b.signIn(t, "root-key")
	live := b.submit(t, "alice", "https://alice-secret.example/hold", "https://alice-secret.example/b")
	ended := b.submit(t, "alice", "https://alice-secret.example/done", "https://hostile.example/xss-err")
	b.waitTerminal(t, ended)
	missing := randomHexID(t)

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
	if j, _ := b.runner.Job(live); j.Status == engine.StatusCancelled {
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

// --- XSS ----------------------------------------------------------------

func TestAdversary_XSS(t *testing.T) {
	b := advSetup(t, nil, dashboard.Options{})
	alice := b.signIn(t, "alice-key")
	root := b.signIn(t, "root-key")
	hostileURLs := []string{
		"https://hostile.example/ok?q=" + advScript + "&x=" + advImg,
		advJSURL,
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
	r := b.do(t, alice, http.MethodGet, "/ui/"+url.PathEscape(advScript), nil)
	if r.code != http.StatusNotFound || strings.Contains(r.body, "<script>alert") || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("404 page: %d %q", r.code, r.header.Get("Content-Security-Policy"))
	}
}

// --- Hostile input -------------------------------------------------------

func TestAdversary_HostileInput(t *testing.T) {
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/a")
	b.waitTerminal(t, id)
	huge := strings.Repeat("a", 60<<10)
	hostile := []string{huge, "%ff%fe%00", "..%2f..%2f..%2fetc%2fpasswd", "%2e%2e", "<script>", strings.ToUpper(id), id + "%00", " " + id, id + "/../" + id}
	for _, h := range hostile {
		for _, path := range []string{"/ui/jobs/" + h, "/ui/jobs/" + id + "/" + h, "/ui/jobs/" + h + "/0", "/ui/jobs?id=" + h, "/ui/events?job=" + h, "/ui/static/" + h, "/ui/" + h} {
			if strings.HasPrefix(path, "/ui/static/") && strings.Contains(h, "%ff") {
				continue // adversary_failing_test.go: TestAdversaryFailing_StaticNonUTF8Path
			}
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
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return fmt.Sprint(resp.StatusCode) + "\n" + string(data)
}

// --- Event stream crowd ---------------------------------------------------

func TestAdversary_StreamCrowd(t *testing.T) {
	b := setup(t)
	sessions := []*browser{b.signIn(t, "alice-key"), b.signIn(t, "bob-key"), b.signIn(t, "root-key")}
	id := b.submit(t, "alice", "https://example.com/hold")
	const n = 48
	streams := make([]*stream, 0, n)
	for i := range n {
		path := "/ui/events"
		if i%3 == 0 {
			path += "?job=" + id
		}
		s := b.openStream(t, sessions[i%3], path)
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		streams = append(streams, s)
	}
	// Half the crowd leaves: their requests end.
	for _, s := range streams[:n/2] {
		s.close()
	}
	waitFor(t, 10*time.Second, "half the streams to end", func() bool { return b.active.Load() <= n/2 })
	b.dash.Close()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, s := range streams[n/2:] {
		wg.Go(func() {
			for range 1000 {
				if _, err := s.next(); err != nil {
					if !errors.Is(err, io.EOF) {
						errs <- err
					}
					return
				}
			}
			errs <- errors.New("stream went on after Close")
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b.waitStreamsEnded(t)
	// After Close a new stream ends at once, and Close again is harmless.
	b.dash.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/ui/events", nil)
	req.AddCookie(sessions[0].cookie)
	resp, err := (&http.Transport{DisableKeepAlives: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, bufio.NewReader(resp.Body))
	resp.Body.Close()
	if err != nil {
		t.Fatalf("a stream after Close: %v (want it to end at once)", err)
	}
	b.waitStreamsEnded(t)
}

// --- Logs ---------------------------------------------------------------

func TestAdversary_Logs(t *testing.T) {
	b := advSetup(t, nil, dashboard.Options{})
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
	logs := b.logs.String()
	if !strings.Contains(logs, "dashboard sign-in") || !strings.Contains(logs, "job_id="+id) {
		t.Fatalf("the dashboard logged nothing to check: %s", logs)
	}
	for _, secret := range []string{"alice-key", "root-key", "bob-key", wrongKey, alice.cookie.Value, root.cookie.Value, bob.cookie.Value,
		alice.csrf, root.csrf, "log-secret", "hostile.example", "PANIC-VALUE", "panic-secret", "127.0.0.1", "msg=forged"} {
		if strings.Contains(logs, secret) {
			t.Errorf("a log line holds %q", secret)
		}
	}
}
