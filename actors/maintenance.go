package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// maintainer is the runner's maintenance actor (River's JobCleaner,
// asynq's janitor): it sweeps expired jobs (settled, lease + TTL ≤
// Config.Now) and evicts the oldest settled jobs while the store's bytes
// exceed MaxBytes, off the Submit and target paths. It runs on its own
// timer (every maintainEvery), and is also told after each created job
// (sweep, and evict: the job's rows add bytes) and each write of a job
// actor that adds bytes or settles its job (evict), so that the retention
// rules hold at or right after those events. It runs on a goroutine of its
// own: a long pass holds up neither the supervisor nor a job.
//
// A pass that panics (a bug, or a store fault) is contained by its
// strategy (maintenanceStrategy): logged, and the actor resumed; the next
// pass goes on. The runner never depends on a pass having run.
type maintainer struct {
	cfg   *Config
	timer *time.Timer
}

// What a maintenance pass does, as bits of Config.maintDue.
const (
	dueSweep uint32 = 1 << iota
	dueEvict
)

// maintain asks for a pass: the bits of due in Config.maintDue, and one
// message, unless one is already on its way (the pass takes every bit set
// when it begins).
type maintain struct{}

// maintainMsg is the one maintain message: it carries nothing.
var maintainMsg = &maintain{}

// maintainTick is the maintainer's timer: a sweep, then the next tick.
type maintainTick struct{}

// sweepInterval is how often the maintainer sweeps expired jobs with no
// Submit to prompt it; sweepBatch is how many jobs one sweep step deletes
// before it lets other messages through.
const (
	sweepInterval = time.Minute
	sweepBatch    = 64
)

// maintain asks the maintenance actor for a pass that does what due says,
// if it runs (a test's job actor may have none). Safe for concurrent use.
func (c *Config) maintain(ctx actor.SenderContext, due uint32) {
	if c.maintenance != nil && c.maintDue.Or(due) == 0 {
		ctx.Send(c.maintenance, maintainMsg)
	}
}

// evictSoon asks for an eviction if the store's bytes exceed MaxBytes (one
// atomic load when they do not): after a write that adds bytes or settles
// a job.
func (c *Config) evictSoon(ctx actor.SenderContext) {
	if c.Store.Bytes() > c.MaxBytes {
		c.maintain(ctx, dueEvict)
	}
}

func newMaintainer(cfg *Config) actor.Producer {
	return func() actor.Actor { return &maintainer{cfg: cfg} }
}

// Receive implements actor.Actor.
func (m *maintainer) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		m.arm(ctx)
	case *actor.Stopping:
		if m.timer != nil {
			m.timer.Stop()
		}
	case *maintainTick:
		m.cfg.maintDue.Or(dueSweep)
		m.pass(ctx)
		m.arm(ctx)
	case *maintain:
		m.pass(ctx)
	}
}

// arm sets the timer for the next periodic sweep.
func (m *maintainer) arm(ctx actor.Context) {
	every := m.cfg.maintainEvery
	if every <= 0 {
		every = sweepInterval
	}
	root, self := ctx.ActorSystem().Root, ctx.Self()
	m.timer = time.AfterFunc(every, func() { root.Send(self, &maintainTick{}) })
}

// pass does what has been asked for since the last pass began.
func (m *maintainer) pass(ctx actor.Context) {
	due := m.cfg.maintDue.Swap(0)
	if due&dueSweep != 0 {
		m.sweep(ctx)
	}
	if due&dueEvict != 0 && !m.cfg.stopping.Load() {
		m.evict()
	}
}

// sweep deletes up to sweepBatch expired jobs; if more may be due it asks
// for another pass, after the messages already queued.
func (m *maintainer) sweep(ctx actor.Context) {
	before := m.cfg.Now().Add(-m.cfg.TTL).UnixNano()
	n, more, err := m.cfg.Store.Sweep(before, sweepBatch)
	if err != nil {
		m.cfg.Log.Warn("sweep", slog.String(keyErr, storeErrText(err)))
		return
	}
	if n > 0 {
		m.cfg.Log.Debug("swept expired jobs", slog.Int(keyCount, n))
	}
	if more {
		m.cfg.maintain(ctx, dueSweep)
	}
}

// evict deletes the oldest settled jobs while the store's bytes exceed
// MaxBytes.
func (m *maintainer) evict() {
	if n, err := m.cfg.Store.Evict(m.cfg.MaxBytes); err != nil {
		m.cfg.Log.Warn("evict", slog.String(keyErr, storeErrText(err)))
	} else if n > 0 {
		m.cfg.Log.Debug("evicted jobs", slog.Int(keyCount, n))
	}
}

// maintenanceStrategy contains a maintenance pass that failed: it logs it
// (never the panic value) and resumes the maintainer, which goes on at the
// next pass.
type maintenanceStrategy struct{ cfg *Config }

// HandleFailure implements actor.SupervisorStrategy.
func (st *maintenanceStrategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, _, _ any) {
	st.cfg.Log.Error("maintenance pass failed: a bug in siftbatch or a store fault; the next pass goes on")
	st.cfg.maintFailures.Add(1)
	sup.ResumeChildren(child)
}
