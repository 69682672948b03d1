package actors

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/persistence"
)

// A job's spans (with Config.TracerProvider set): the engine starts the
// job's span at Submit and hands it to the job actor, which ends it when
// the job ends. Each target is a span of its own, a child of the job's
// trace context as the job's row keeps it (so it joins the job's trace
// whatever process runs it), from the moment it is next in its job's
// turn to its stored outcome, with one child per step:
//
//	siftbatch.job                      (engine: Submit → the job's end)
//	└─ siftbatch.target                (job actor: next in turn → stored)
//	   ├─ siftbatch.target.wait        in the rotation, until a worker takes it
//	   ├─ siftbatch.target.fetch       at the worker: the FetchFunc (its context carries this span)
//	   └─ siftbatch.target.store       its outcome written
//
// A busy answer ends the fetch step, adds a busy_retry event to the
// target, and starts another wait; a cancel adds a cancelled event to the
// job and the target in flight. Attributes hold ids, counts, statuses,
// byte sizes and durations only: never a URL, a host, a key, a filter's
// text, an error's text or a panic value (the logging rule).

// TracerName is the instrumentation scope of the runner's spans.
const TracerName = "github.com/sift/batch/engine"

// Span names and attribute keys of the runner's spans.
const (
	SpanJob         = "siftbatch.job"
	SpanTarget      = "siftbatch.target"
	SpanTargetWait  = "siftbatch.target.wait"
	SpanTargetFetch = "siftbatch.target.fetch"
	SpanTargetStore = "siftbatch.target.store"

	EventBusyRetry = "busy_retry"
	EventCancelled = "cancelled"

	AttrJobID         = attribute.Key("siftbatch.job.id")
	AttrCaller        = attribute.Key("siftbatch.caller")
	AttrStatus        = attribute.Key("siftbatch.status")
	AttrTargetsTotal  = attribute.Key("siftbatch.targets.total")
	AttrTargetsDone   = attribute.Key("siftbatch.targets.done")
	AttrTargetsFailed = attribute.Key("siftbatch.targets.failed")
	AttrTargetIdx     = attribute.Key("siftbatch.target.idx")
	AttrResultBytes   = attribute.Key("siftbatch.result.bytes")
	AttrTookMS        = attribute.Key("siftbatch.took_ms")
	AttrBusyForMS     = attribute.Key("siftbatch.busy_for_ms")
	AttrRetryWaitMS   = attribute.Key("siftbatch.retry_wait_ms")
	AttrReused        = attribute.Key("siftbatch.reused")
	AttrTries         = attribute.Key("siftbatch.tries")
	AttrReason        = attribute.Key("siftbatch.reason")
)

// TraceContext is the trace context a span's row keeps: none for a span
// that is not recorded (no tracer, or not sampled).
func TraceContext(sc trace.SpanContext) persistence.TraceContext {
	if !sc.IsValid() {
		return persistence.TraceContext{}
	}
	return persistence.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// SpanContext is the span context a job row's trace context names, as a
// remote parent: invalid for none.
func SpanContext(tc persistence.TraceContext) trace.SpanContext {
	if tc.IsZero() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tc.TraceID, SpanID: tc.SpanID, TraceFlags: trace.TraceFlags(tc.Flags), Remote: true,
	})
}

// startJobSpan starts the span of the job m creates, a child of the
// submit's span, and puts its trace context in the job's row; nil without
// a tracer.
func (c *Config) startJobSpan(m *Submit) trace.Span {
	if c.tracer == nil {
		return nil
	}
	parent := m.Ctx
	if parent == nil {
		parent = context.Background()
	}
	_, span := c.tracer.Start(parent, SpanJob, trace.WithAttributes(
		AttrJobID.String(m.Job.ID), AttrCaller.String(m.Job.Caller), AttrTargetsTotal.Int(len(m.Targets))))
	m.Job.Trace = TraceContext(span.SpanContext())
	return span
}

// endSpanRefused ends the span of a job that was not created after all
// (the store refused it).
func endSpanRefused(span trace.Span) {
	if span != nil {
		span.SetStatus(codes.Error, "")
		span.SetAttributes(AttrStatus.String("not_created"))
		span.End()
	}
}

// SpanJobReaped is the span of a job that a new runner found live in its
// store (left by a process that stopped, or a runner that failed) and
// failed: a child of the job's stored trace context, so that the caller's
// trace shows how the job ended even when the process that ran it could
// not end its span.
const SpanJobReaped = "siftbatch.job.reaped"

