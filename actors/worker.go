package actors

import (
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// worker runs one FetchFunc call at a time. It holds no state the runner
// depends on: a FetchFunc that panics or ends its goroutine
// (runtime.Goexit) crashes it, and the supervisor's strategy restarts it
// (see supervisionStrategy) and stores the target failed.
//
// The FetchFunc runs on a goroutine of the worker's own (fetchLoop), kept
// from one call to the next, which the worker waits for. So a Goexit ends
// only that goroutine, and a runner that is shutting down can give up on a
// fetch that ignores its context (Config.Abort): the worker answers the job
// at once, and the fetch's late outcome is dropped when it comes.
type worker struct {
	cfg   *Config
	calls chan *fetch // to the fetch loop; nil: none running
	rets  chan fetchReturn
	gone  *atomic.Bool // the current loop's call was given up on
}

// fetchReturn is how one FetchFunc call ended.
type fetchReturn struct {
	out     Outcome
	took    time.Duration
	clocked time.Duration // took by Config.Now
	failed  error         // errFetchPanicked or errGoexit; nil: it returned
}

// fetchFailure is the panic a worker raises for a FetchFunc that panicked
// or ended its goroutine, for the supervisor's strategy.
type fetchFailure struct {
	took time.Duration
	err  error
}

func newWorker(cfg *Config) actor.Producer {
	return func() actor.Actor { return &worker{cfg: cfg} }
}

// Receive implements actor.Actor.
func (w *worker) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *fetch:
		w.fetch(ctx, m)
	case *actor.Stopping, *actor.Restarting:
		w.stopLoop()
	}
}

func (w *worker) fetch(ctx actor.Context, m *fetch) {
	if w.calls == nil {
		w.calls, w.rets, w.gone = make(chan *fetch), make(chan fetchReturn, 1), new(atomic.Bool)
		go fetchLoop(w.cfg, w.calls, w.rets, w.gone)
	}
	w.calls <- m
	select {
	case r := <-w.rets:
		if r.failed != nil {
			if r.failed == errGoexit {
				w.calls = nil // the loop has ended
			}
			panic(&fetchFailure{took: r.took, err: r.failed}) // to the supervisor's strategy
		}
		ctx.Send(m.job, &fetched{worker: ctx.Self(), idx: m.idx, outcome: r.out, took: r.took, clocked: r.clocked})
	case <-w.cfg.Abort:
		w.gone.Store(true)
		w.stopLoop()
		w.cfg.Log.Warn("fetch given up at shutdown: it ignored its context", slog.String(keyJobID, m.jobID), slog.Int(keyIdx, m.idx))
		ctx.Send(m.job, &fetched{worker: ctx.Self(), idx: m.idx, abandoned: true})
	}
}

// stopLoop lets the fetch loop end once its call, if any, has returned.
func (w *worker) stopLoop() {
	if w.calls != nil {
		close(w.calls)
		w.calls = nil
	}
}

// fetchLoop runs the FetchFunc for each call until calls is closed. A
// FetchFunc that calls runtime.Goexit ends this goroutine: its deferred
// call hands the worker that answer first.
func fetchLoop(cfg *Config, calls <-chan *fetch, rets chan<- fetchReturn, gone *atomic.Bool) {
	var cur *fetch
	var start time.Time
	ended := false
	defer func() {
		if ended {
			return
		}
		cfg.Log.Error("fetch ended its goroutine: a possible bug in the FetchFunc",
			slog.String(keyJobID, cur.jobID), slog.Int(keyIdx, cur.idx))
		if !gone.Load() {
			rets <- fetchReturn{took: time.Since(start), failed: errGoexit}
		}
	}()
	for m := range calls {
		cur, start = m, time.Now()
		r := fetchOnce(cfg, m, start)
		if gone.Load() {
			cfg.Log.Warn("fetch returned after shutdown gave up on it: its outcome is dropped", slog.String(keyJobID, m.jobID), slog.Int(keyIdx, m.idx))
			break
		}
		rets <- r
	}
	ended = true
}

// errFetchPanicked is the failure of a FetchFunc that panicked.
var errFetchPanicked = errInternal

// fetchOnce makes one FetchFunc call. A panic is recovered here only to be
// raised again on the worker's own goroutine (see worker.fetch), where the
// supervision strategy contains it; it is logged with its stack, never its
// value.
func fetchOnce(cfg *Config, m *fetch, start time.Time) (r fetchReturn) {
	defer func() {
		if v := recover(); v != nil {
			cfg.Log.Error("fetch panicked: a possible bug in the FetchFunc",
				slog.String(keyJobID, m.jobID), slog.Int(keyIdx, m.idx), slog.String(keyStack, string(debug.Stack())))
			r = fetchReturn{took: time.Since(start), failed: errFetchPanicked}
		}
	}()
	fctx := m.ctx
	if fctx == nil {
		fctx = cfg.FetchContext
	}
	clock := cfg.Now()
	out := cfg.Fetch(fctx, m.payload, m.idx)
	return fetchReturn{out: out, took: time.Since(start), clocked: max(cfg.Now().Sub(clock), 0)}
}
