package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/persistence"
)

// System is a running actor system with its supervisor: the engine's handle
// on the actors. Its methods are safe for concurrent use until [System.Stop].
type System struct {
	sys      *actor.ActorSystem
	cfg      *Config
	sup      *actor.PID
	observer *actor.PID
	maint    *actor.PID // the maintainer
	pools    []*poolDispatcher
	hooks    *poolDispatcher // the observer's
	// observerStopped is closed once the observer has stopped, its last
	// hook returned.
	observerStopped chan struct{}
	observerOnce    sync.Once
	abortCh         chan struct{} // cfg.Abort
	abortOnce       sync.Once
	failed          atomic.Bool   // the supervisor failed: the runner failed closed
	failedCh        chan struct{} // closed when failed is set
	asks            sync.Map      // *actor.Future → nil: requests waiting for the supervisor
}

// poolGoroutines run the supervisor and the job actors (see poolDispatcher).
const poolGoroutines = 4

// askTimeout bounds a request to the supervisor or a job actor. They answer
// in microseconds; the bound only keeps a caller from hanging on a bug.
const askTimeout = time.Minute

// drainTimeout bounds Stop's wait for the supervisor's drain: the fetches in
// flight have their own bound (Stop's giveUp), so this only keeps Stop from
// hanging on a bug.
const drainTimeout = 10 * time.Minute

// ErrNoAnswer is returned when the supervisor did not answer in time.
var ErrNoAnswer = errors.New("no answer from the runner")

// Start starts an actor system, the observer that runs the hooks, the
// maintainer that sweeps and evicts, the supervisor and the workers. The
// actor system logs through cfg.Log, filtered (see [ActorSystemLogger]).
// cfg.Abort, cfg.observer and cfg.maintenance are set here, and the
// store's retry wait (cfg.RetryWait); cfg.OnFail is wrapped so that
// [System.Stop] knows.
func Start(cfg *Config) (*System, error) {
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return ActorSystemLogger(cfg.Log) }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
	)
	s := &System{sys: sys, cfg: cfg, abortCh: make(chan struct{}), failedCh: make(chan struct{}), observerStopped: make(chan struct{})}
	cfg.Abort = s.abortCh
	if cfg.TracerProvider != nil {
		cfg.tracer = cfg.TracerProvider.Tracer(TracerName)
	}
	// The store's writer retries the job actors' failed writes every
	// RetryWait.
	cfg.Store.SetRetryWait(cfg.RetryWait)
	if cfg.Views == nil {
		cfg.Views = &Views{}
	}
	onFail := cfg.OnFail
	cfg.OnFail = func() {
		if s.failed.CompareAndSwap(false, true) {
			close(s.failedCh)
			s.failAsks()
		}
		if onFail != nil {
			onFail()
		}
	}
	pool := newPoolDispatcher(poolGoroutines, 300)
	cfg.dispatcher = pool
	// The hooks run on a goroutine of their own: a slow hook holds up no
	// job.
	hooks := newPoolDispatcher(1, 300)
	s.hooks = hooks
	s.pools = []*poolDispatcher{pool, hooks}
	// Each worker runs on a goroutine of its own, kept from one fetch to the
	// next (a FetchFunc may block it for minutes: it shares it with nobody).
	cfg.workerDispatchers = nil
	for range cfg.Workers {
		d := newPoolDispatcher(1, 300)
		s.pools = append(s.pools, d)
		cfg.workerDispatchers = append(cfg.workerDispatchers, d)
	}
	closePools := func() {
		for _, p := range s.pools {
			p.close()
		}
	}
	var err error
	observerStopped := func() { s.observerOnce.Do(func() { close(s.observerStopped) }) }
	s.observer, err = sys.Root.SpawnNamed(props(func() actor.Actor {
		return &observer{hooks: &cfg.Hooks, admission: cfg.Admission, stopped: observerStopped}
	}, hooks,
		actor.WithGuardian(&observerStrategy{cfg: cfg})), "observer")
	if err != nil {
		sys.Shutdown()
		closePools()
		return nil, fmt.Errorf("start observer: %w", err)
	}
	cfg.observer = s.observer
	// The maintainer sweeps and evicts on a goroutine of its own: a long
	// pass holds up no job.
	maint := newPoolDispatcher(1, 300)
	s.pools = append(s.pools, maint)
	s.maint, err = sys.Root.SpawnNamed(props(newMaintainer(cfg), maint, actor.WithGuardian(&maintenanceStrategy{cfg: cfg})), "maintainer")
	if err != nil {
		_ = sys.Root.PoisonFuture(s.observer).Wait()
		sys.Shutdown()
		closePools()
		return nil, fmt.Errorf("start maintainer: %w", err)
	}
	cfg.maintenance = s.maint
	s.sup, err = sys.Root.SpawnNamed(props(newSupervisor(cfg), pool, actor.WithSupervisor(&supervisionStrategy{cfg: cfg}),
		actor.WithGuardian(&failClosedStrategy{cfg: cfg})), "supervisor")
	if err != nil {
		_ = sys.Root.PoisonFuture(s.maint).Wait()
		_ = sys.Root.PoisonFuture(s.observer).Wait()
		sys.Shutdown()
		closePools()
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	// A durable job waits in storing for a write the store holds (the disk
	// full or failing): it hears so, and answers a cancel at once.
	root, sup := sys.Root, s.sup
	cfg.Store.SetHeldHook(func(id string, err error) {
		if !cfg.stopping.Load() {
			root.Send(sup, &writeHeld{id: id, err: err})
		}
	})
	return s, nil
}

