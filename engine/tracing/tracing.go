// Package tracing is siftbatch's OpenTelemetry tracing: a [Tracing] that
// an embedder makes once ([FromEnv], from the standard OTEL_ variables, or
// [New] over a TracerProvider of its own) and wires the way the metrics
// are wired: its [Tracing.TracerProvider] in [engine.Config] (the job and
// target spans), its [Tracing.Middleware] around the HTTP routes (with
// httpapi.Options.Wrap, beside the metrics' middleware: see [Wrap]), its
// provider in mcpserver.Options (a span per tool call), and
// [Tracing.Shutdown] on a clean stop, which flushes the spans still queued.
//
// The spans of one job, end to end:
//
//	POST /v1/batch                     (Middleware: a child of the request's traceparent)
//	└─ siftbatch.job                   (Submit → the job's end: caller, counts, status)
//	   └─ siftbatch.target             (one per target: next in turn → stored)
//	      ├─ siftbatch.target.wait     in the rotation, until a worker takes it
//	      ├─ siftbatch.target.fetch    at the worker (the fetcher's filter span below it)
//	      └─ siftbatch.target.store    its outcome written
//
// A W3C traceparent on the submit makes these part of the caller's trace.
// The job keeps its span's context in its stored row, and its targets'
// spans are children of that context, not of a span in memory: they join
// the job's trace whichever process runs them. A busy answer is a
// busy_retry event on its target (then another wait); a cancel a
// cancelled event on the job and its target.
//
// Attributes carry ids, counts, statuses, byte sizes and durations only:
// never a URL, a host, an API key, a filter's text, an error's text or a
// panic value (the logging rule). A span's status is Error, without a
// description, for a failed target, a failed job and a 5xx answer.
//
// Off (no endpoint set, or [New] with nil) every method is a no-op: the
// runner gets no TracerProvider, the middleware returns its handler as it
// is, and nothing is started or allocated per request or per target.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/engine/internal/httpx"
)

// ScopeName is the instrumentation scope of the runner's spans (the
// HTTP middleware's and the MCP tools' too).
const ScopeName = actors.TracerName

// DefaultServiceName is the service.name of [FromEnv]'s spans when
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) does not
// set one.
const DefaultServiceName = "siftbatch"

// The span names of the runner, as [engine.Config.TracerProvider] makes
// them (see the package doc for the tree).
const (
	SpanJob         = actors.SpanJob
	SpanTarget      = actors.SpanTarget
	SpanTargetWait  = actors.SpanTargetWait
	SpanTargetFetch = actors.SpanTargetFetch
	SpanTargetStore = actors.SpanTargetStore
	// SpanJobReaped is the span of a job a new runner found live in its
	// store and failed ("restart"): a child of the job's stored trace
	// context, with siftbatch.reason.
	SpanJobReaped = actors.SpanJobReaped
	// EventBusyRetry is a target's event for each busy answer that is
	// tried again; EventCancelled the job's (and its target's) for a
	// cancel.
	EventBusyRetry = actors.EventBusyRetry
	EventCancelled = actors.EventCancelled
)

// Attribute keys of the runner's spans and of the middleware's.
const (
	AttrJobID         = actors.AttrJobID
	AttrCaller        = actors.AttrCaller
	AttrStatus        = actors.AttrStatus
	AttrTargetsTotal  = actors.AttrTargetsTotal
	AttrTargetsDone   = actors.AttrTargetsDone
	AttrTargetsFailed = actors.AttrTargetsFailed
	AttrTargetIdx     = actors.AttrTargetIdx
	AttrResultBytes   = actors.AttrResultBytes
	AttrTookMS        = actors.AttrTookMS
	AttrReason        = actors.AttrReason

	AttrHTTPMethod   = attribute.Key("http.request.method")
	AttrHTTPRoute    = attribute.Key("http.route")
	AttrHTTPStatus   = attribute.Key("http.response.status_code")
	AttrRequestSize  = attribute.Key("http.request.body.size")
	AttrResponseSize = attribute.Key("http.response.body.size")
	// AttrLongPoll is true on a GET of a job with ?wait= (the long-poll).
	AttrLongPoll = attribute.Key("siftbatch.long_poll")
)

