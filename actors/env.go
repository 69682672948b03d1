// Package actors holds siftbatch's actors: the supervisor (it owns the
// rotation of live jobs, the caps and idempotency decisions, retry timing),
// the workers (one FetchFunc call at a time each), one actor per live job
// (it owns that job's rows), the observer (it runs the hooks) and the
// maintainer (it sweeps and evicts).
// The engine package is their only user; its types are opaque here (a job's
// payload is `any`), except those defined once in engine/batchtype (Config,
// Hooks, the errors).
//
// A job's life is two state machines, its status and its phase, each with
// one table in life.go: the job actor moves them, the supervisor sees them
// in the job's reports (jobDone).
// The messages are in messages.go, the protocol at its top. The rules of the
// domain (terminal status, expiry, reuse, progress) are not here: they are
// methods of persistence.JobRecord (persistence/rules.go). How each kind of
// failure is contained: docs/RELIABILITY.md §7; the whole picture:
// docs/ARCHITECTURE.md.
package actors

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/persistence"
)

// Outcome is one fetch's result, classified by the engine.
type Outcome struct {
	Result []byte // the result's JSON, on success
	Err    error  // nil on success; handed to Hooks.Target
	Msg    string // the error text to store
	Hint   string
	Busy   bool // the target was only busy: try it again later
}

// FetchFunc does target idx of the job whose payload is given.
type FetchFunc func(ctx context.Context, payload any, idx int) Outcome

// Hooks are the runner's hooks, defined once in package batchtype.
type Hooks = batchtype.Hooks

// Admission admits jobs against caps wider than the runner; defined in
// package batchtype.
type Admission = batchtype.Admission

// Config is what the actors need: the runner's own Config (every field set:
// the engine applies the defaults), and what the engine wires in.
type Config struct {
	batchtype.Config
	Store        *persistence.Store
	Fetch        FetchFunc
	FetchContext context.Context // cancelled by the engine's Close
	Log          *slog.Logger
	// Views is where job actors publish their state for readers.
	Views *Views
	// Abort is closed when the runner gives up waiting for the fetches in
	// flight (Shutdown's context is done): workers stop waiting for them.
	Abort <-chan struct{}
	// OnFail is called once, on a goroutine of its own, when the runner's
	// own code has failed past what supervision contains (the supervisor
	// or a job actor panicked): the supervisor and its children are being
	// stopped, and the engine fails closed.
	OnFail func()
	// HookPanics counts the hook calls that panicked.
	HookPanics atomic.Uint64

	tracer trace.Tracer // from TracerProvider (see trace.go); nil: no spans

	observer   *actor.PID // runs the hooks (observer.go)
	supervisor *actor.PID // set by the supervisor as it starts; the job actors report to it
	// halted is set once the runner has stopped: the store's late answers
	// then have nobody to go to.
	halted atomic.Bool
	// maintenance sweeps and evicts (maintenance.go); nil: nobody does.
	maintenance *actor.PID
	// maintDue is what the maintainer has been asked for since its last
	// pass began (dueSweep, dueEvict).
	maintDue atomic.Uint32
	// stopping is set when Stop begins: from then on the maintainer
	// evicts nothing, so the jobs failed "shutdown" stay readable until the
	// next runner's first eviction.
	stopping atomic.Bool
	// maintainEvery is the maintainer's timer; 0: sweepInterval.
	maintainEvery time.Duration
	// maintFailures counts the maintenance passes that failed.
	maintFailures atomic.Uint64
	dispatcher    actor.Dispatcher // for the job actors; nil: protoactor's default
	// workerDispatchers has one dispatcher per worker; missing: the default.
	workerDispatchers []actor.Dispatcher
}

// workerProps are the props of worker i (from 0).
func (c *Config) workerProps(p actor.Producer, i int) *actor.Props {
	if i >= len(c.workerDispatchers) {
		return props(p, nil)
	}
	return props(p, c.workerDispatchers[i])
}

// jobProps are the props of a job actor.
func (c *Config) jobProps(p actor.Producer) *actor.Props {
	return props(p, c.dispatcher)
}

// props are the props of every siftbatch actor: its mailbox (see mailbox)
// and its dispatcher (nil: protoactor's default), plus opts.
func props(p actor.Producer, d actor.Dispatcher, opts ...actor.PropsOption) *actor.Props {
	opts = append(opts, actor.WithMailbox(newMailbox))
	if d != nil {
		opts = append(opts, actor.WithDispatcher(d))
	}
	return actor.PropsFromProducer(p, opts...)
}

// The internal error text stored for a target whose fetch panicked.
const internalError = "internal error"