// ask sends msg to the supervisor and waits for its answer. When the
// runner fails, every request still waiting is answered ErrFailed (see
// failAsks): the supervisor will never answer them.
func (s *System) ask(msg any, timeout time.Duration) (any, error) {
	return s.await(s.request(msg, timeout))
}

// request sends msg to the supervisor; await waits for the answer.
func (s *System) request(msg any, timeout time.Duration) *actor.Future {
	f := s.sys.Root.RequestFuture(s.sup, msg, timeout)
	s.asks.Store(f, nil)
	if s.failed.Load() && s.asks.CompareAndDelete(f, nil) {
		s.sys.Root.Send(f.PID(), failedAnswer{})
	}
	return f
}

func (s *System) await(f *actor.Future) (any, error) {
	res, err := f.Result()
	s.asks.Delete(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAnswer, err)
	}
	if _, ok := res.(failedAnswer); ok {
		return nil, ErrFailed
	}
	return res, nil
}

// failedAnswer answers the requests of a runner that has failed.
type failedAnswer struct{}

// failAsks answers every request still waiting for the supervisor.
func (s *System) failAsks() {
	s.asks.Range(func(k, _ any) bool {
		if s.asks.CompareAndDelete(k, nil) {
			s.sys.Root.Send(k.(*actor.Future).PID(), failedAnswer{})
		}
		return true
	})
}

// ErrFailed is returned by a request the supervisor could not answer
// because the runner's own code failed (see Config.OnFail).
var ErrFailed = batchtype.ErrFailed

// Submit asks the supervisor to create a job.
func (s *System) Submit(m *Submit) (*SubmitReply, error) {
	res, err := s.ask(m, askTimeout)
	if err != nil {
		return nil, err
	}
	return res.(*SubmitReply), nil
}

// Cancel cancels a live job; false when no live job has that id. An error
// says the cancel was not made: it could not be stored (a durable store's
// disk full or failing: nothing changed), or no answer came in time.
func (s *System) Cancel(id string) (bool, error) {
	res, err := s.ask(&CancelJob{ID: id}, askTimeout)
	if err != nil {
		return false, err
	}
	if err, ok := res.(error); ok {
		return false, err
	}
	ok, _ := res.(bool)
	return ok, nil
}

// Stop drains the supervisor: it stops dispatching, then Stop calls
// cancelFetches (if not nil) so that the fetches in flight return, and
// waits for their outcomes to be stored; then it fails the jobs still live
// with "shutdown", stops every actor (the maintainer after the jobs, the
// observer last, once every hook has run) and the actor system. The
// writes the store's writer still retries for the jobs are tried once
// more, and given up if they fail (Store.AbandonRetries). It returns how
// many jobs it failed. Call it once.
//
// When giveUp is closed before the fetches in flight have returned, Stop
// stops waiting for them (cfg.Abort, which it closes): their targets stay
// pending, their jobs fail "shutdown", and their late outcomes are dropped.
// When it is closed before the hooks queued have run (a hook that blocks),
// Stop stops waiting for the observer, however long it has waited: the
// hooks' goroutine is left to the hook. A nil giveUp waits for good.
// Called from a hook ([InHook]), Stop does not wait for the observer at
// all: the hook calling it, and the hooks queued after it, run after Stop
// has returned.
//
// The Drain is queued before cancelFetches runs, so the supervisor handles
// it before any target that returns at the cancel: no target is
// dispatched, and fetched under a cancelled context, after Stop began.
// noRoomCheck is how often a durable drain looks whether the disk has no
// room for a write (Stop).
const noRoomCheck = 200 * time.Millisecond

