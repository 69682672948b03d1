package metrics_test

// Adversarial black-box tests of the metrics: labels stay fixed under
// hostile requests, hooks and middleware survive odd use.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/metrics"
)

func TestAdversary_MiddlewareLabelsUnderHostilePaths(t *testing.T) {
	m, scrape := setup(t)
	codes := []int{200, 201, 204, 301, 400, 401, 404, 409, 413, 422, 429, 500, 503, 599}
	h := m.Middleware("GET /v1/batch/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c int
		fmt.Sscan(r.URL.Query().Get("c"), &c)
		if c == 0 {
			w.WriteHeader(http.StatusContinue) // a 1xx is not the answer's code
			w.Write([]byte("x"))
			return
		}
		w.WriteHeader(c)
		w.WriteHeader(999) // a second WriteHeader changes nothing
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j, c := range codes {
				path := fmt.Sprintf("/v1/batch/%032x/%d/%s?c=%d", i*100+j, j, strings.Repeat("e", j*50), c)
				resp, err := client.Get(srv.URL + path)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			resp, err := client.Get(srv.URL + "/evil%22%7D%20label?c=0")
			if err == nil {
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	s := scrape()
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "siftbatch_http_requests_total{") {
			continue
		}
		if !strings.Contains(line, `route="GET /v1/batch/{id}"`) || strings.Contains(line, "eee") || strings.Contains(line, "evil") {
			t.Errorf("unexpected series: %s", line)
		}
	}
	for _, c := range codes {
		want := fmt.Sprintf(`siftbatch_http_requests_total{code="%d",route="GET /v1/batch/{id}"}`, c)
		n := 16.0
		if c == 200 {
			n = 32 // and the 1xx-then-body requests
		}
		if v := value(t, s, want); v != n {
			t.Errorf("%s = %v, want %v", want, v, n)
		}
	}
	if strings.Contains(s, `code="999"`) || strings.Contains(s, `code="100"`) {
		t.Errorf("a second or informational WriteHeader became a label:\n%s", s)
	}
}

func TestAdversary_MiddlewarePanicsGoOn(t *testing.T) {
	m, scrape := setup(t)
	for _, v := range []any{"boom", http.ErrAbortHandler, fmt.Errorf("wrapped")} {
		h := m.Middleware("POST /v1/batch", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(v) }))
		got := func() (r any) {
			defer func() { r = recover() }()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/batch", nil))
			return nil
		}()
		if got != v {
			t.Errorf("panic %v came out as %v", v, got)
		}
	}
	if v := value(t, scrape(), `siftbatch_http_requests_total{code="500",route="POST /v1/batch"}`); v != 3 {
		t.Errorf("panics counted %v, want 3", v)
	}
}

func TestAdversary_JoinOddHooks(t *testing.T) {
	m, scrape := setup(t)
	var own []string
	var mu sync.Mutex
	j := metrics.Join(engine.Hooks{}, m.Hooks(), engine.Hooks{Job: func(o string) {
		mu.Lock()
		own = append(own, o)
		mu.Unlock()
	}}, engine.Hooks{})
	if j.Job == nil || j.Target == nil || j.Depth == nil {
		t.Fatal("joined hooks lost a field")
	}
	if z := metrics.Join(); z.Job != nil || z.Target != nil || z.JobSeconds != nil || z.Depth != nil || z.Inflight != nil {
		t.Fatal("Join() has non-nil fields")
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 100; k++ {
				j.Job(engine.StatusDone)
				j.Target(nil, -time.Second, 0)
				j.Target(fmt.Errorf("x: %w", engine.ErrRetryLater), time.Duration(1<<62), 1<<40)
				j.JobSeconds(-time.Hour)
				j.Depth(-1)
				j.Inflight(1 << 30)
			}
		}()
	}
	wg.Wait()
	s := scrape()
	if v := value(t, s, `siftbatch_jobs_total{outcome="done"}`); v != 800 {
		t.Errorf("jobs done %v, want 800", v)
	}
	if v := value(t, s, `siftbatch_targets_total{result="busy"}`); v != 800 {
		t.Errorf("targets busy %v, want 800", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(own) != 800 {
		t.Errorf("own hook called %d times, want 800", len(own))
	}
}
