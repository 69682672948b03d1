package cluster

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceparent is the W3C trace context a forwarded request carries to the
// job's node: the asking node's span for it (a traced serve's request
// span), else the client's own traceparent header if it is a valid one;
// "" for none.
func traceparent(r *http.Request) string {
	ctx := r.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return ""
		}
	}
	h := http.Header{}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return h.Get("traceparent")
}

// setTraceparent gives a forwarded request, answered by this node, the
// trace context the asking node sent, if it is a valid one: the holder's
// spans (its traced API's, a long-poll's) join the caller's trace.
func setTraceparent(r *http.Request, tp string) {
	if tp == "" {
		return
	}
	h := http.Header{"Traceparent": {tp}}
	if !trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h))).IsValid() {
		return // not a traceparent: dropped, never passed on
	}
	r.Header.Set("Traceparent", tp)
}