// Reaped records, if tp is set and the job's row has a trace context,
// that a new runner failed rec (its status already failed) for reason, a
// fixed word ("restart", "internal error").
func Reaped(tp trace.TracerProvider, rec *persistence.JobRecord, reason string) {
	sc := SpanContext(rec.Trace)
	if tp == nil || !sc.IsValid() {
		return
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	_, span := tp.Tracer(TracerName).Start(ctx, SpanJobReaped, trace.WithAttributes(AttrJobID.String(rec.ID),
		AttrStatus.String(rec.Status), AttrReason.String(reason), AttrTargetsDone.Int(rec.TargetsDone), AttrTargetsFailed.Int(rec.TargetsFailed)))
	span.SetStatus(codes.Error, "")
	span.End()
}

// jobTrace is a job actor's spans; its zero value (no tracer) does
// nothing.
type jobTrace struct {
	tracer trace.Tracer    // nil: no spans
	job    trace.Span      // the job's span until it ends; nil: none
	parent context.Context // the job's trace context, from its row
	target trace.Span      // the target in its turn; nil: none
	tctx   context.Context // parent with target
	step   trace.Span      // the target's step: wait, fetch or store
	tries  int             // the target's fetches so far
}

// start starts a job's tracing: its span (from Submit; nil if none) and
// its first target's wait.
func (t *jobTrace) start(tracer trace.Tracer, span trace.Span, rec *persistence.JobRecord) {
	if tracer == nil {
		return
	}
	t.tracer, t.job = tracer, span
	sc := SpanContext(rec.Trace)
	if !sc.IsValid() && span != nil {
		sc = span.SpanContext()
	}
	t.parent = trace.ContextWithRemoteSpanContext(context.Background(), sc)
	if persistence.IsLive(rec.Status) {
		t.startTarget(rec)
	}
}

// startTarget starts the span of the target next in rec's turn, waiting.
func (t *jobTrace) startTarget(rec *persistence.JobRecord) {
	if t.tracer == nil || rec.TargetsDone >= rec.TargetsTotal {
		return
	}
	t.tctx, t.target = t.tracer.Start(t.parent, SpanTarget, trace.WithAttributes(
		AttrJobID.String(rec.ID), AttrTargetIdx.Int(rec.TargetsDone)))
	t.tries = 0
	t.startStep(SpanTargetWait)
}

func (t *jobTrace) startStep(name string) {
	t.endStep()
	if t.target != nil {
		_, t.step = t.tracer.Start(t.tctx, name)
	}
}

func (t *jobTrace) endStep(attrs ...attribute.KeyValue) {
	if t.step != nil {
		if len(attrs) > 0 {
			t.step.SetAttributes(attrs...)
		}
		t.step.End()
		t.step = nil
	}
}

// fetching ends the target's wait and starts its fetch: ctx, the fetch's,
// then carries the fetch step's span, for the FetchFunc's own spans.
func (t *jobTrace) fetching(ctx context.Context) context.Context {
	if t.target == nil {
		return ctx
	}
	t.tries++
	t.startStep(SpanTargetFetch)
	return trace.ContextWithSpan(ctx, t.step)
}

// fetched ends the target's fetch.
func (t *jobTrace) fetched(took time.Duration, failed bool) {
	if t.step == nil {
		return
	}
	if failed {
		t.step.SetStatus(codes.Error, "")
	}
	t.endStep(AttrTookMS.Int64(took.Milliseconds()))
}

// busy records a busy answer: the target waits again.
func (t *jobTrace) busy(busyFor, retryWait time.Duration) {
	if t.target == nil {
		return
	}
	t.target.AddEvent(EventBusyRetry, trace.WithAttributes(
		AttrBusyForMS.Int64(busyFor.Milliseconds()), AttrRetryWaitMS.Int64(retryWait.Milliseconds())))
	t.startStep(SpanTargetWait)
}

// storing starts the target's store step.
func (t *jobTrace) storing() { t.startStep(SpanTargetStore) }

// stored ends the target: stored with status (done or failed) and its
// result's bytes; then the next target's wait, if rec is still live.
func (t *jobTrace) stored(status string, resultBytes int, rec *persistence.JobRecord) {
	if t.target == nil {
		return
	}
	t.endStep()
	t.endTarget(status, AttrResultBytes.Int(resultBytes))
	if persistence.IsLive(rec.Status) {
		t.startTarget(rec)
	}
}

// endTarget ends the target in its turn with status.
func (t *jobTrace) endTarget(status string, attrs ...attribute.KeyValue) {
	if t.target == nil {
		return
	}
	t.endStep()
	t.target.SetAttributes(append(attrs, AttrStatus.String(status), AttrTries.Int(t.tries))...)
	if status == persistence.TargetFailed {
		t.target.SetStatus(codes.Error, "")
	}
	t.target.End()
	t.target = nil
}

// cancelled records a cancel on the job and on its target: one waiting
// for its turn ends there (it never starts); one in flight goes on.
func (t *jobTrace) cancelled(inFlight bool) {
	if t.tracer == nil {
		return
	}
	if t.job != nil {
		t.job.AddEvent(EventCancelled)
	}
	if t.target != nil {
		t.target.AddEvent(EventCancelled)
		if !inFlight {
			t.endTarget(persistence.TargetPending)
		}
	}
}

// ended ends the job's span with rec's status and counts; a target
// waiting for its turn ends there, one in flight once it is stored.
func (t *jobTrace) ended(rec *persistence.JobRecord, inFlight bool) {
	if t.tracer == nil {
		return
	}
	if !inFlight {
		t.endTarget(persistence.TargetPending)
	}
	if t.job == nil {
		return
	}
	t.job.SetAttributes(AttrStatus.String(rec.Status), AttrTargetsDone.Int(rec.TargetsDone), AttrTargetsFailed.Int(rec.TargetsFailed))
	if rec.Status == persistence.StatusFailed {
		t.job.SetStatus(codes.Error, "")
	}
	t.job.End()
	t.job = nil
}

// stop ends whatever is still open: the actor is stopping.
func (t *jobTrace) stop(rec *persistence.JobRecord) {
	if t.tracer == nil {
		return
	}
	t.ended(rec, false)
}