// Tracing is the tracing of one process. Its methods are safe for
// concurrent use; a nil *Tracing is off.
type Tracing struct {
	tp     trace.TracerProvider     // nil: off
	sdk    *sdktrace.TracerProvider // FromEnv's, flushed by Shutdown; nil: the embedder's own
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns the tracing of an embedder's own TracerProvider (whose
// exporter and flush are the embedder's: Shutdown does nothing to it);
// nil is off.
func New(tp trace.TracerProvider) *Tracing {
	if tp == nil {
		return &Tracing{}
	}
	return &Tracing{tp: tp, tracer: tp.Tracer(ScopeName), prop: propagation.TraceContext{}}
}

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL (and _TRACES_PROTOCOL) that
// [FromEnv] exports with.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// ErrConfig is wrapped by [FromEnv]'s errors for a standard variable it
// cannot honour.
var ErrConfig = errors.New("tracing configuration")

// FromEnv returns the tracing the standard OpenTelemetry variables ask
// for. It is on only when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not
// true): spans are batched (OTEL_BSP_SCHEDULE_DELAY, _EXPORT_TIMEOUT,
// _MAX_QUEUE_SIZE, _MAX_EXPORT_BATCH_SIZE) and exported over OTLP with
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
// "grpc" or "http/protobuf" (the default, as the specification's). The
// exporters read the rest of the OTEL_EXPORTER_OTLP_ variables (headers,
// timeout, TLS, compression, insecure) themselves; the sampler is
// OTEL_TRACES_SAMPLER (and _ARG), default parentbased_always_on; the
// resource is OTEL_SERVICE_NAME (default [DefaultServiceName]) and
// OTEL_RESOURCE_ATTRIBUTES. Off, it returns a Tracing that does nothing.
// A variable it cannot honour is an error wrapping [ErrConfig]. ctx
// bounds the exporter's set-up only (no connection is made then).
func FromEnv(ctx context.Context) (*Tracing, error) {
	if !envEnabled() {
		return &Tracing{}, nil
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv()) // later wins: OTEL_SERVICE_NAME over the default
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(sdk)
	t.sdk = sdk
	return t, nil
}

// envEnabled reports whether the variables ask for spans.
func envEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// newExporter returns the OTLP exporter of the protocol the variables
// name.
func newExporter(ctx context.Context) (*otlptrace.Exporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	var err error
	switch strings.TrimSpace(proto) {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	case ProtocolHTTP, "":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL %q: want %s or %s", ErrConfig, proto, ProtocolGRPC, ProtocolHTTP)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: otlp exporter: %w", ErrConfig, err)
	}
	return exp, nil
}

// Enabled reports whether spans are made.
func (t *Tracing) Enabled() bool { return t != nil && t.tp != nil }

// TracerProvider is the provider to put in [engine.Config.TracerProvider]
// (and mcpserver.Options.TracerProvider); nil when off, which the runner
// takes as no spans at all.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if !t.Enabled() {
		return nil
	}
	return t.tp
}

// Shutdown flushes the spans still queued and stops [FromEnv]'s exporter,
// bounded by ctx; call it once the runner and the HTTP server have stopped
// (later spans are dropped). It does nothing when off, or to an
// embedder's own provider ([New]).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush spans: %w", err)
	}
	return nil
}

// Middleware traces each request next serves as a server span named
// route (a fixed pattern such as "GET /v1/batch/{id}", never the path), a
// child of the request's W3C traceparent header if it has one, else of
// the span in its context (an MCP tool's call of the API in process).
// Its attributes: the method, the route, the status code, the body sizes,
// and for a GET with ?wait= [AttrLongPoll]; never the URL, a query's
// values or a header's. The request's context carries the span to the
// handler (the runner's job span is its child). Off, it returns next.
func (t *Tracing) Middleware(route string, next http.Handler) http.Handler {
	if !t.Enabled() {
		return next
	}
	base := []attribute.KeyValue{AttrHTTPRoute.String(route)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		attrs := append(base[:len(base):len(base)], AttrHTTPMethod.String(method(r.Method)))
		if r.ContentLength > 0 {
			attrs = append(attrs, AttrRequestSize.Int64(r.ContentLength))
		}
		if r.Method == http.MethodGet && r.URL.Query().Has("wait") {
			attrs = append(attrs, AttrLongPoll.Bool(true))
		}
		ctx, span := t.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		rec := httpx.NewStatusRecorder(w)
		defer func() {
			code := rec.Code
			v := recover()
			if v != nil {
				code = http.StatusInternalServerError // never the panic value
			}
			span.SetAttributes(AttrHTTPStatus.Int(code), AttrResponseSize.Int64(rec.Bytes))
			if code >= 500 {
				span.SetStatus(codes.Error, "")
			}
			span.End()
			if v != nil {
				panic(v)
			}
		}()
		next.ServeHTTP(rec, r.WithContext(ctx))
	})
}

// method is a request's method as an attribute: one of the standard
// methods, or _OTHER (a stranger's method is not recorded).
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// Wrap returns one wrapper that applies each of wraps (nil ones skipped),
// the first outermost: for httpapi.Options.Wrap, say
// Wrap(metrics.Middleware, tracing.Middleware).
func Wrap(wraps ...func(route string, h http.Handler) http.Handler) func(route string, h http.Handler) http.Handler {
	return func(route string, h http.Handler) http.Handler {
		for i := len(wraps) - 1; i >= 0; i-- {
			if wraps[i] != nil {
				h = wraps[i](route, h)
			}
		}
		return h
	}
}
