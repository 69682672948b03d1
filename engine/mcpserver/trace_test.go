package mcpserver_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/mcpserver"
	"github.com/sift/batch/engine/tracing"
)

// TestMCP_ToolCallsAreTraced checks a tool call's span: named, with the
// tool's name and whether it failed, never its arguments; the API request
// the tool makes in process is its child, and the job's span that
// request's; a tool error is an error span.
func TestMCP_ToolCallsAreTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	tr := tracing.New(tp)
	b := setupWith(t, engine.Config{TracerProvider: tp}, func(h http.Handler) http.Handler { return tr.Middleware("api", h) },
		mcpserver.Options{PollEvery: 20 * time.Millisecond, TracerProvider: tp})
	cs, _ := b.connect(t, "alice-key")
	url := b.url("/secret-path?q=SECRET")
	var sub struct{ ID string }
	call(t, cs, "batch_submit", map[string]any{"targets": []map[string]any{{"url": url}}}, &sub)
	if sub.ID == "" {
		t.Fatal("no job id")
	}
	if res := call(t, cs, "batch_status", map[string]any{"id": strings.Repeat("0", 32)}, nil); !res.IsError {
		t.Fatal("an unknown job's status is a tool error")
	}

	spans := rec.Ended()
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, "secret-path") || strings.Contains(v, "SECRET") || strings.Contains(v, "alice-key") {
				t.Errorf("span %s attribute %s holds %q", s.Name(), kv.Key, v)
			}
		}
	}
	tools := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.Name() != mcpserver.SpanToolCall {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == mcpserver.AttrTool {
				tools[kv.Value.AsString()] = s
			}
		}
	}
	submit, status := tools["batch_submit"], tools["batch_status"]
	if submit == nil || status == nil {
		t.Fatalf("tool spans: %v", tools)
	}
	if submit.Status().Code != 0 || status.Status().Code == 0 {
		t.Errorf("statuses: submit %v, status %v; want unset and error", submit.Status(), status.Status())
	}
	var job sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == tracing.SpanJob {
			job = s
		}
	}
	if job == nil {
		t.Fatal("no job span")
	}
	apiSpan := byID[job.Parent().SpanID().String()]
	if apiSpan == nil || apiSpan.Name() != "api" {
		t.Fatalf("the job's parent is %v, want the API request's span", apiSpan)
	}
	if apiSpan.Parent().SpanID() != submit.SpanContext().SpanID() {
		t.Error("the API request's span is not the tool call's child")
	}
	if job.SpanContext().TraceID() != submit.SpanContext().TraceID() {
		t.Error("the job is not in the tool call's trace")
	}
}
