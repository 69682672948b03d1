package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// TestAPI_TurnsHoldUpNoOne: with one request worked on at a time
// (MaxInFlight 1), a client that sends its body slowly, and a long-poll,
// hold up no other caller: a request gives its turn up while it waits on
// the network or the job.
func TestAPI_TurnsHoldUpNoOne(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, httpapi.Options{MaxInFlight: 1})
	done := b.submit(t, "alice-key", "https://example.com/a")
	b.waitTerminal(t, done)
	live := b.submit(t, "bob-key", holdURL)
	b.waitRunning(t, live)

	// A POST whose body never comes.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer carol-key\r\nContent-Length: 100\r\n\r\n{")
	// A long-poll on a job that does not end.
	polled := make(chan int, 1)
	go func() { polled <- b.do(t, http.MethodGet, "/v1/batch/"+live+"?wait=60s", "bob-key", nil).code }()

	// The slow body never comes and the long-poll holds for 2 s: held
	// turns would keep these polls waiting (the server has no read
	// timeout here), so they must all answer meanwhile.
	answered := make(chan int, 20)
	go func() {
		for range 20 {
			answered <- b.do(t, http.MethodGet, "/v1/batch/"+done, "alice-key", nil).code
		}
	}()
	for range 20 {
		if code := testkit.Recv(t, answered); code != http.StatusOK {
			t.Fatalf("poll: %d", code)
		}
	}
	select {
	case <-polled:
		t.Fatal("the long-poll answered before its job ended or its wait was over")
	default:
	}
	b.release()
	if code := testkit.Recv(t, polled); code != http.StatusOK {
		t.Fatalf("long-poll: %d", code)
	}
}

// slowSignals tells a test where the answers of requests marked
// "X-Test-Slow: 1" stand: started is closed when the first Write of the
// answer's body begins, returned when that Write returns.
type slowSignals struct {
	started, returned chan struct{}
	once              sync.Once
}

// wrap is an Options.Wrap that watches the marked requests' first Write.
func (s *slowSignals) wrap(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Slow") == "" {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&watchedWriter{ResponseWriter: w, s: s}, r)
	})
}

type watchedWriter struct {
	http.ResponseWriter
	s *slowSignals
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	first := false
	w.s.once.Do(func() { first = true; close(w.s.started) })
	n, err := w.ResponseWriter.Write(p)
	if first {
		close(w.s.returned)
	}
	return n, err
}

