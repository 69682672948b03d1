package actors

import (
	"errors"
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// The hooks are user code: they run in the observer, an actor of their own,
// never in the supervisor or a job actor. The runner's actors send it a
// hookEvent for each call; a hook that panics (or ends its goroutine) fails
// the observer, whose strategy logs it, counts it and resumes the observer
// without that one event: the runner's state never depends on a hook.
// Events from one actor run in the order it sent them; the observer is
// stopped last, so once the runner has stopped every hook has run.

// hookName says which hook an event calls.
type hookName uint8

const (
	hookJob hookName = iota
	hookTarget
	hookJobSeconds
	hookDepth
	hookInflight
	hookEnded // Config.Admission's Ended, not a hook: isolated all the same
)

var hookNames = [...]string{hookJob: "Job", hookTarget: "Target", hookJobSeconds: "JobSeconds", hookDepth: "Depth", hookInflight: "Inflight", hookEnded: "Admission.Ended"}

func (h hookName) String() string { return hookNames[h] }

// hookEvent is one call of a hook.
type hookEvent struct {
	hook    hookName
	jobID   string // "" where the hook has no job
	outcome string // Job; Ended's status
	caller  string // Ended
	err     error  // Target
	d       time.Duration
	n       int // Target's result bytes; Depth's and Inflight's count
}

type observer struct {
	hooks     *Hooks
	admission Admission
	// stopped is called once the observer has stopped: every hook queued
	// before its poison pill has returned (see System.Stop).
	stopped func()
}

// Receive implements actor.Actor.
func (o *observer) Receive(ctx actor.Context) {
	e, ok := ctx.Message().(*hookEvent)
	if !ok {
		if _, ok := ctx.Message().(*actor.Stopped); ok {
			o.stopped()
		}
		return
	}
	h := o.hooks
	switch e.hook {
	case hookJob:
		h.Job(e.outcome)
	case hookTarget:
		h.Target(e.err, e.d, e.n)
	case hookJobSeconds:
		h.JobSeconds(e.d)
	case hookDepth:
		h.Depth(e.n)
	case hookInflight:
		h.Inflight(e.n)
	case hookEnded:
		o.admission.Ended(e.caller, e.jobID, e.outcome)
	}
	// Back to the pool only after a call that returned: the event of a hook
	// that panicked goes to the strategy, and then to the GC.
	putEvent(e)
}

// observerReceive is the name of the observer's Receive as a stack frame
// shows it.
var observerReceive = runtime.FuncForPC(reflect.ValueOf((*observer).Receive).Pointer()).Name()

// InHook reports whether the calling goroutine is running a hook (or an
// Admission's Ended): whether an observer's Receive, of any System in the
// process, is on its stack. It walks the stack: for a rare call, such as
// a stop.
func InHook() bool {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	for n == len(pcs) { // deeper than pcs: walk it all
		pcs = make([]uintptr, 2*len(pcs))
		n = runtime.Callers(2, pcs)
	}
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == observerReceive {
			return true
		}
		if !more {
			return false
		}
	}
}

// hookSet reports whether hook n is set: an event is sent only then.
func hookSet(c *Config, n hookName) bool {
	h := &c.Hooks
	switch n {
	case hookEnded:
		return c.Admission != nil
	case hookJob:
		return h.Job != nil
	case hookTarget:
		return h.Target != nil
	case hookJobSeconds:
		return h.JobSeconds != nil
	case hookDepth:
		return h.Depth != nil
	case hookInflight:
		return h.Inflight != nil
	}
	return false
}

// hook sends e to the observer, if its hook is set.
func (c *Config) hook(ctx actor.SenderContext, e hookEvent) {
	if c.observer != nil && hookSet(c, e.hook) {
		p := events.Get().(*hookEvent)
		*p = e
		ctx.Send(c.observer, p)
	}
}

// events pools the hook events: a few per target, each used once by the
// observer and then put back.
var events = sync.Pool{New: func() any { return new(hookEvent) }}

func putEvent(e *hookEvent) {
	*e = hookEvent{}
	events.Put(e)
}

func (c *Config) hookJob(ctx actor.SenderContext, jobID, outcome string) {
	c.hook(ctx, hookEvent{hook: hookJob, jobID: jobID, outcome: outcome})
}

// ended tells the Admission that a job is no longer live.
func (c *Config) ended(ctx actor.SenderContext, jobID, caller, status string) {
	c.hook(ctx, hookEvent{hook: hookEnded, jobID: jobID, caller: caller, outcome: status})
}

func (c *Config) hookDepth(ctx actor.SenderContext, n int) {
	c.hook(ctx, hookEvent{hook: hookDepth, n: n})
}

func (c *Config) hookInflight(ctx actor.SenderContext, n int) {
	c.hook(ctx, hookEvent{hook: hookInflight, n: n})
}

// observerStrategy contains a hook's failure: it logs the hook's name and
// job id (never the panic value), counts it, and resumes the observer
// without the event.
type observerStrategy struct{ cfg *Config }

// HandleFailure implements actor.SupervisorStrategy.
func (st *observerStrategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, message any) {
	st.cfg.HookPanics.Add(1)
	attrs := []any{}
	if e, ok := actor.UnwrapEnvelopeMessage(message).(*hookEvent); ok {
		attrs = append(attrs, slog.String(keyHook, e.hook.String()))
		if e.jobID != "" {
			attrs = append(attrs, slog.String(keyJobID, e.jobID))
		}
	}
	what := "hook panicked: a possible bug in the hook; the call is skipped"
	if errors.Is(asError(reason), errGoexit) {
		what = "hook ended its goroutine: a possible bug in the hook; the call is skipped"
	}
	st.cfg.Log.Error(what, attrs...)
	sup.ResumeChildren(child)
}

// errGoexit is the failure of an actor whose message handler called
// runtime.Goexit (see mailbox.run).
var errGoexit = errors.New("goroutine exited")

func asError(v any) error {
	err, _ := v.(error)
	return err
}
