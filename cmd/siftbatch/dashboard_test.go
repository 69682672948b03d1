package main

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestServe_Dashboard: serve mounts the dashboard at /ui/: sign-in with a
// key through the form, a session cookie that /v1/ refuses, the admin's
// view with its charts, and an event stream that does not hold up a stop.
func TestServe_Dashboard(t *testing.T) {
	t.Parallel()
	s := startSession(t)
	noRedirect := &http.Client{Transport: s.client.Transport, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form := func(key string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/ui/signin", strings.NewReader(url.Values{"key": {key}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}
	signIn := func(key string) *http.Cookie {
		t.Helper()
		r := send(t, noRedirect, form(key))
		if r.code != http.StatusSeeOther {
			t.Fatalf("sign in: %d %s", r.code, r.body)
		}
		for _, c := range (&http.Response{Header: r.header}).Cookies() {
			if c.Name == "siftbatch_session" {
				if !c.HttpOnly || c.Secure || c.Path != "/ui/" || c.MaxAge != 12*3600 {
					t.Fatalf("cookie %q", r.header.Get("Set-Cookie"))
				}
				return c
			}
		}
		t.Fatalf("no session cookie: %v", r.header)
		return nil
	}
	get := func(c *http.Cookie, path string) response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
		req.AddCookie(c)
		return send(t, noRedirect, req)
	}

	if r := s.do(t, http.MethodGet, "/ui/", "", ""); r.code != http.StatusOK || !strings.Contains(string(r.body), `action="/ui/signin"`) {
		t.Fatalf("GET /ui/: %d %s", r.code, r.body)
	}
	alice := signIn(sessionAlice)
	id := s.submit(t, sessionAlice, "http://site.example:"+portOf(s.siteHost)+"/hold")
	if r := get(alice, "/v1/batch/"+id); r.code != http.StatusUnauthorized {
		t.Fatalf("/v1/ with the session cookie: %d", r.code)
	}
	if r := get(alice, "/ui/jobs/"+id); r.code != http.StatusOK || !strings.Contains(string(r.body), "/hold") {
		t.Fatalf("alice's job page: %d", r.code)
	}
	root := signIn(sessionRoot)
	testkit.WaitFor(t, "the admin's overview with charts", func() bool {
		body := string(get(root, "/ui/").body)
		return strings.Contains(body, id[:8]) && strings.Contains(body, "Workers busy") && strings.Contains(body, "Targets per second")
	})

	// An open event stream: serve stops at once all the same.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/ui/events", nil)
	req.AddCookie(alice)
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: update\n" {
		t.Fatalf("stream: %q %v", line, err)
	}
	s.stop()
	for {
		if _, err := br.ReadString('\n'); err != nil {
			break // the stream has ended
		}
	}
	// Ended by the stop, not cut at the shutdown timeout.
	if strings.Contains(s.logs.String(), "requests still in progress at shutdown") {
		t.Errorf("the open event stream held up the stop until its timeout:\n%s", s.logs.String())
	}
}