// TestAPI_SlowReaderHoldsNoTurn: with one request worked on at a time
// (MaxInFlight 1), a client that never reads its socket, asking for a
// large answer (one 256 KiB result; a job's results), holds no turn while
// its answer waits on its socket: while it is stuck in the middle of its
// answer, another caller's and its own caller's reads of a job, of a
// target, of a job's results, a list and a cancel all answer. Closing its
// connection ends its answer.
func TestAPI_SlowReaderHoldsNoTurn(t *testing.T) {
	t.Parallel()
	for _, slow := range []struct {
		name, path string // {id} is alice's job
	}{
		{name: "target", path: "/v1/batch/{id}/0"},
		{name: "results", path: "/v1/batch/{id}?results=1"},
	} {
		t.Run(slow.name, func(t *testing.T) {
			t.Parallel()
			// holdURL is held until the runner closes; anything else is
			// a 256 KiB page.
			fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
				if tg.URL == holdURL {
					<-ctx.Done()
					return engine.Result{}, ctx.Err()
				}
				return bigFetch(ctx, c, tg)
			}
			s := &slowSignals{started: make(chan struct{}), returned: make(chan struct{})}
			b := setupWith(t, fetch, httpapi.Options{MaxInFlight: 1, Wrap: s.wrap})
			srv, _ := keptServer(t, b.handler)
			mine := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3", "https://example.com/4")
			b.waitTerminal(t, mine)
			theirs := b.submit(t, "bob-key", "https://example.com/1", "https://example.com/2")
			b.waitTerminal(t, theirs)
			live := b.submit(t, "bob-key", holdURL)
			b.waitRunning(t, live)

			// The slow reader: a tiny receive buffer, and it never reads.
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.(*net.TCPConn).SetReadBuffer(1 << 10)
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nX-Test-Slow: 1\r\n\r\n", strings.ReplaceAll(slow.path, "{id}", mine))
			testkit.RequireClosed(t, s.started)

			// Every other read answers while the slow reader is stuck.
			client := &http.Client{Transport: &http.Transport{}, Timeout: testkit.Deadline}
			defer client.CloseIdleConnections()
			get := func(key, path string, method string) response {
				req, _ := http.NewRequest(method, srv.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				return send(t, client, req)
			}
			for _, rq := range []struct{ key, method, path string }{
				{"bob-key", http.MethodGet, "/v1/batch/" + theirs},
				{"bob-key", http.MethodGet, "/v1/batch/" + theirs + "/1"},
				{"bob-key", http.MethodGet, "/v1/batch/" + theirs + "?results=1"},
				{"bob-key", http.MethodGet, "/v1/batch"},
				{"alice-key", http.MethodGet, "/v1/batch/" + mine},
				{"alice-key", http.MethodGet, "/v1/batch?limit=5"},
				{"bob-key", http.MethodDelete, "/v1/batch/" + live},
			} {
				r := get(rq.key, rq.path, rq.method)
				wantCode(t, r, http.StatusOK)
				select {
				case <-s.returned:
					t.Fatalf("%s %s answered only once the slow reader's write had returned", rq.method, rq.path)
				default:
				}
			}
			if _, ok := b.Runner.Job(live); !ok {
				t.Fatal("the cancelled job is gone")
			}

			// Its answer began (200), and its connection's end frees its
			// handler: the server's WriteTimeout ends a reader that never
			// reads.
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200 ") {
				t.Fatalf("the slow reader's answer begins %q, %v", line, err)
			}
			conn.Close()
			testkit.RequireClosed(t, s.returned)
		})
	}
}

// TestAPI_BlockedWriteHoldsNoTurn: whatever a request answers (a job, its
// results, a target, a list, a cancel, a long-poll, an error), it gives
// its turn up before its answer reaches the client: with MaxInFlight 1, a
// request whose writes block for good holds up no other caller's read.
func TestAPI_BlockedWriteHoldsNoTurn(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, httpapi.Options{MaxInFlight: 1})
	mine := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2")
	b.waitTerminal(t, mine)
	theirs := b.submit(t, "bob-key", "https://example.com/3")
	b.waitTerminal(t, theirs)
	live := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, live)
	for _, tc := range []struct{ name, method, path string }{
		{"job", http.MethodGet, "/v1/batch/" + mine},
		{"results", http.MethodGet, "/v1/batch/" + mine + "?results=1"},
		{"target", http.MethodGet, "/v1/batch/" + mine + "/1"},
		{"long-poll", http.MethodGet, "/v1/batch/" + mine + "?wait=30s"},
		{"list", http.MethodGet, "/v1/batch?limit=100"},
		{"not found", http.MethodGet, "/v1/batch/" + missingID},
		{"bad request", http.MethodGet, "/v1/batch?limit=0"},
		{"cancel ended", http.MethodDelete, "/v1/batch/" + mine},
		{"cancel", http.MethodDelete, "/v1/batch/" + live}, // last: it ends the live job
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httpapi.NewBlockingWriter()
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			served := make(chan struct{})
			go func() {
				defer close(served)
				b.handler.ServeHTTP(w, req)
			}()
			defer func() { w.Release(); <-served }()
			testkit.RequireClosed(t, w.Entered())
			// Its write blocks: another caller's read still answers.
			answered := make(chan int, 1)
			go func() {
				rec := httptest.NewRecorder()
				probe := httptest.NewRequest(http.MethodGet, "/v1/batch/"+theirs, nil)
				probe.Header.Set("Authorization", "Bearer bob-key")
				b.handler.ServeHTTP(rec, probe)
				answered <- rec.Code
			}()
			if code := testkit.Recv(t, answered); code != http.StatusOK {
				t.Fatalf("bob's read: %d", code)
			}
		})
	}
}
