package dashboard_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// event is one Server-Sent Event.
type event struct{ name, data string }

// stream is an open event stream.
type stream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// openStream opens path's event stream as br, failing unless 200.
func (b *bundle) openStream(t testing.TB, br *browser, path string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(br.cookie)
	// A client of its own: the bundle's has a timeout for whole answers.
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("stream %s: %d %v", path, resp.StatusCode, resp.Header)
	}
	s := &stream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next event.
func (s *stream) next() (event, error) {
	var ev event
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" || data != nil {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// until reads events until one satisfies ok, failing on the stream's end
// (its context has a deadline).
func (s *stream) until(t testing.TB, what string, ok func(event) bool) event {
	t.Helper()
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("stream ended (%v) before %s", err, what)
		}
		if ok(ev) {
			return ev
		}
	}
}

// waitStreamsEnded waits until the server serves no request.
func (b *bundle) waitStreamsEnded(t testing.TB) {
	t.Helper()
	waitFor(t, 10*time.Second, "the event streams to end", func() bool { return b.active.Load() == 0 })
}

func TestDashboard_Events(t *testing.T) {
	t.Run("Updates", func(t *testing.T) {
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		id := b.submit(t, "alice", "https://example.com/hold", "https://example.com/fail")
		s := b.openStream(t, alice, "/ui/events")
		first := s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		if !strings.Contains(first.data, id) || !strings.Contains(first.data, `class="b-flight"`) && !strings.Contains(first.data, "queued") {
			t.Fatalf("first update: %s", first.data)
		}
		b.release()
		s.until(t, "the job to show as partial", func(ev event) bool {
			return ev.name == "update" && strings.Contains(ev.data, "Recently finished") && strings.Contains(ev.data, `s-partial">partial`)
		})
		// The job page's stream too.
		js := b.openStream(t, alice, "/ui/events?job="+id)
		ev := js.until(t, "the job page", func(ev event) bool { return ev.name == "update" })
		if !strings.Contains(ev.data, "https://example.com/hold") || !strings.Contains(ev.data, "check the URL") {
			t.Fatalf("job page update: %s", ev.data)
		}
	})
	t.Run("EndsWhenClientLeaves", func(t *testing.T) {
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		s := b.openStream(t, alice, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		s.close()
		b.waitStreamsEnded(t)
	})
	t.Run("EndsOnClose", func(t *testing.T) {
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		s := b.openStream(t, alice, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		b.dash.Close()
		for {
			if _, err := s.next(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("stream ended with %v, want EOF", err)
				}
				break
			}
		}
		b.waitStreamsEnded(t)
	})
	t.Run("EndsOnSignOut", func(t *testing.T) {
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		s := b.openStream(t, alice, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		if r := b.do(t, alice, http.MethodPost, "/ui/signout", url.Values{"csrf": {alice.csrf}}); r.code != http.StatusSeeOther {
			t.Fatalf("sign-out: %d", r.code)
		}
		s.until(t, "signedout", func(ev event) bool { return ev.name == "signedout" })
		b.waitStreamsEnded(t)
	})
	t.Run("OutlivesWriteTimeout", func(t *testing.T) {
		// A stream must go on past the server's WriteTimeout: a job
		// submitted well after it still shows.
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		s := b.openStream(t, alice, "/ui/events")
		start := time.Now()
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		waitFor(t, 10*time.Second, "twice the write timeout to pass", func() bool { return time.Since(start) > 2*writeTimeout })
		id := b.submit(t, "alice", "https://example.com/hold")
		s.until(t, "an update after the write timeout", func(ev event) bool {
			return ev.name == "update" && strings.Contains(ev.data, id)
		})
	})
}

// TestDashboard_Charts: the admin's overview draws three charts from the
// metrics' registry, and counts the busy workers.
func TestDashboard_Charts(t *testing.T) {
	b := setup(t)
	root := b.signIn(t, "root-key")
	id := b.submit(t, "alice", "https://example.com/hold")
	waitFor(t, 10*time.Second, "a busy worker", func() bool {
		return strings.Contains(b.do(t, root, http.MethodGet, "/ui/", nil).body, "<dd>1 / 2</dd>")
	})
	b.release()
	b.waitTerminal(t, id)
	var body string
	waitFor(t, 10*time.Second, "the charts to show a target", func() bool {
		body = b.do(t, root, http.MethodGet, "/ui/", nil).body
		return strings.Count(body, `<polyline class="line"`) == 3 && strings.Contains(body, "Targets per second")
	})
	for _, chart := range []string{"Targets per second", "Fetch latency", "Live jobs"} {
		if !strings.Contains(body, chart) {
			t.Errorf("the admin's overview lacks the chart %q", chart)
		}
	}
}

// streamCode opens path's event stream as br and returns its status,
// closing it at once.
func (b *bundle) streamCode(t testing.TB, br *browser, path string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(br.cookie)
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDashboard_StreamsPerKeyBounded: one key holds at most 32 event
// streams at once, across all its sessions (16 a session): the 33rd, from
// a session that holds none, is 429; another key's streams are not
// counted with them; a stream closed frees its place.
func TestDashboard_StreamsPerKeyBounded(t *testing.T) {
	b := setup(t)
	sessions := []*browser{b.signIn(t, "alice-key"), b.signIn(t, "alice-key"), b.signIn(t, "alice-key")}
	bob := b.signIn(t, "bob-key")
	var open []*stream
	for i := range 32 {
		open = append(open, b.openStream(t, sessions[i/16], "/ui/events"))
	}
	if code := b.streamCode(t, sessions[2], "/ui/events"); code != http.StatusTooManyRequests {
		t.Fatalf("alice's 33rd stream, from a third session: %d, want 429", code)
	}
	if code := b.streamCode(t, sessions[2], "/ui/events?job="+missingID); code != http.StatusTooManyRequests {
		t.Fatalf("alice's 33rd stream, a job page's: %d, want 429", code)
	}
	b.openStream(t, bob, "/ui/events").until(t, "bob's first update", func(ev event) bool { return ev.name == "update" })

	// One of alice's closes: its place is free again.
	served := b.active.Load()
	open[0].close()
	waitFor(t, 10*time.Second, "the closed stream to end", func() bool { return b.active.Load() < served })
	b.openStream(t, sessions[2], "/ui/events").until(t, "the new stream's first update", func(ev event) bool { return ev.name == "update" })
	if code := b.streamCode(t, sessions[2], "/ui/events"); code != http.StatusTooManyRequests {
		t.Fatalf("alice's 33rd stream, once one was replaced: %d, want 429", code)
	}
}
