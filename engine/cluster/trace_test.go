package cluster_test

import (
	"io"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/tracing"
)

// TestNode_ForwardedReadJoinsTheTrace reads a's job on b with a W3C
// traceparent, each node traced apart (as two processes are): b's span
// for the request is the traceparent's child, and a's span for the
// request b forwarded is b's child, in the same trace.
func TestNode_ForwardedReadJoinsTheTrace(t *testing.T) {
	t.Parallel()
	recA, recB := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	tpA := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recA))
	tpB := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recB))
	tc := clustertest.New(t, clustertest.Options{})
	a := tc.AddWith("a", clustertest.NodeOptions{Route: tracing.New(tpA).Middleware})
	b := tc.AddWith("b", clustertest.NodeOptions{Route: tracing.New(tpB).Middleware})
	tc.WaitMembers(2)
	id := a.Submit(t, "alice-key", "https://example.com/1")
	a.WaitDone(t, id)

	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	callerTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	callerSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	req, err := http.NewRequest(http.MethodGet, b.Srv.URL+"/v1/batch/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-key")
	req.Header.Set("traceparent", caller)
	res, err := b.Srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET on b: %d", res.StatusCode)
	}

	read := func(rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
		for _, s := range rec.Ended() {
			if s.Name() == "GET /v1/batch/{id}" {
				return s
			}
		}
		return nil
	}
	onB, onA := read(recB), read(recA)
	if onB == nil || onA == nil {
		t.Fatalf("read spans: on b %v, on a %v", onB, onA)
	}
	if onB.SpanContext().TraceID() != callerTrace || onB.Parent().SpanID() != callerSpan {
		t.Errorf("b's span: trace %s parent %s, want the caller's", onB.SpanContext().TraceID(), onB.Parent().SpanID())
	}
	if onA.SpanContext().TraceID() != callerTrace || onA.Parent().SpanID() != onB.SpanContext().SpanID() {
		t.Errorf("a's span: trace %s parent %s, want b's span %s in the caller's trace", onA.SpanContext().TraceID(), onA.Parent().SpanID(), onB.SpanContext().SpanID())
	}
}
