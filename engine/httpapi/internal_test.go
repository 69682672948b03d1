package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi/internal/apispec"
)

// countingRunner records each call the handler makes into the runner, so
// that a test can compare the work two answers did. Requests are served
// in-process, one at a time, so the call log needs no lock.
type countingRunner struct {
	runner
	calls *[]string
}

func (c countingRunner) SubmitWith(ctx context.Context, ca *engine.Caller, class string, ts []engine.Target, opt engine.SubmitOptions) (string, bool, error) {
	*c.calls = append(*c.calls, "Submit")
	return c.runner.SubmitWith(ctx, ca, class, ts, opt)
}

func (c countingRunner) TryCancel(id string) (bool, error) {
	*c.calls = append(*c.calls, "Cancel")
	return c.runner.TryCancel(id)
}

func (c countingRunner) Lookup(id string) (engine.Job, error) {
	*c.calls = append(*c.calls, "Lookup")
	return c.runner.Lookup(id)
}

func (c countingRunner) Targets(id string) (engine.Job, []engine.TargetStatus, bool) {
	*c.calls = append(*c.calls, "Targets")
	return c.runner.Targets(id)
}

func (c countingRunner) ResultJSON(id string, idx int) ([]byte, bool) {
	*c.calls = append(*c.calls, "ResultJSON")
	return c.runner.ResultJSON(id, idx)
}

func (c countingRunner) ResultRange(id string, idx int, off, n int64) ([]byte, int64, bool) {
	*c.calls = append(*c.calls, "ResultRange")
	return c.runner.ResultRange(id, idx, off, n)
}

func (c countingRunner) Touch(id string) {
	*c.calls = append(*c.calls, "Touch")
	c.runner.Touch(id)
}

func (c countingRunner) Wait(ctx context.Context, id string) (engine.Job, error) {
	*c.calls = append(*c.calls, "Wait")
	return c.runner.Wait(ctx, id)
}

// newRunner starts a runner (the kit's, on an in-memory store; at most 2
// live jobs a caller) whose fetch succeeds at once, or waits at hold on a
// URL ending in /hold.
func newRunner(t *testing.T, hold *testkit.Gate) *engine.Runner {
	t.Helper()
	return newRunnerWith(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/hold") {
			if err := hold.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		}
		return engine.Result{Content: "page"}, nil
	})
}

// newRunnerWith is newRunner with a fetch of its own.
func newRunnerWith(t *testing.T, fetch engine.FetchFunc) *engine.Runner {
	t.Helper()
	return enginetest.Setup(t, fetch, engine.Config{JobsPerCaller: 2}).Runner
}

