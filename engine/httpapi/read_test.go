package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// TestAPI_WaitValues: a ?wait= that is not a duration (or whole seconds)
// from 0 to MaxWait is 400 with a hint and leaks nothing; the values that
// are, with the job live, answer with the job as it stands once their
// wait is over (TestAPI_NotYoursSameWork checks, counting the runner's
// calls, that a bad wait waits for nothing).
func TestAPI_WaitValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, id)
	bad := []string{
		"-1s", "-1", "61s", "60.000000001s", "1m1s", "1h", "1e9h", "1e9", "9223372036854775807",
		"9223372036854775808ns", "99999999999999999999s", "99999999999999999999", "65535", "65536",
		"abc", "NaN", "Inf", "+Inf", "0x10", " 1s", "1s ", "1 s", "1s\x00", "30S", "٣٠", "1.5", "--1s", "1s1", "∞", "",
	}
	for _, v := range bad {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait="+url.QueryEscape(v), "alice-key", nil)
		if r.code != http.StatusBadRequest {
			t.Errorf("wait=%s: got %d, want 400: %s", v, r.code, r.body)
			continue
		}
		m := r.json(t)
		if h, _ := m["hint"].(string); h == "" {
			t.Errorf("wait=%s: no hint: %s", v, r.body)
		}
		wantNoLeak(t, "wait="+v, r.body)
	}
	// Values that answer at once, or once their wait is over, with the
	// job live.
	for _, v := range []string{"0", "0s", "-0", "+0s", "1ns", "1ms", "1", "200ms"} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait="+url.QueryEscape(v), "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if s := r.json(t)["status"]; s != engine.StatusRunning {
			t.Errorf("wait=%s: status %v", v, s)
		}
	}
}

// TestAPI_ResultsAndIndexValues: ?results= is 1 or true (with the
// results), 0 or false (without); anything else is 400; a
// page's text is written as it is, with no HTML escaping; a failed
// target has a hint and no result; a target index is plain decimal within
// the job, anything else 404.
func TestAPI_ResultsAndIndexValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/<b>&\"x\"", "https://example.com/fail")
	b.waitTerminal(t, id)
	for _, v := range []string{"1", "true"} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results="+v, "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if !bytes.Contains(r.body, []byte(`"result":`)) {
			t.Errorf("results=%s: no result: %s", v, r.body)
		}
	}
	for _, v := range []string{"0", "false"} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results="+v, "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if bytes.Contains(r.body, []byte(`"result":`)) {
			t.Errorf("results=%s: results included: %s", v, r.body)
		}
	}
	// Every other spelling is 400 naming the parameter
	// (TestAPI_QueryParameters has the other routes).
	for _, v := range []string{"", "t", "TRUE", "True", "no", "2", "yes", "%00", "1%00", strings.Repeat("1", 5000)} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results="+v, "alice-key", nil)
		wantError(t, r, http.StatusBadRequest, "bad results")
	}
	// The page text is written as it is: no HTML escaping.
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if !bytes.Contains(r.body, []byte(`<b>&`)) || bytes.Contains(r.body, []byte(`\u003c`)) {
		t.Errorf("target 0 escapes HTML: %s", r.body)
	}
	r = b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if bytes.Contains(r.body, []byte(`"result"`)) || !bytes.Contains(r.body, []byte(`"hint"`)) {
		t.Errorf("failed target 1: %s", r.body)
	}
	for _, idx := range []string{"2", "-1", "-0", "+0", "+1", "00", "01", "1e0", "0x0", "0.0", "1.", "%200", "0%20",
		"99999", "100000", "2147483648", "9223372036854775808", "99999999999999999999999999", "١", "０", "NaN", "0%00"} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/"+idx, "alice-key", nil)
		if r.code != http.StatusNotFound {
			t.Errorf("idx %s: got %d, want 404: %s", idx, r.code, r.body)
			continue
		}
		wantCode(t, r, http.StatusNotFound)
		wantNoLeak(t, "idx "+idx, r.body)
	}
}