func (s *System) Stop(cancelFetches func(), giveUp <-chan struct{}) (n int, gaveUp bool, err error) {
	s.cfg.stopping.Store(true)
	s.cfg.Store.SetHeldHook(nil)
	if !s.failed.Load() {
		drain := s.request(&Drain{}, drainTimeout)
		res := make(chan any, 1)
		go func() {
			r, err := s.await(drain)
			if err != nil {
				res <- err
				return
			}
			res <- r
		}()
		if cancelFetches != nil {
			cancelFetches()
		}
		// A durable job waits in storing for a write the store's writer
		// holds (the disk full or failing). While the disk has no room
		// for a write at all, those writes are given up at once (looked
		// at every noRoomCheck): the drain would wait for the disk until
		// giveUp for nothing. Otherwise (a failing sync, which a reopen
		// may mend) they are given up at giveUp.
		noRoom := time.NewTicker(noRoomCheck)
		defer noRoom.Stop()
		abandoned := false
		abandon := func() {
			if !abandoned && s.cfg.Store.Durable() {
				abandoned = true
				s.cfg.Store.AbandonRetries()
			}
		}
		var r any
	drained:
		for {
			select {
			case r = <-res:
				break drained
			case <-noRoom.C:
				if errors.Is(s.cfg.Store.Writable(), persistence.ErrDiskFull) {
					abandon()
				}
			case <-giveUp:
				gaveUp = true
				s.abort()
				abandon()
				r = <-res
				break drained
			}
		}
		switch r := r.(type) {
		case *Drained:
			n = r.Jobs
		case error:
			err = r
		}
		if !s.failed.Load() {
			if perr := s.sys.Root.PoisonFuture(s.sup).Wait(); perr != nil && err == nil {
				err = fmt.Errorf("stop supervisor: %w", perr)
			}
		}
	} else if cancelFetches != nil {
		cancelFetches()
	}
	// The maintainer stops once the supervisor and the jobs, which tell
	// it, have stopped; a pass under way finishes first.
	if perr := s.sys.Root.PoisonFuture(s.maint).Wait(); perr != nil && err == nil {
		err = fmt.Errorf("stop maintainer: %w", perr)
	}
	// What the store's writer still retries for a job is given up: no
	// write of a job this runner no longer owns commits later (the next
	// runner reaps it), and no late answer goes to a stopped actor.
	s.cfg.halted.Store(true)
	s.cfg.Store.AbandonRetries()
	s.abort() // a worker the failed runner stopped may still wait for a fetch
	// The observer runs every hook queued before it stops, unless giveUp
	// comes first (a hook that blocks): its goroutine is then left to the
	// hook, as a fetch's is. Stop waits for the observer's own word that
	// it has stopped, however long that takes, not for a PoisonFuture:
	// that one ends after 10 s whether or not the observer has stopped,
	// and a hook still running then would hold Stop in closing the hooks'
	// pool for good.
	// Called from a hook, Stop would wait for itself: it leaves the hooks'
	// goroutine to that hook, which runs the hooks still queued once it
	// returns.
	s.sys.Root.Poison(s.observer)
	hooksDone := true
	if InHook() {
		hooksDone = false
		s.cfg.Log.Info("shutdown called from a hook: the hooks still queued run after it")
	} else {
		select {
		case <-s.observerStopped:
		case <-giveUp:
			gaveUp, hooksDone = true, false
			s.cfg.Log.Warn("shutdown gave up on the hooks: a hook is blocked")
		}
	}
	s.sys.Shutdown()
	for _, p := range s.pools {
		if p == s.hooks && !hooksDone {
			p.closeNoWait()
			continue
		}
		p.close()
	}
	return n, gaveUp, err
}

// WaitSupervisorStopped waits (10 s at most) until the supervisor and every
// child of it have stopped.
func (s *System) WaitSupervisorStopped() {
	_ = s.sys.Root.StopFuture(s.sup).Wait()
}

func (s *System) abort() { s.abortOnce.Do(func() { close(s.abortCh) }) }

// Abort has the workers stop waiting for the fetches in flight (see Stop).
func (s *System) Abort() { s.abort() }

// Failed reports whether the runner's own code failed (see Config.OnFail).
func (s *System) Failed() bool { return s.failed.Load() }

// HookPanics returns how many hook calls have panicked.
func (s *System) HookPanics() uint64 { return s.cfg.HookPanics.Load() }

// HookJob calls Hooks.Job(outcome) for job id, in the observer, as the
// actors do: for a job the engine reused without the supervisor (an
// Admission's answer).
func (s *System) HookJob(id, outcome string) { s.cfg.hookJob(s.sys.Root, id, outcome) }
