package dashboard_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/enginetest/testkit"
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
	return b.openStreamAt(t, b.url, br, path)
}

// openStreamAt is openStream on the server at base.
func (b *bundle) openStreamAt(t testing.TB, base string, br *browser, path string) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
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
	testkit.WaitFor(t, "the event streams to end", func() bool { return b.active.Load() == 0 })
}

func TestDashboard_Events(t *testing.T) {
	t.Parallel()
	t.Run("Updates", func(t *testing.T) {
		t.Parallel()
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
		t.Parallel()
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		s := b.openStream(t, alice, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		s.close()
		b.waitStreamsEnded(t)
	})
	t.Run("EndsOnClose", func(t *testing.T) {
		t.Parallel()
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
		t.Parallel()
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
	t.Run("EndsOnSessionExpiry", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, dashboard.Options{SessionTTL: time.Minute})
		br := b.signIn(t, "alice-key")
		s := b.openStream(t, br, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		b.Clock.Advance(2 * time.Minute)
		s.until(t, "signedout", func(ev event) bool { return ev.name == "signedout" })
		if _, err := s.next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after signedout: %v, want EOF", err)
		}
		b.waitStreamsEnded(t)
	})
	t.Run("OutlivesWriteTimeout", func(t *testing.T) {
		t.Parallel()
		// A stream goes on past the server's WriteTimeout: on a server
		// whose WriteTimeout (1ns) has passed before any handler writes,
		// a page's answer is cut, while a stream sends its first update
		// and then one for a job submitted after it opened.
		b := setup(t)
		alice := b.signIn(t, "alice-key")
		srv := httptest.NewUnstartedServer(b.handler)
		srv.Config.WriteTimeout = time.Nanosecond
		srv.Start()
		t.Cleanup(srv.Close) // after the stream's close: it waits for the stream's request
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testkit.Deadline}
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/", nil)
		req.AddCookie(alice.cookie)
		if resp, err := client.Do(req); err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("a page was answered (%d) past the WriteTimeout: the check below would prove nothing", resp.StatusCode)
			}
		}
		s := b.openStreamAt(t, srv.URL, alice, "/ui/events")
		s.until(t, "the first update", func(ev event) bool { return ev.name == "update" })
		id := b.submit(t, "alice", "https://example.com/hold")
		s.until(t, "an update after the write timeout", func(ev event) bool {
			return ev.name == "update" && strings.Contains(ev.data, id)
		})
	})

}

// TestDashboard_Charts: the admin's overview draws three charts from the
// metrics' registry, and counts the busy workers.
func TestDashboard_Charts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	root := b.signIn(t, "root-key")
	id := b.submit(t, "alice", "https://example.com/hold")
	testkit.WaitFor(t, "a busy worker", func() bool {
		return strings.Contains(b.do(t, root, http.MethodGet, "/ui/", nil).body, "<dd>1 / 2</dd>")
	})
	b.release()
	b.waitTerminal(t, id)
	var body string
	testkit.WaitFor(t, "the charts to show a target", func() bool {
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
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
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

// TestDashboard_StreamsPerKeyBounded: one session holds at most 16 event
// streams at once (the 17th is 429 while its key holds only 16), one key
// at most 32 across all its sessions: the 33rd, from a session that holds
// none, is 429; another key's streams are not counted with them; a stream
// closed frees its place.
func TestDashboard_StreamsPerKeyBounded(t *testing.T) {
	t.Parallel()
	// Only first updates are read: no refresh renders 34 pages a tick.
	b := setupWith(t, dashboard.Options{Refresh: time.Hour})
	sessions := []*browser{b.signIn(t, "alice-key"), b.signIn(t, "alice-key"), b.signIn(t, "alice-key")}
	bob := b.signIn(t, "bob-key")
	var open []*stream
	for range 16 {
		open = append(open, b.openStream(t, sessions[0], "/ui/events"))
	}
	if code := b.streamCode(t, sessions[0], "/ui/events"); code != http.StatusTooManyRequests {
		t.Fatalf("a session's 17th stream: %d, want 429", code)
	}
	for range 16 {
		open = append(open, b.openStream(t, sessions[1], "/ui/events"))
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
	testkit.WaitFor(t, "the closed stream to end", func() bool { return b.active.Load() < served })
	b.openStream(t, sessions[2], "/ui/events").until(t, "the new stream's first update", func(ev event) bool { return ev.name == "update" })
	if code := b.streamCode(t, sessions[2], "/ui/events"); code != http.StatusTooManyRequests {
		t.Fatalf("alice's 33rd stream, once one was replaced: %d, want 429", code)
	}
}

// TestDashboard_StreamCrowdEndsOnClose: 48 event streams of three
// sessions (a third of them a job page's): those whose clients leave end;
// Close ends every other one (EOF, not an error) and the requests return;
// after Close a new stream ends at once, and Close again is harmless.
func TestDashboard_StreamCrowdEndsOnClose(t *testing.T) {
	t.Parallel()
	// Only the first update is read: no refresh renders 48 pages a tick.
	b := setupWith(t, dashboard.Options{Refresh: time.Hour})
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
	testkit.WaitFor(t, "half the streams to end", func() bool { return b.active.Load() <= n/2 })
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
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
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

// TestDashboard_EventsKeepHostileTextInOneEvent: a target's error text
// (from the FetchFunc, i.e. from a remote server) that holds a CR must not
// split the "update" event in a browser's EventSource: read as new SSE
// fields, the rest of the text would let a remote page forge a
// "signedout" (or "gone") event and a "retry:" on the owner's job page,
// and cut the page's HTML in two. The stream delivers the page as one
// "update" event.
func TestDashboard_EventsKeepHostileTextInOneEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