// waitJob waits until job id has ended.
func waitJob(t *testing.T, r *engine.Runner, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	if _, err := r.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
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
// no read of targets or results, no Touch, no Cancel, and no Wait, not
// even for a long-poll: a wait would tell that the job exists. It counts
// calls instead of timing answers: the runner's Job costs one store point
// read whatever the case (the finished job's four 256 KiB results are
// never read), and a count is exact where a clock is noisy. The owner's
// reads do the work (and a bad wait waits for nothing).
func TestAPI_NotYoursSameWork(t *testing.T) {
	t.Parallel()
	hold := testkit.NewGate()
	r := newRunnerWith(t, func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/hold") {
			if err := hold.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		}
		return engine.Result{Content: strings.Repeat("x", 256<<10)}, nil
	})
	ctx := context.Background()
	done, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{
		{URL: "https://example.com/a"}, {URL: "https://example.com/b"}, {URL: "https://example.com/c"}, {URL: "https://example.com/d"}})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, r, done)
	live, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/hold"}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, hold.Entered())
	var calls []string
	h, err := newHandler(countingRunner{runner: r, calls: &calls}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := apispec.Conform(t, openAPI, h) // each exchange checked against the OpenAPI document
	serve := func(method, path, key string) []string {
		calls = nil
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		api.ServeHTTP(httptest.NewRecorder(), req)
		return slices.Clone(calls)
	}
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/batch/%s"},
		{http.MethodGet, "/v1/batch/%s?results=1"},
		{http.MethodGet, "/v1/batch/%s?wait=20s"},
		{http.MethodGet, "/v1/batch/%s?wait=20s&results=1"},
		{http.MethodGet, "/v1/batch/%s?wait=bogus"},
		{http.MethodGet, "/v1/batch/%s/0"},
		{http.MethodGet, "/v1/batch/%s/9"},
		{http.MethodDelete, "/v1/batch/%s"},
	} {
		for _, id := range []string{done, live, "00112233445566778899aabbccddeeff", "not-an-id"} {
			got := serve(rt.method, strings.Replace(rt.path, "%s", id, 1), "bob-key")
			if !slices.Equal(got, []string{"Lookup"}) {
				t.Errorf("%s %s by another caller: called %v, want [Lookup]", rt.method, rt.path, got)
			}
		}
	}
	// The owner's read is what reads the targets, then touches.
	if got := serve(http.MethodGet, "/v1/batch/"+done, "alice-key"); !slices.Equal(got, []string{"Lookup", "Targets", "Touch"}) {
		t.Errorf("owner's GET called %v", got)
	}
	if got := serve(http.MethodGet, "/v1/batch/"+done+"/1", "alice-key"); !slices.Equal(got, []string{"Lookup", "Targets", "ResultRange", "Touch"}) {
		t.Errorf("owner's GET of a target called %v", got)
	}
	if got := serve(http.MethodGet, "/v1/batch/"+done+"?results=1", "alice-key"); !slices.Equal(got, []string{"Lookup", "Targets", "Touch", "ResultJSON", "ResultJSON", "ResultJSON", "ResultJSON"}) {
		t.Errorf("owner's GET of the results called %v", got)
	}
	if got := serve(http.MethodGet, "/v1/batch/"+live+"?wait=1ms", "alice-key"); !slices.Equal(got, []string{"Lookup", "Wait", "Targets", "Touch"}) {
		t.Errorf("owner's long-poll called %v", got)
	}
	for _, bad := range []string{"bogus", "61s", "-1s"} {
		if got := serve(http.MethodGet, "/v1/batch/"+live+"?wait="+bad, "alice-key"); !slices.Equal(got, []string{"Lookup"}) {
			t.Errorf("owner's GET with wait=%s called %v, want [Lookup]: a bad wait waits for nothing", bad, got)
		}
	}
}

