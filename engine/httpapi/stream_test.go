package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
)

// sizeWriter is a ResponseWriter that records the size of each Write.
type sizeWriter struct {
	*httptest.ResponseRecorder
	writes []int
}

func (s *sizeWriter) Write(b []byte) (int, error) {
	s.writes = append(s.writes, len(b))
	return s.ResponseRecorder.Write(b)
}

// TestAPI_ResultsStreamed: a ?results=1 answer of a large job (4 results
// of 256 KiB) goes out one result at a time: no Write carries more than
// one result and a little JSON around it, and together they are the whole
// job, as valid JSON.
func TestAPI_ResultsStreamed(t *testing.T) {
	b := setupWith(t, bigFetch, httpapi.Options{})
	id := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3", "https://example.com/4")
	b.waitTerminal(t, id)
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	w := &sizeWriter{ResponseRecorder: httptest.NewRecorder()}
	b.handler.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("answer %d", w.Code)
	}
	largest, total := 0, 0
	for _, n := range w.writes {
		largest, total = max(largest, n), total+n
	}
	t.Logf("%d writes, the largest %d bytes, %d in all", len(w.writes), largest, total)
	if one := 256 << 10; largest > one+1<<10 || total < 4*one {
		t.Fatalf("writes %v: want each at most one result (%d bytes) and a little JSON", w.writes, one)
	}
	var job struct {
		TargetsDone int `json:"targets_done"`
		Targets     []struct {
			Result *engine.Result `json:"result"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &job); err != nil {
		t.Fatal(err)
	}
	for i, tg := range job.Targets {
		if tg.Result == nil || len(tg.Result.Content) != 256<<10 {
			t.Fatalf("target %d has no whole result", i)
		}
	}
}

// TestAPI_ResultsCutShort: if a job is deleted while its ?results=1
// answer is written, the answer ends early where a client sees it: the
// connection closes before the end of the chunked body (an unexpected EOF
// in Go, curl's exit 18), and the JSON is incomplete. Here the job
// expires (the clock moves past its TTL) once the first result is out.
func TestAPI_ResultsCutShort(t *testing.T) {
	var b *bundle
	var expired atomic.Bool
	expire := func(route string, h http.Handler) http.Handler {
		if route != "GET /v1/batch/{id}" {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&expiringWriter{ResponseWriter: w, expire: func() {
				if !expired.Swap(true) {
					b.clock.Advance(engine.DefaultTTL + time.Hour)
				}
			}}, r)
		})
	}
	b = setupWith(t, bigFetch, httpapi.Options{Wrap: expire})
	id := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3")
	b.waitTerminal(t, id)

	req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("answer %d, read error %v; want 200 and an unexpected EOF", resp.StatusCode, err)
	}
	if len(body) < 256<<10 || json.Valid(body) {
		t.Fatalf("%d bytes, valid JSON %v: want the first result and incomplete JSON", len(body), json.Valid(body))
	}
	if !strings.Contains(b.logs.String(), "answer cut short") {
		t.Errorf("no log line for the cut:\n%s", b.logs.String())
	}
	// The job is gone for good now.
	wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil), http.StatusNotFound, "job not found")
}

// expiringWriter calls expire after its first Write.
type expiringWriter struct {
	http.ResponseWriter
	expire func()
}

func (e *expiringWriter) Write(p []byte) (int, error) {
	n, err := e.ResponseWriter.Write(p)
	e.expire()
	return n, err
}

// rawExchange sends raw on a new connection to srv and reads the answer.
func rawExchange(t *testing.T, srv *httptest.Server, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// TestAPI_BodyErrors: a body that stops coming is answered 408, a body
// whose chunked encoding is malformed 400 "bad request body"; neither
// answer names a socket address, as the read error's text does.
func TestAPI_BodyErrors(t *testing.T) {
	b := setup(t)
	srv := httptest.NewUnstartedServer(b.handler)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	head := "POST /v1/batch HTTP/1.1\r\nHost: siftbatch\r\nAuthorization: Bearer alice-key\r\nContent-Type: application/json\r\n"
	for _, tc := range []struct {
		name, raw string
		code      int
		msg       string
	}{
		{"body stops", head + "Content-Length: 100\r\n\r\n" + `{"targets":`, http.StatusRequestTimeout, "body read timed out"},
		{"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", http.StatusBadRequest, "bad request body"},
		{"chunk without its CRLF", head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", http.StatusBadRequest, "bad request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, srv, tc.raw)
			r := response{code: resp.StatusCode, header: resp.Header, body: []byte(body)}
			wantError(t, r, tc.code, tc.msg)
			if m := r.json(t); m["error"] != tc.msg {
				t.Errorf("error %q, want exactly %q", m["error"], tc.msg)
			}
			for _, leak := range []string{"127.0.0.1", "tcp", "i/o"} {
				if strings.Contains(body, leak) {
					t.Errorf("the answer names %q: %s", leak, body)
				}
			}
		})
	}
}

// TestAPI_LongPollLimits: a wait ends when its time is up, with the job as
// it stands; a bad or too long wait is 400 with a hint.
func TestAPI_LongPollLimits(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, id)
	start := time.Now()
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=200ms", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if st := r.json(t)["status"]; st != "running" {
		t.Fatalf("status %v after the wait, want running", st)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("answered after %s, before the wait was up", d)
	}
	for _, bad := range []string{"x", "-1s", "61s", "2m", "1h", "99999"} {
		wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait="+bad, "alice-key", nil), http.StatusBadRequest, "bad wait")
	}
	for _, good := range []string{"0", "0s", "1", "10ms"} {
		wantCode(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait="+good, "alice-key", nil), http.StatusOK)
	}
	// Another caller's job is 404 at once, wait or not.
	wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=30s", "bob-key", nil), http.StatusNotFound, "job not found")
}
