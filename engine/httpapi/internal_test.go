package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// countingRunner records each call the handler makes into the runner, so
// that a test can compare the work two answers did. Requests are served
// in-process, one at a time, so the call log needs no lock.
type countingRunner struct {
	runner
	calls *[]string
}

func (c countingRunner) Submit(ctx context.Context, ca *engine.Caller, class string, ts []engine.Target) (string, bool, error) {
	*c.calls = append(*c.calls, "Submit")
	return c.runner.Submit(ctx, ca, class, ts)
}

func (c countingRunner) Cancel(id string) bool {
	*c.calls = append(*c.calls, "Cancel")
	return c.runner.Cancel(id)
}

func (c countingRunner) Job(id string) (engine.Job, bool) {
	*c.calls = append(*c.calls, "Job")
	return c.runner.Job(id)
}

func (c countingRunner) Targets(id string) (engine.Job, []engine.TargetStatus, bool) {
	*c.calls = append(*c.calls, "Targets")
	return c.runner.Targets(id)
}

func (c countingRunner) ResultJSON(id string, idx int) ([]byte, bool) {
	*c.calls = append(*c.calls, "ResultJSON")
	return c.runner.ResultJSON(id, idx)
}

func (c countingRunner) Touch(id string) {
	*c.calls = append(*c.calls, "Touch")
	c.runner.Touch(id)
}

// newRunner starts a runner on an in-memory store whose fetch succeeds at
// once, or waits for hold's close on a URL ending in /hold.
func newRunner(t *testing.T, hold <-chan struct{}) *engine.Runner {
	t.Helper()
	return newRunnerWith(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/hold") {
			select {
			case <-hold:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		}
		return engine.Result{Content: "page"}, nil
	})
}

func newRunnerWith(t *testing.T, fetch engine.FetchFunc) *engine.Runner {
	t.Helper()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.New(store, fetch, engine.Config{JobsPerCaller: 2}, nil)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// testAuth knows two keys: alice-key and bob-key.
var testAuth = AuthenticatorFunc(func(_ context.Context, key string) (*engine.Caller, string, error) {
	name, ok := strings.CutSuffix(key, "-key")
	if !ok || (name != "alice" && name != "bob") {
		return nil, "", ErrUnknownKey
	}
	return &engine.Caller{Name: name}, ClassStandard, nil
})

// TestAPI_NotYoursSameWork: "not yours" (another caller's finished or live
// job) and "missing" make exactly the same calls into the runner: one Job,
// no read of targets, no Touch, no Cancel. It counts calls instead of
// timing them: the runner's Job costs one store point read whatever the
// case, and a count is exact where a clock is noisy.
func TestAPI_NotYoursSameWork(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	r := newRunner(t, hold)
	ctx := context.Background()
	done, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/a"}, {URL: "https://example.com/b"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.Wait(wctx, done); err != nil {
		t.Fatal(err)
	}
	live, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	h, err := newHandler(countingRunner{runner: r, calls: &calls}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(method, path, key string) []string {
		calls = nil
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		h.ServeHTTP(httptest.NewRecorder(), req)
		return slices.Clone(calls)
	}
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/batch/%s"},
		{http.MethodGet, "/v1/batch/%s?results=1"},
		{http.MethodGet, "/v1/batch/%s/0"},
		{http.MethodGet, "/v1/batch/%s/9"},
		{http.MethodDelete, "/v1/batch/%s"},
	} {
		for _, id := range []string{done, live, "00112233445566778899aabbccddeeff", "not-an-id"} {
			got := serve(rt.method, strings.Replace(rt.path, "%s", id, 1), "bob-key")
			if !slices.Equal(got, []string{"Job"}) {
				t.Errorf("%s %s by another caller: called %v, want [Job]", rt.method, rt.path, got)
			}
		}
	}
	// The owner's read is what reads the targets, then touches.
	if got := serve(http.MethodGet, "/v1/batch/"+done, "alice-key"); !slices.Equal(got, []string{"Job", "Targets", "Touch"}) {
		t.Errorf("owner's GET called %v", got)
	}
	if got := serve(http.MethodGet, "/v1/batch/"+done+"/1", "alice-key"); !slices.Equal(got, []string{"Job", "Targets", "ResultJSON", "Touch"}) {
		t.Errorf("owner's GET of a target called %v", got)
	}
}