// TestAPI_HandlerPanic: a handler that panics (a bug) is answered 500 and
// logged with its route only, never the panic value, and the server goes on.
func TestAPI_HandlerPanic(t *testing.T) {
	t.Parallel()
	const panicValue = "PANIC-VALUE-7e1f"
	var logs testkit.SyncBuffer
	h := &Handler{log: slog.New(slog.NewTextHandler(&logs, nil))}
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
	t.Parallel()
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
	waitJob(t, r, id)
	var events []string
	h, err := newHandler(countingRunner{runner: r, calls: &events}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	rec := httptest.NewRecorder()
	apispec.Conform(t, openAPI, h).ServeHTTP(eventWriter{rec, &events}, req)
	if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("answer %d, valid JSON %v", rec.Code, json.Valid(rec.Body.Bytes()))
	}
	t.Logf("events: %v", events)
	if !slices.Equal(events[:3], []string{"Lookup", "Targets", "Touch"}) {
		t.Fatalf("events %v, want Lookup, Targets, Touch first", events)
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

// waitSignal is a runner whose Wait signals when it begins (waiting) and
// what it returned when it ends (ended): the job, or why the wait ended.
type waitSignal struct {
	runner
	waiting *testkit.Signal[struct{}]
	ended   *testkit.Signal[error]
}

func (s waitSignal) Wait(ctx context.Context, id string) (engine.Job, error) {
	s.waiting.Signal(struct{}{})
	j, err := s.runner.Wait(ctx, id)
	s.ended.Signal(err)
	return j, err
}

// TestAPI_LongPoll: GET /v1/batch/{id}?wait= answers once the job ends,
// once its time is up (its wait ended by its deadline, not before), or
// when EndWaits is called (a shutdown), with the job as it then stands;
// a finished job is answered at once, without waiting.
func TestAPI_LongPoll(t *testing.T) {
	t.Parallel()
	hold := testkit.NewGate()
	r := newRunner(t, hold)
	var waiting testkit.Signal[struct{}]
	var ended testkit.Signal[error]
	waiting.Init(t)
	ended.Init(t)
	h, err := newHandler(waitSignal{runner: r, waiting: &waiting, ended: &ended}, testAuth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(h *Handler, id, wait string) <-chan *httptest.ResponseRecorder {
		api := apispec.Conform(t, openAPI, h)
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?wait="+wait, nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
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
	submit := func(r *engine.Runner, url string) string {
		id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: url}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	// The subtests run in order, on one runner: each ends what it began.
	t.Run("when its time is up", func(t *testing.T) {
		id := submit(r, "https://example.com/hold")
		answer := get(h, id, "200ms")
		waiting.Wait(t)
		if err := ended.Wait(t); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the wait ended with %v, want its deadline passed", err)
		}
		if st := status(testkit.Recv(t, answer)); st != engine.StatusRunning {
			t.Fatalf("answered %s, want the job as it stands: running", st)
		}
	})

	t.Run("at the job's end", func(t *testing.T) {
		id := submit(r, "https://example.com/hold")
		answer := get(h, id, "60s")
		waiting.Wait(t)
		hold.Open()
		if err := ended.Wait(t); err != nil {
			t.Fatalf("the wait ended with %v, want the job's end", err)
		}
		if st := status(testkit.Recv(t, answer)); st != engine.StatusDone {
			t.Fatalf("answered %s, want done", st)
		}
	})

	t.Run("a finished job at once", func(t *testing.T) {
		id := submit(r, "https://example.com/done")
		waitJob(t, r, id)
		if st := status(testkit.Recv(t, get(h, id, "60s"))); st != engine.StatusDone {
			t.Fatalf("answered %s", st)
		}
		waiting.RequireEmpty(t) // the handler did not wait on a finished job
	})

	t.Run("on shutdown", func(t *testing.T) {
		r2 := newRunner(t, testkit.NewGate())
		h2, err := newHandler(waitSignal{runner: r2, waiting: &waiting, ended: &ended}, testAuth, Options{})
		if err != nil {
			t.Fatal(err)
		}
		id := submit(r2, "https://example.com/hold")
		answer := get(h2, id, "60s")
		waiting.Wait(t)
		h2.EndWaits()
		if err := ended.Wait(t); !errors.Is(err, context.Canceled) {
			t.Fatalf("the wait ended with %v, want it cancelled by EndWaits", err)
		}
		if st := status(testkit.Recv(t, answer)); !engine.IsLive(st) {
			t.Fatalf("answered %s, want the job as it stands: live", st)
		}
		// Later waits answer at once.
		if st := status(testkit.Recv(t, get(h2, id, "60s"))); !engine.IsLive(st) {
			t.Fatalf("answered %s", st)
		}
		waiting.Wait(t)
		ended.Wait(t)
	})
}

// TestAPI_RefusedAnswerReadsNoResult: once a result's size is known (it
// was read for an answer), a read of it that does not fit in its caller's
// budget (MaxAnswerBytes 12 KiB; an 8 KiB result stuck on a client) is
// refused before the runner reads the result again: a target's and a
// job's results alike.
func TestAPI_RefusedAnswerReadsNoResult(t *testing.T) {
	t.Parallel()
	r := newRunnerWith(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: strings.Repeat("x", 8<<10)}, nil
	})
	ctx := context.Background()
	id, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/a"}})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, r, id)
	var calls []string
	h, err := newHandler(countingRunner{runner: r, calls: &calls}, testAuth, Options{MaxAnswerBytes: 12 << 10})
	if err != nil {
		t.Fatal(err)
	}
	api := apispec.Conform(t, openAPI, h) // each exchange checked against the OpenAPI document
	request := func(path string) *http.Request {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		return req
	}
	stuck := NewBlockingWriter()
	served := make(chan struct{})
	go func() {
		defer close(served)
		api.ServeHTTP(stuck, request("/v1/batch/"+id+"/0"))
	}()
	defer func() { stuck.Release(); <-served }()
	testkit.RequireClosed(t, stuck.Entered())
	for _, path := range []string{"/v1/batch/" + id + "/0", "/v1/batch/" + id + "?results=1"} {
		calls = nil
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, request(path))
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("GET %s: %d, want 429", path, rec.Code)
		}
		if slices.Contains(calls, "ResultJSON") {
			t.Errorf("GET %s, refused, read the result: %v", path, calls)
		}
	}
}
