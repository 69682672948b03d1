package dashboard_test

// Adversarial tests that FAIL on the current dashboard: each names the
// rule it finds broken. See adversary_test.go for the helpers and the
// passing attacks.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/dashboard"
)

// sseEventNames parses raw Server-Sent Events as a browser does (the
// spec's line ends are CRLF, LF and CR alike) and returns the names of
// the events dispatched.
func sseEventNames(raw string) []string {
	var names []string
	name, hasData := "", false
	for _, line := range regexp.MustCompile("\r\n|\r|\n").Split(raw, -1) {
		switch {
		case line == "":
			if hasData {
				if name == "" {
					name = "message"
				}
				names = append(names, name)
			}
			name, hasData = "", false
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
		case strings.HasPrefix(line, "data:"):
			hasData = true
		}
	}
	return names
}

// TestAdversaryFailing_SSEFramingInjection: a target's error text (from
// the FetchFunc, i.e. from a remote server) that holds a CR splits the
// "update" event in a browser's EventSource: the rest of the text is read
// as new SSE fields, so a remote page can forge a "signedout" (or "gone")
// event and a "retry:" on the owner's job page, and the page's HTML is
// cut in two. The stream must deliver the page as one "update" event.
func TestAdversaryRegress_SSEFramingInjection(t *testing.T) {
	b := advSetup(t, nil, dashboard.Options{})
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://hostile.example/cr-err")
	b.waitTerminal(t, id)
	s := b.openStream(t, alice, "/ui/events?job="+id)
	var raw strings.Builder
	for range 10000 {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		raw.WriteString(line)
		if line == "\n" {
			break
		}
	}
	if !strings.Contains(raw.String(), "line1") {
		t.Fatalf("the first event lacks the error text: %q", raw.String())
	}
	if names := sseEventNames(raw.String()); len(names) != 1 || names[0] != "update" {
		t.Fatalf("one frame of the job stream dispatches %q in a browser, want [update]", names)
	}
}

// TestAdversaryFailing_ThrottleMemoryBounded: the sign-in throttle's
// memory must stay bounded however many addresses try. Past the
// addresses it tracks (10000), new addresses that tried within the last
// minute are never dropped: the table grows with every one (and each
// new address scans the whole table under the lock).
func TestAdversaryRegress_ThrottleMemoryBounded(t *testing.T) {
	// The log would grow with every attempt: discard it.
	b := setupWith(t, dashboard.Options{Log: slog.New(slog.DiscardHandler)})
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	const fill, more = 10000, 3000
	h0 := heap()
	for i := range fill {
		signInAt(b.handler, fmt.Sprintf("[2001:db8::%x]:1", i), "wrong", nil)
	}
	h1 := heap()
	start := time.Now()
	for i := range more {
		signInAt(b.handler, fmt.Sprintf("[2001:db8:1::%x]:1", i), "wrong", nil)
	}
	took := time.Since(start)
	h2 := heap()
	perAddr := float64(h1-h0) / fill
	// A bounded table grows by nothing past its bound; allow a little
	// noise (16 B an address; an entry costs several times that).
	if grew := float64(h2 - h1); grew > 16*more {
		t.Fatalf("after %d addresses, %d more grew the heap by %.0f KiB (%.0f B each, as before the bound: %.0f B); %d attempts took %s",
			fill, more, grew/1024, grew/more, perAddr, more, took)
	}
}

// TestAdversaryFailing_ThrottlePerClientBehindTLSProxy: with TLSProxy
// the operator says a proxy stands in front, so every client reaches the
// handler from the proxy's address. "Sign-in attempts are throttled per
// client address": one client's 5 wrong keys must not lock every other
// client out (the address the proxy appends, the rightmost
// X-Forwarded-For entry, is the client's).
func TestAdversaryRegress_ThrottlePerClientBehindTLSProxy(t *testing.T) {
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
}

// TestAdversaryFailing_ForeignRefererWithoutOrigin: a POST whose only
// provenance header is a Referer from another site (no Origin: older
// browsers, some privacy set-ups) is accepted: a sign-in (no CSRF token
// on that form: login CSRF) and a cancel. The brief asks that a foreign
// Origin or Referer be refused; the package doc names only Origin.
func TestAdversaryRegress_ForeignRefererWithoutOrigin(t *testing.T) {
	b := setup(t)
	alice := b.signIn(t, "alice-key")
	id := b.submit(t, "alice", "https://example.com/hold")
	ref := map[string]string{"Referer": "https://evil.example/attack.html"}
	if r := b.raw(t, nil, http.MethodPost, "/ui/signin", "key=bob-key", ref); r.code != http.StatusForbidden {
		t.Errorf("sign-in with a foreign Referer: %d, want 403", r.code)
	}
	if r := b.raw(t, alice.cookie, http.MethodPost, "/ui/jobs/"+id+"/cancel", url.Values{"csrf": {alice.csrf}}.Encode(), ref); r.code != http.StatusForbidden {
		t.Errorf("cancel with a foreign Referer: %d, want 403", r.code)
	}
}

// TestAdversaryFailing_StaticNonUTF8Path: a static path that is not
// UTF-8 is answered 500 Internal Server Error (http.FileServerFS on the
// embedded files): hostile input is a client error, 4xx.
func TestAdversaryRegress_StaticNonUTF8Path(t *testing.T) {
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

// TestAdversaryFailing_StreamsPerSessionBounded: one session (one
// stolen cookie, or one script) may open event streams without bound:
// each holds a connection, a goroutine and a render every Refresh. The
// brief asks that the crowd be bounded; 200 streams of one session are
// all accepted.
func TestAdversaryRegress_StreamsPerSessionBounded(t *testing.T) {
	b := setupWith(t, dashboard.Options{Refresh: time.Second})
	alice := b.signIn(t, "alice-key")
	const n = 200
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accepted := 0
	var open []*http.Response
	defer func() {
		cancel()
		for _, r := range open {
			r.Body.Close()
		}
		b.waitStreamsEnded(t)
	}()
	for range n {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/ui/events", nil)
		req.AddCookie(alice.cookie)
		resp, err := (&http.Transport{}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
		if resp.StatusCode == http.StatusOK {
			accepted++
		}
	}
	if accepted == n {
		t.Fatalf("one session holds %d event streams at once: no bound", accepted)
	}
}
