package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
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

// TestMCP_StdioToolCallCarriesTraceparent checks that a tool call over
// stdio, traced by its own provider (another process's, in siftbatch
// mcp), sends its trace context to the serve it calls: the serve's span
// for the request is the tool call's child.
func TestMCP_StdioToolCallCarriesTraceparent(t *testing.T) {
	t.Parallel()
	recServe, recTool := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	tpServe := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recServe))
	tpTool := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recTool))
	b := setupWrapped(t, engine.Config{}, func(h http.Handler) http.Handler { return tracing.New(tpServe).Middleware("api", h) })
	cin, sout := io.Pipe()
	sin, cout := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- mcpserver.ServeStdio(ctx, b.srv.URL, "alice-key", nil, sin, sout, mcpserver.Options{TracerProvider: tpTool})
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: cin, Writer: cout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call(t, cs, "batch_list", map[string]any{}, nil)
	_ = cs.Close()
	cancel()
	if err := testkit.Recv(t, served); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	var tool, api sdktrace.ReadOnlySpan
	for _, s := range recTool.Ended() {
		if s.Name() == mcpserver.SpanToolCall {
			tool = s
		}
	}
	for _, s := range recServe.Ended() {
		if s.Name() == "api" {
			api = s
		}
	}
	if tool == nil || api == nil {
		t.Fatalf("tool span %v, serve's span %v", tool, api)
	}
	if api.SpanContext().TraceID() != tool.SpanContext().TraceID() || api.Parent().SpanID() != tool.SpanContext().SpanID() {
		t.Errorf("serve's span: trace %s parent %s; want the tool call's %s %s", api.SpanContext().TraceID(), api.Parent().SpanID(),
			tool.SpanContext().TraceID(), tool.SpanContext().SpanID())
	}
}
