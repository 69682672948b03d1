package mcpserver

import (
	"context"
	"net/http"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SpanToolCall is the span of one tool call (with
// [Options.TracerProvider]): a child of the MCP request's span, and the
// parent of the API requests the tool makes. Its attributes: the tool's
// name ([AttrTool], one of the six, or "_other") and whether it ended in
// an error; never its arguments.
const SpanToolCall = "mcp tools/call"

// AttrTool is [SpanToolCall]'s tool name attribute.
const AttrTool = attribute.Key("mcp.tool.name")

// toolNames are the tools' names, the only ones a span records.
var toolNames = []string{"batch_submit", "batch_status", "batch_wait", "batch_result", "batch_list", "batch_cancel"}

// traced returns hc, or with tp set a copy of hc whose requests carry
// the W3C traceparent of the span in their context (a tool call's).
func traced(hc *http.Client, tp trace.TracerProvider) *http.Client {
	if tp == nil {
		return hc
	}
	c := *hc
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = traceTransport{next: next}
	return &c
}

// traceTransport sets a request's traceparent from its context's span.
type traceTransport struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t traceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(r.Context()).IsValid() {
		r = r.Clone(r.Context())
		propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.next.RoundTrip(r)
}

// traceTools returns the server middleware that traces each tool call.
func traceTools(tp trace.TracerProvider) mcp.Middleware {
	tracer := tp.Tracer(Name)
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			call, ok := req.(*mcp.CallToolRequest)
			if !ok || method != "tools/call" {
				return next(ctx, method, req)
			}
			name := "_other"
			if call.Params != nil && slices.Contains(toolNames, call.Params.Name) {
				name = call.Params.Name
			}
			ctx, span := tracer.Start(ctx, SpanToolCall, trace.WithAttributes(AttrTool.String(name)))
			defer span.End()
			res, err := next(ctx, method, req)
			failed := err != nil
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
				failed = true
			}
			span.SetAttributes(attribute.Bool("mcp.tool.error", failed))
			if failed {
				span.SetStatus(codes.Error, "") // never the error's text
			}
			return res, err
		}
	}
}