// TestAPI_HandlerPanic: a handler that panics (a bug) is answered 500 and
// logged with its route only, never the panic value, and the server goes on.
func TestAPI_HandlerPanic(t *testing.T) {
	const panicValue = "PANIC-VALUE-7e1f"
	var mu sync.Mutex
	var logs strings.Builder
	h := &Handler{log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}
	g := h.guard(routeJob, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("https://secret.example/page " + panicValue)
	}))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "internal error") {
		t.Fatalf("answer %d %s", rec.Code, rec.Body)
	}
	if l := logs.String(); !strings.Contains(l, "handler panicked") || strings.Contains(l, "secret") || strings.Contains(l, panicValue) {
		t.Fatalf("log:\n%s", l)
	}

	// A panic after the answer started drops the connection, through
	// net/http's ErrAbortHandler, which it does not log.
	late := h.guard(routeJob, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		panic(panicValue)
	}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		late.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil))
	}()
	if strings.Contains(logs.String(), panicValue) {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// eventWriter is a ResponseWriter that logs each Write's size into the
// same log as the countingRunner's calls.
type eventWriter struct {
	*httptest.ResponseRecorder
	events *[]string
}

func (e eventWriter) Write(b []byte) (int, error) {
	*e.events = append(*e.events, fmt.Sprintf("write %d", len(b)))
	return e.ResponseRecorder.Write(b)
}

// TestAPI_StreamsOneResultAtATime: a ?results=1 answer reads each result
// only once the one before it is written out, so it holds at most one in
// memory: in the log of runner calls and writes, every ResultJSON is
// followed by the write that carries that result, before the next read.
func TestAPI_StreamsOneResultAtATime(t *testing.T) {
	sizes := []int{100 << 10, 30 << 10, 200 << 10, 5 << 10}
	r := newRunnerWith(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/fail") {
			return engine.Result{}, &engine.TargetError{Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		i := int(tg.URL[len(tg.URL)-1] - '0')
		return engine.Result{Content: strings.Repeat("x", sizes[i])}, nil
	})
	ts := []engine.Target{{URL: "https://example.com/0"}, {URL: "https://example.com/fail"}, {URL: "https://example.com/1"},
		{URL: "https://example.com/2"}, {URL: "https://example.com/3"}}
	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", ts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	var events []string
	h, err := newHandler(countingRunner{runner: r, calls: &events}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	rec := httptest.NewRecorder()
	h.ServeHTTP(eventWriter{rec, &events}, req)
	if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("answer %d, valid JSON %v", rec.Code, json.Valid(rec.Body.Bytes()))
	}
	t.Logf("events: %v", events)
	if !slices.Equal(events[:3], []string{"Job", "Targets", "Touch"}) {
		t.Fatalf("events %v, want Job, Targets, Touch first", events)
	}
	reads := 0
	for i, e := range events {
		if e != "ResultJSON" {
			continue
		}
		var n int
		if i+1 == len(events) || !strings.HasPrefix(events[i+1], "write ") {
			t.Fatalf("ResultJSON %d is not followed by a write: %v", reads, events)
		}
		fmt.Sscanf(events[i+1], "write %d", &n)
		if n < sizes[reads] || n > sizes[reads]+1<<10 {
			t.Errorf("result %d (%d bytes) went out in a write of %d", reads, sizes[reads], n)
		}
		reads++
	}
	if reads != len(sizes) {
		t.Fatalf("%d results read, want %d: %v", reads, len(sizes), events)
	}
}

// waitSignal is a runner whose Wait says when it starts waiting.
type waitSignal struct {
	runner
	waiting chan struct{}
}

func (s waitSignal) Wait(ctx context.Context, id string) (engine.Job, error) {
	s.waiting <- struct{}{}
	return s.runner.Wait(ctx, id)
}

// TestAPI_LongPoll: GET /v1/batch/{id}?wait= answers once the job ends,
// or when EndWaits is called (a shutdown), with the job as it then stands;
// a finished job is answered at once, without waiting.
func TestAPI_LongPoll(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release()
	r := newRunner(t, hold)
	waiting := make(chan struct{}, 1)
	h, err := newHandler(waitSignal{runner: r, waiting: waiting}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(id string) <-chan *httptest.ResponseRecorder {
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?wait=60s", nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			done <- rec
		}()
		return done
	}
	status := func(rec *httptest.ResponseRecorder) string {
		var j struct{ Status string }
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &j) != nil {
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
		return j.Status
	}
	within := func(ch <-chan *httptest.ResponseRecorder) *httptest.ResponseRecorder {
		select {
		case rec := <-ch:
			return rec
		case <-time.After(10 * time.Second):
			t.Fatal("the long-poll did not answer")
			return nil
		}
	}
	submit := func(url string) string {
		id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: url}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	t.Run("at the job's end", func(t *testing.T) {
		id := submit("https://example.com/hold")
		answer := get(id)
		<-waiting
		release()
		if st := status(within(answer)); st != engine.StatusDone {
			t.Fatalf("answered %s, want done", st)
		}
	})

	t.Run("a finished job at once", func(t *testing.T) {
		id := submit("https://example.com/done")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		if st := status(within(get(id))); st != engine.StatusDone {
			t.Fatalf("answered %s", st)
		}
		select {
		case <-waiting:
			t.Fatal("the handler waited on a finished job")
		default:
		}
	})

	t.Run("on shutdown", func(t *testing.T) {
		hold2 := make(chan struct{})
		defer close(hold2)
		r2 := newRunner(t, hold2)
		h2, err := newHandler(waitSignal{runner: r2, waiting: waiting}, testAuth, Options{})
		if err != nil {
			t.Fatal(err)
		}
		h = h2
		id, _, err := r2.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/hold"}})
		if err != nil {
			t.Fatal(err)
		}
		answer := get(id)
		<-waiting
		h2.EndWaits()
		if st := status(within(answer)); !engine.IsLive(st) {
			t.Fatalf("answered %s, want the job as it stands: live", st)
		}
		// Later waits answer at once.
		if st := status(within(get(id))); !engine.IsLive(st) {
			t.Fatalf("answered %s", st)
		}
		<-waiting
	})
}

// stuckWriter is a ResponseWriter whose Writes block until release is
// closed: a client that does not read. entered is closed at the first.
type stuckWriter struct {
	header           http.Header
	entered, release chan struct{}
	once             sync.Once
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}

// TestAPI_RefusedAnswerReadsNoResult: once a result's size is known (it
// was read for an answer), a read of it that does not fit in its caller's
// budget (MaxAnswerBytes 12 KiB; an 8 KiB result stuck on a client) is
// refused before the runner reads the result again: a target's and a
// job's results alike.
func TestAPI_RefusedAnswerReadsNoResult(t *testing.T) {
	r := newRunnerWith(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: strings.Repeat("x", 8<<10)}, nil
	})
	ctx := context.Background()
	id, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/a"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.Wait(wctx, id); err != nil {
		t.Fatal(err)
	}
	var calls []string
	h, err := newHandler(countingRunner{runner: r, calls: &calls}, testAuth, Options{MaxAnswerBytes: 12 << 10})
	if err != nil {
		t.Fatal(err)
	}
	request := func(path string) *http.Request {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		return req
	}
	stuck := &stuckWriter{header: http.Header{}, entered: make(chan struct{}), release: make(chan struct{})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.ServeHTTP(stuck, request("/v1/batch/"+id+"/0"))
	}()
	defer func() { close(stuck.release); <-served }()
	select {
	case <-stuck.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the stuck answer was never written")
	}
	for _, path := range []string{"/v1/batch/" + id + "/0", "/v1/batch/" + id + "?results=1"} {
		calls = nil
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request(path))
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("GET %s: %d, want 429", path, rec.Code)
		}
		if slices.Contains(calls, "ResultJSON") {
			t.Errorf("GET %s, refused, read the result: %v", path, calls)
		}
	}
}