// TestAPI_LongPollCrowd: 48 long-polls of a live job by its owner and 48
// by a stranger: every stranger is answered 404 at once, while the
// owners wait; once the job ends, every owner is answered with it done.
func TestAPI_LongPollCrowd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL, "https://example.com/after")
	b.waitRunning(t, id)
	const owners, strangers = 48, 48
	type out struct {
		who  string
		code int
		body []byte
		err  error
	}
	results := make(chan out, owners+strangers)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 2 * testkit.Deadline}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	poll := func(who, key string) {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+id+"?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			results <- out{who: who, err: err}
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		results <- out{who, resp.StatusCode, data, nil}
	}
	wg.Add(owners + strangers)
	for i := 0; i < owners; i++ {
		go poll("alice", "alice-key")
	}
	for i := 0; i < strangers; i++ {
		go poll("bob", "bob-key")
	}
	// Every stranger answers 404 at once, while the owners still wait.
	for range strangers {
		o := testkit.Recv(t, results)
		if o.err != nil {
			t.Fatalf("%s: %v", o.who, o.err)
		}
		if o.who != "bob" || o.code != http.StatusNotFound {
			t.Fatalf("before the release: %s got %d %s", o.who, o.code, o.body)
		}
	}
	b.release()
	for range owners {
		o := testkit.Recv(t, results)
		if o.err != nil || o.code != http.StatusOK {
			t.Fatalf("%s: %d %v %s", o.who, o.code, o.err, o.body)
		}
		if !bytes.Contains(o.body, []byte(`"status":"done"`)) {
			t.Fatalf("owner's poll ended before the job: %s", o.body)
		}
	}
	wg.Wait()
}

// TestAPI_LongPollsEndOnShutdown: a graceful stop (Shutdown with EndWaits
// registered) is not held up by 16 long-polls of a live job: each is
// answered 200 with the job running; a wait asked for afterwards answers
// at once.
func TestAPI_LongPollsEndOnShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, id)
	keys, _ := httpapi.ReadKeys(strings.NewReader(testKeys))
	// entered: a poll reached the handler.
	var entered testkit.Signal[struct{}]
	entered.Init(t)
	api, err := httpapi.New(b.Runner, keys, httpapi.Options{Wrap: func(route string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.Signal(struct{}{})
			h.ServeHTTP(w, r)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, api, func(s *httptest.Server) { s.Config.RegisterOnShutdown(api.EndWaits) })
	const n = 16
	type out struct {
		code int
		body []byte
		err  error
	}
	results := make(chan out, n)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 2 * testkit.Deadline}
	defer client.CloseIdleConnections()
	for i := 0; i < n; i++ {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/batch/"+id+"?wait=60s", nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			resp, err := client.Do(req)
			if err != nil {
				results <- out{err: err}
				return
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- out{resp.StatusCode, data, err}
		}()
	}
	for range n {
		entered.Wait(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("graceful stop held up by long-polls: %v", err)
	}
	for range n {
		o := testkit.Recv(t, results)
		if o.err != nil || o.code != http.StatusOK || !bytes.Contains(o.body, []byte(`"status":"running"`)) {
			t.Fatalf("poll ended by shutdown: %d %v %s", o.code, o.err, o.body)
		}
	}
	// A later wait answers at once.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?wait=60s", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	done := make(chan struct{})
	go func() { api.ServeHTTP(rec, req); close(done) }()
	testkit.RequireClosed(t, done)
	if rec.Code != http.StatusOK {
		t.Fatalf("wait after EndWaits: %d %s", rec.Code, rec.Body)
	}
}

// TestAPI_LongPollLimits: a wait ends when its time is up, with the job as
// it stands (TestAPI_LongPoll checks that it ended because its time was
// up); a bad or too long wait is 400 with a hint.
func TestAPI_LongPollLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, id)
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=200ms", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if st := r.json(t)["status"]; st != "running" {
		t.Fatalf("status %v after the wait, want running", st)
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

