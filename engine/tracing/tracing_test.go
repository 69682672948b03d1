package tracing_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/tracing"
	"github.com/sift/batch/persistence"
)

// TestMain checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) { enginetest.Main(m) }

// What no span may hold: the targets' URLs and host, the API key, a
// panic value, an error text that names the host.
const (
	secretHost  = "secret-host.example"
	secretKey   = "test-key-SECRET-4f9a"
	panicValue  = "PANIC-VALUE-7d1c"
	secretQuery = "token=QUERY-SECRET-88"
)

func secretURL(path string) string { return "https://" + secretHost + path + "?" + secretQuery }

// bundle is what setup returns beside the runner.
type bundle struct {
	runner *engine.Runner
	store  *persistence.Store
	rec    *tracetest.SpanRecorder
	api    http.Handler
	block  chan struct{} // closed at cleanup: a blocking fetch returns
	busy   atomic.Int32  // busy answers given
}

// setup returns a runner traced into an in-memory recorder, behind the
// HTTP API with the tracing middleware. Its FetchFunc does by path:
// /ok → a page; /busy → busy once, then a page; /panic → panics;
// /fail → a TargetError naming the host; /block → waits for its context.
func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{rec: tracetest.NewSpanRecorder(), block: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.rec))
	tr := tracing.New(tp)
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch {
		case strings.Contains(tg.URL, "/busy") && b.busy.Add(1) == 1:
			return engine.Result{}, fmt.Errorf("%s answered 429: %w", tg.URL, engine.ErrRetryLater)
		case strings.Contains(tg.URL, "/panic"):
			panic(panicValue + " " + tg.URL)
		case strings.Contains(tg.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 502, Msg: "dial " + secretHost + ": refused", Hint: "try " + tg.URL}
		case strings.Contains(tg.URL, "/block"):
			select {
			case <-ctx.Done():
				return engine.Result{}, context.Cause(ctx)
			case <-b.block:
			}
		}
		return engine.Result{Content: "page of " + tg.URL, Meta: map[string]any{"final_url": tg.URL}}, nil
	}
	store, err := persistence.Open("")
	require.NoError(t, err)
	b.store = store
	r, err := engine.New(store, fetch, engine.Config{RetryWait: time.Millisecond, JobsPerCaller: 4, TracerProvider: tr.TracerProvider()},
		slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	b.runner = r
	keys, err := httpapi.ReadKeys(strings.NewReader("alice " + secretKey + "\n"))
	require.NoError(t, err)
	api, err := httpapi.New(r, keys, httpapi.Options{Wrap: tr.Middleware, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	b.api = httpapi.Front(api, http.NotFoundHandler())
	t.Cleanup(func() {
		close(b.block)
		api.EndWaits()
		r.Close()
		require.NoError(t, store.Close())
		require.NoError(t, tp.Shutdown(context.Background()))
	})
	return b
}

// do sends one request to the API, with a traceparent if given, and
// returns its status and body.
func (b *bundle) do(t *testing.T, method, path, body, traceparent string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secretKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	w := httptest.NewRecorder()
	b.api.ServeHTTP(w, req)
	out, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(out)
}

// submit posts urls as one job and returns its id.
func (b *bundle) submit(t *testing.T, traceparent string, urls ...string) string {
	t.Helper()
	var ts []string
	for _, u := range urls {
		ts = append(ts, fmt.Sprintf(`{"url":%q}`, u))
	}
	code, body := b.do(t, http.MethodPost, "/v1/batch", `{"targets":[`+strings.Join(ts, ",")+`]}`, traceparent)
	require.Equal(t, http.StatusAccepted, code, body)
	i := strings.Index(body, `"id":"`)
	require.GreaterOrEqual(t, i, 0, body)
	return body[i+6 : i+6+32]
}

// byName returns the ended spans named name.
func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// requireClean fails if any text of any span (its name, attributes,
// events, status, links) holds a URL, the host, the key, the query or
// the panic value.
func requireClean(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	forbidden := []string{secretHost, secretKey, panicValue, secretQuery, "https://", "/ok", "/busy", "/panic", "/fail", "/block"}
	check := func(where, text string) {
		for _, f := range forbidden {
			require.NotContains(t, text, f, "%s holds %q", where, f)
		}
	}
	kvs := func(where string, attrs []attribute.KeyValue) {
		for _, kv := range attrs {
			check(where+" attribute "+string(kv.Key), string(kv.Key)+"="+kv.Value.Emit())
		}
	}
	require.NotEmpty(t, spans)
	for _, s := range spans {
		where := "span " + s.Name()
		check(where, s.Name())
		kvs(where, s.Attributes())
		check(where+" status", s.Status().Description)
		for _, e := range s.Events() {
			check(where+" event", e.Name)
			kvs(where+" event "+e.Name, e.Attributes)
		}
		kvs(where+" resource", s.Resource().Attributes())
	}
}

// TestTracing_JobEndToEnd runs a job of four targets (a page, a busy one,
// a panic, a failure naming its host) submitted over HTTP with a
// traceparent, and checks every span it made: the tree (the request →
// the job → each target → its wait, fetch and store), the caller's trace
// joined, the job row keeping the job span's context, the busy_retry
// event, the statuses and counts, and that no span holds a URL, the
// host, the key or the panic value.
func TestTracing_JobEndToEnd(t *testing.T) {
	b := setup(t)
	callerTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	callerSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	tp := "00-" + callerTrace.String() + "-" + callerSpan.String() + "-01"

	id := b.submit(t, tp, secretURL("/ok"), secretURL("/busy"), secretURL("/panic"), secretURL("/fail"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := b.runner.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, engine.StatusPartial, job.Status)
	code, _ := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=1s", "", tp) // the long-poll, answered at once
	require.Equal(t, http.StatusOK, code)

	spans := b.rec.Ended()
	requireClean(t, spans)
	for _, s := range spans {
		require.Equal(t, callerTrace, s.SpanContext().TraceID(), "span %s is in the caller's trace", s.Name())
	}

	posts := byName(spans, "POST /v1/batch")
	require.Len(t, posts, 1)
	post := posts[0]
	require.Equal(t, callerSpan, post.Parent().SpanID(), "the request's span is a child of the traceparent")
	require.Equal(t, trace.SpanKindServer, post.SpanKind())
	v, _ := attr(post, tracing.AttrHTTPStatus)
	require.EqualValues(t, http.StatusAccepted, v.AsInt64())

	jobs := byName(spans, tracing.SpanJob)
	require.Len(t, jobs, 1)
	js := jobs[0]
	require.Equal(t, post.SpanContext().SpanID(), js.Parent().SpanID(), "the job's span is the request's child")
	for k, want := range map[attribute.Key]any{tracing.AttrJobID: id, tracing.AttrCaller: "alice", tracing.AttrStatus: "partial",
		tracing.AttrTargetsTotal: int64(4), tracing.AttrTargetsDone: int64(4), tracing.AttrTargetsFailed: int64(2)} {
		v, ok := attr(js, k)
		require.True(t, ok, "job span has %s", k)
		require.Equal(t, want, v.AsInterface(), "job span's %s", k)
	}

	row, err := b.store.Job(id)
	require.NoError(t, err)
	require.Equal(t, [16]byte(js.SpanContext().TraceID()), row.Trace.TraceID, "the row keeps the job span's context")
	require.Equal(t, [8]byte(js.SpanContext().SpanID()), row.Trace.SpanID)

	targets := byName(spans, tracing.SpanTarget)
	require.Len(t, targets, 4)
	wantStatus := []string{"done", "done", "failed", "failed"}
	byIdx := map[int64]sdktrace.ReadOnlySpan{}
	for _, ts := range targets {
		require.Equal(t, js.SpanContext().SpanID(), ts.Parent().SpanID(), "a target is the job's child")
		require.True(t, ts.Parent().IsRemote(), "a target's parent is the row's trace context, not a span in memory")
		idx, ok := attr(ts, tracing.AttrTargetIdx)
		require.True(t, ok)
		byIdx[idx.AsInt64()] = ts
		st, _ := attr(ts, tracing.AttrStatus)
		require.Equal(t, wantStatus[idx.AsInt64()], st.AsString(), "target %d", idx.AsInt64())
	}
	require.Len(t, byIdx, 4)
	var busyEvents int
	for _, e := range byIdx[1].Events() {
		if e.Name == tracing.EventBusyRetry {
			busyEvents++
		}
	}
	require.Equal(t, 1, busyEvents, "the busy target has one busy_retry event")
	rb, _ := attr(byIdx[0], tracing.AttrResultBytes)
	require.Positive(t, rb.AsInt64(), "a stored page's bytes")

	// Each target's steps are its children: two waits and fetches for the
	// busy one, one of each for the others, one store each.
	steps := map[string]map[int64]int{}
	for _, name := range []string{tracing.SpanTargetWait, tracing.SpanTargetFetch, tracing.SpanTargetStore} {
		steps[name] = map[int64]int{}
		for _, s := range byName(spans, name) {
			var parent int64 = -1
			for idx, ts := range byIdx {
				if ts.SpanContext().SpanID() == s.Parent().SpanID() {
					parent = idx
				}
			}
			require.GreaterOrEqual(t, parent, int64(0), "%s is a target's child", name)
			steps[name][parent]++
		}
	}
	require.Equal(t, map[int64]int{0: 1, 1: 2, 2: 1, 3: 1}, steps[tracing.SpanTargetWait])
	require.Equal(t, map[int64]int{0: 1, 1: 2, 2: 1, 3: 1}, steps[tracing.SpanTargetFetch])
	require.Equal(t, map[int64]int{0: 1, 1: 1, 2: 1, 3: 1}, steps[tracing.SpanTargetStore])

	gets := byName(spans, "GET /v1/batch/{id}")
	require.Len(t, gets, 1)
	lp, ok := attr(gets[0], tracing.AttrLongPoll)
	require.True(t, ok && lp.AsBool(), "the long-poll is marked")
}

// TestTracing_Cancel checks a cancel's events: on the job and on its
// target in flight, whose span still ends once its outcome is stored.
func TestTracing_Cancel(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "", secretURL("/block"), secretURL("/ok"))
	require.Eventually(t, func() bool {
		_, ts, ok := b.runner.Status(id)
		return ok && ts[0].Status == engine.TargetRunning
	}, 10*time.Second, time.Millisecond)
	code, body := b.do(t, http.MethodDelete, "/v1/batch/"+id, "", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Eventually(t, func() bool { return len(byName(b.rec.Ended(), tracing.SpanTarget)) == 1 }, 10*time.Second, time.Millisecond)

	spans := b.rec.Ended()
	requireClean(t, spans)
	jobs := byName(spans, tracing.SpanJob)
	require.Len(t, jobs, 1)
	st, _ := attr(jobs[0], tracing.AttrStatus)
	require.Equal(t, engine.StatusCancelled, st.AsString())
	hasEvent := func(s sdktrace.ReadOnlySpan) bool {
		for _, e := range s.Events() {
			if e.Name == tracing.EventCancelled {
				return true
			}
		}
		return false
	}
	require.True(t, hasEvent(jobs[0]), "the job has a cancelled event")
	targets := byName(spans, tracing.SpanTarget)
	require.Len(t, targets, 1, "the second target never started")
	require.True(t, hasEvent(targets[0]), "the target in flight has a cancelled event")
}

// TestTracing_Off checks that a Tracing that is off does nothing: no
// provider for the runner, the middleware is the handler itself, and a
// shutdown is a no-op.
func TestTracing_Off(t *testing.T) {
	for name, tr := range map[string]*tracing.Tracing{"New(nil)": tracing.New(nil), "nil": nil} {
		t.Run(name, func(t *testing.T) {
			require.False(t, tr.Enabled())
			require.Nil(t, tr.TracerProvider())
			h := http.NotFoundHandler()
			require.Equal(t, fmt.Sprintf("%p", h), fmt.Sprintf("%p", tr.Middleware("GET /x", h)))
			require.NoError(t, tr.Shutdown(context.Background()))
		})
	}
	t.Run("FromEnvWithoutEndpoint", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		tr, err := tracing.FromEnv(context.Background())
		require.NoError(t, err)
		require.False(t, tr.Enabled())
	})
	t.Run("FromEnvBadProtocol", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
		_, err := tracing.FromEnv(context.Background())
		require.ErrorIs(t, err, tracing.ErrConfig)
	})
}

// TestWrap checks the order of the wrappers: the first is outermost.
func TestWrap(t *testing.T) {
	var mu sync.Mutex
	var order []string
	mark := func(name string) func(string, http.Handler) http.Handler {
		return func(route string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				order = append(order, name+" "+route)
				mu.Unlock()
				h.ServeHTTP(w, r)
			})
		}
	}
	h := tracing.Wrap(mark("a"), nil, mark("b"))("GET /r", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, []string{"a GET /r", "b GET /r"}, order)
}

