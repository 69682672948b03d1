package actors

import (
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// worker runs one FetchFunc call at a time. It holds no state: a panic in the
// FetchFunc crashes it, and the supervisor's strategy restarts it (see
// supervisionStrategy) and stores the target failed.
type worker struct{ cfg *Config }

func newWorker(cfg *Config) actor.Producer {
	return func() actor.Actor { return &worker{cfg: cfg} }
}

// Receive implements actor.Actor.
func (w *worker) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*fetch); ok {
		w.fetch(ctx, m)
	}
}

func (w *worker) fetch(ctx actor.Context, m *fetch) {
	returned := false
	// Not a recover: the panic goes on to the mailbox and the supervisor's
	// strategy. This only logs where it came from while the panicking frames
	// are still on the stack; the panic value itself is never logged.
	defer func() {
		if !returned {
			w.cfg.Log.Error("fetch panicked: a possible bug in the FetchFunc",
				slog.String(keyJobID, m.jobID), slog.Int(keyIdx, m.idx), slog.String(keyStack, string(debug.Stack())))
		}
	}()
	start := time.Now()
	out := w.cfg.Fetch(w.cfg.FetchContext, m.payload, m.idx)
	returned = true
	ctx.Send(m.job, &fetched{worker: ctx.Self(), idx: m.idx, outcome: out, took: time.Since(start)})
}
