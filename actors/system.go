package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// System is a running actor system with its supervisor: the engine's handle
// on the actors. Its methods are safe for concurrent use until [System.Stop].
type System struct {
	sys   *actor.ActorSystem
	sup   *actor.PID
	pools []*poolDispatcher
}

// poolGoroutines run the supervisor and the job actors (see poolDispatcher).
const poolGoroutines = 4

// askTimeout bounds a request to the supervisor or a job actor. They answer
// in microseconds; the bound only keeps a caller from hanging on a bug.
const askTimeout = time.Minute

// drainTimeout bounds Stop's wait for the fetches in flight to return after
// their context was cancelled.
const drainTimeout = time.Hour

// ErrNoAnswer is returned when the supervisor did not answer in time.
var ErrNoAnswer = errors.New("no answer from the runner")

// Start starts an actor system, its supervisor and the workers. The actor
// system logs through cfg.Log, filtered (see [ActorSystemLogger]).
func Start(cfg *Config) (*System, error) {
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return ActorSystemLogger(cfg.Log) }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
	)
	pool := newPoolDispatcher(poolGoroutines, 300)
	cfg.dispatcher = pool
	pools := []*poolDispatcher{pool}
	// Each worker runs on a goroutine of its own, kept from one fetch to the
	// next (a FetchFunc may block it for minutes: it shares it with nobody).
	cfg.workerDispatchers = nil
	for range cfg.Workers {
		d := newPoolDispatcher(1, 300)
		pools = append(pools, d)
		cfg.workerDispatchers = append(cfg.workerDispatchers, d)
	}
	closePools := func() {
		for _, p := range pools {
			p.close()
		}
	}
	pid, err := sys.Root.SpawnNamed(props(newSupervisor(cfg), pool, actor.WithSupervisor(&supervisionStrategy{cfg: cfg})), "supervisor")
	if err != nil {
		sys.Shutdown()
		closePools()
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	return &System{sys: sys, sup: pid, pools: pools}, nil
}

func (s *System) ask(msg any, timeout time.Duration) (any, error) {
	res, err := s.sys.Root.RequestFuture(s.sup, msg, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAnswer, err)
	}
	return res, nil
}

// Submit asks the supervisor to create a job.
func (s *System) Submit(m *Submit) (*SubmitReply, error) {
	res, err := s.ask(m, askTimeout)
	if err != nil {
		return nil, err
	}
	return res.(*SubmitReply), nil
}

// Cancel cancels a live job; false when no live job has that id.
func (s *System) Cancel(id string) bool {
	res, err := s.ask(&CancelJob{ID: id}, askTimeout)
	ok, _ := res.(bool)
	return err == nil && ok
}

// Touch moves a live job's lease; false when no actor owns the job.
func (s *System) Touch(id string, lease int64) bool {
	res, err := s.ask(&TouchJob{ID: id, Lease: lease}, askTimeout)
	ok, _ := res.(bool)
	return err == nil && ok
}

// Status asks a live job for its status; Live is false in the reply when no
// actor owns the job.
func (s *System) Status(id string) (*StatusReply, error) {
	res, err := s.ask(&StatusJob{ID: id}, askTimeout)
	if err != nil {
		return nil, err
	}
	return res.(*StatusReply), nil
}

// Stop drains the supervisor: it stops dispatching, then Stop calls
// cancelFetches (if not nil) so that the fetches in flight return, and
// waits for their outcomes to be stored; then it fails the jobs still live
// with "shutdown", stops every actor and the actor system. It returns how
// many jobs it failed. Call it once.
//
// The Drain is queued before cancelFetches runs, so the supervisor handles
// it before any target that returns at the cancel: no target is
// dispatched, and fetched under a cancelled context, after Stop began.
func (s *System) Stop(cancelFetches func()) (int, error) {
	n := 0
	drained := s.sys.Root.RequestFuture(s.sup, &Drain{}, drainTimeout)
	if cancelFetches != nil {
		cancelFetches()
	}
	res, err := drained.Result()
	if err != nil {
		err = fmt.Errorf("%w: %v", ErrNoAnswer, err)
	}
	if d, ok := res.(*Drained); ok {
		n = d.Jobs
	}
	if perr := s.sys.Root.PoisonFuture(s.sup).Wait(); perr != nil && err == nil {
		err = fmt.Errorf("stop supervisor: %w", perr)
	}
	s.sys.Shutdown()
	for _, p := range s.pools {
		p.close()
	}
	return n, err
}