// TestTracing_RestartJoinsTheJobsTrace checks a job left running by a
// process that stopped: the next runner fails it ("restart") and records
// that as a span in the job's own trace, a child of the trace context its
// row kept.
func TestTracing_RestartJoinsTheJobsTrace(t *testing.T) {
	dir := t.TempDir()
	store, err := persistence.Open(dir)
	require.NoError(t, err)
	tc := persistence.TraceContext{Flags: 1}
	copy(tc.TraceID[:], []byte("0123456789abcdef"))
	copy(tc.SpanID[:], []byte("spanid01"))
	now := time.Now().UnixNano()
	j := persistence.JobRecord{ID: strings.Repeat("ab", 16), Caller: "alice", Status: persistence.StatusRunning,
		TargetsTotal: 2, Created: now, Lease: now, Started: now, Trace: tc}
	require.NoError(t, store.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: secretURL("/ok")}, {Idx: 1, URL: secretURL("/ok")}}))
	require.NoError(t, store.Close()) // the process stopped with the job running

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	store, err = persistence.Open(dir)
	require.NoError(t, err)
	r, err := engine.New(store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, nil
	}, engine.Config{TracerProvider: tp}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	r.Close()
	require.NoError(t, store.Close())

	spans := rec.Ended()
	requireClean(t, spans)
	reaped := byName(spans, tracing.SpanJobReaped)
	require.Len(t, reaped, 1)
	s := reaped[0]
	require.Equal(t, trace.TraceID(tc.TraceID), s.SpanContext().TraceID(), "in the job's trace")
	require.Equal(t, trace.SpanID(tc.SpanID), s.Parent().SpanID(), "a child of the job's span, as its row kept it")
	for k, want := range map[attribute.Key]any{tracing.AttrJobID: j.ID, tracing.AttrStatus: engine.StatusFailed, tracing.AttrReason: "restart"} {
		v, ok := attr(s, k)
		require.True(t, ok, "%s", k)
		require.Equal(t, want, v.AsInterface())
	}
}
