package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
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
	t.Parallel()
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
	t.Parallel()
	var b *bundle
	var expired atomic.Bool
	expire := func(route string, h http.Handler) http.Handler {
		if route != "GET /v1/batch/{id}" {
			return h
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&expiringWriter{ResponseWriter: w, expire: func() {
				if !expired.Swap(true) {
					b.Clock.Advance(engine.DefaultTTL + time.Hour)
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
	if !strings.Contains(b.Logs.String(), "answer cut short") {
		t.Errorf("no log line for the cut:\n%s", b.Logs.String())
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

// TestAPI_ResultsJobExpiredMidStream: a job that expires while its
// ?results=1 answer is being written ends the answer with
// http.ErrAbortHandler after what was written (a 200 that does not pass
// for a whole answer), logs no URL, counts a 500 under the fixed route,
// and reads as missing afterwards, everywhere.
func TestAPI_ResultsJobExpiredMidStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/r0", "https://example.com/r1", "https://example.com/r2")
	b.waitTerminal(t, id)
	w := httpapi.NewBlockingWriter()
	defer w.Release()
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		b.handler.ServeHTTP(w, req)
	}()
	testkit.RequireClosed(t, w.Entered())
	// The job expires while its answer is being written.
	b.Clock.Advance(engine.DefaultTTL + time.Hour)
	if _, ok := b.Runner.Job(id); ok {
		t.Fatal("job still readable past its TTL")
	}
	w.Release()
	if v := testkit.Recv(t, panicked); v != http.ErrAbortHandler {
		t.Fatalf("answer cut short ended with %v, want http.ErrAbortHandler", v)
	}
	code, body := w.Written()
	if code != http.StatusOK || !strings.HasPrefix(body, `{"id":"`+id) {
		t.Fatalf("cut answer: %d %q", code, body)
	}
	if strings.HasSuffix(body, "]}\n") || strings.Contains(body, "r2") {
		t.Fatalf("cut answer passes for a whole one: %q", body)
	}
	testkit.RequireNoneOf(t, b.Logs.String(), "example.com")
	// The metrics count it as a 500 under the fixed route.
	scrape := b.do(t, http.MethodGet, "/metrics", "", nil)
	if !bytes.Contains(scrape.body, []byte(`siftbatch_http_requests_total{code="500",route="GET /v1/batch/{id}"} 1`)) {
		t.Fatalf("cut answer not counted as 500:\n%s", scrape.body)
	}
	// Afterwards the job reads as missing, everywhere.
	for _, p := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "/0", "/v1/batch/" + id + "?wait=1s"} {
		r := b.do(t, http.MethodGet, p, "alice-key", nil)
		wantError(t, r, http.StatusNotFound, "not found")
	}
}
