package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestTraceparent_CarriedToTheHolder checks the trace context a forwarded
// request carries: the asking node's span if it has one, else the
// client's own valid traceparent, else none; and that the holder takes
// only a valid one.
func TestTraceparent_CarriedToTheHolder(t *testing.T) {
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	span := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})

	withSpan := httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil)
	withSpan.Header.Set("traceparent", client)
	withSpan = withSpan.WithContext(trace.ContextWithSpanContext(context.Background(), span))
	if got, want := traceparent(withSpan), "00-"+tid.String()+"-"+sid.String()+"-01"; got != want {
		t.Errorf("with a span: %q, want the span's %q", got, want)
	}
	headerOnly := httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil)
	headerOnly.Header.Set("traceparent", client)
	if got := traceparent(headerOnly); got != client {
		t.Errorf("with the client's header only: %q, want %q", got, client)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX: y"} {
		r := httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil)
		r.Header["Traceparent"] = []string{bad}
		if got := traceparent(r); got != "" {
			t.Errorf("traceparent %q forwarded as %q, want none", bad, got)
		}
		held := httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil)
		setTraceparent(held, bad)
		if got := held.Header.Get("traceparent"); got != "" {
			t.Errorf("the holder took %q as %q, want none", bad, got)
		}
	}
	held := httptest.NewRequest(http.MethodGet, "/v1/batch/x", nil)
	setTraceparent(held, client)
	if got := held.Header.Get("traceparent"); got != client {
		t.Errorf("the holder's request has %q, want %q", got, client)
	}
}