// TestAPI_GetTimings: GET /v1/batch/{id} has started_at and ended_at once
// known, and each stored target its duration_ms (rounded up); absent
// while the job is queued, live or the target pending; one target's
// answer has its duration_ms too.
func TestAPI_GetTimings(t *testing.T) {
	t.Parallel()
	var b *bundle
	gate := testkit.NewGate()
	b = setupWith(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/hold") {
			if err := gate.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		}
		b.Clock.Advance(1500*time.Millisecond + 1)
		return engine.Result{Content: "page"}, nil
	}, httpapi.Options{})
	t0 := b.Clock.Now().Unix()
	id := b.submit(t, "alice-key", "https://example.com/a", "https://example.com/hold")
	testkit.WaitFor(t, "first target stored", func() bool { j, _ := b.Runner.Job(id); return j.TargetsDone == 1 })
	m := b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil).json(t)
	if m["started_at"] != float64(t0) {
		t.Fatalf("started_at %v, want %d", m["started_at"], t0)
	}
	if _, ok := m["ended_at"]; ok {
		t.Fatalf("ended_at on a live job: %v", m)
	}
	ts := m["targets"].([]any)
	if d := ts[0].(map[string]any)["duration_ms"]; d != float64(1501) {
		t.Fatalf("duration_ms %v, want 1501 (rounded up)", d)
	}
	if _, ok := ts[1].(map[string]any)["duration_ms"]; ok {
		t.Fatalf("duration_ms on a running target: %v", ts[1])
	}
	gate.Open()
	b.waitTerminal(t, id)
	m = b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil).json(t)
	if m["ended_at"] != float64(t0+3) {
		t.Fatalf("ended_at %v, want %d", m["ended_at"], t0+3)
	}
	one := b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", "alice-key", nil).json(t)
	if one["duration_ms"] != float64(1501) {
		t.Fatalf("target 1: %v", one)
	}
	list := b.do(t, http.MethodGet, "/v1/batch", "alice-key", nil).json(t)["jobs"].([]any)
	if j := list[0].(map[string]any); j["started_at"] != float64(t0) || j["ended_at"] != float64(t0+3) {
		t.Fatalf("the list's times: %v", j)
	}
}

// TestAPI_ShortIDsAreNoIDs: ids over the API stay whole (issue 26): a
// job's short id, a longer prefix of it, its id in upper case or with
// a digit more are each answered, on every route that takes an id and for
// its owner too, exactly as an id that names no job; the job is untouched.
func TestAPI_ShortIDsAreNoIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/whole")
	b.waitTerminal(t, id)
	missing := strings.Repeat("0", 32)
	for _, bad := range []string{engine.ShortID(id), id[:4], id[:16], id[:31], strings.ToUpper(id), id + "0"} {
		for _, route := range []struct{ method, path string }{
			{http.MethodGet, "/v1/batch/%s"}, {http.MethodGet, "/v1/batch/%s?results=1"},
			{http.MethodGet, "/v1/batch/%s/0"}, {http.MethodDelete, "/v1/batch/%s"},
		} {
			got := b.do(t, route.method, strings.Replace(route.path, "%s", bad, 1), "alice-key", nil)
			want := b.do(t, route.method, strings.Replace(route.path, "%s", missing, 1), "alice-key", nil)
			if got.code != want.code || !bytes.Equal(got.body, want.body) {
				t.Errorf("%s %s: %d %s, want as a missing id's: %d %s", route.method, strings.Replace(route.path, "%s", bad, 1), got.code, got.body, want.code, want.body)
			}
		}
	}
	if r := b.do(t, http.MethodGet, "/v1/batch/"+id, "alice-key", nil); r.code != http.StatusOK {
		t.Fatalf("the job by its whole id: %d", r.code)
	}
}
