package actors

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// waitTimeout bounds a request to an actor in the tests: the kit's
// deadline, for a test that has hung.
const waitTimeout = testkit.Deadline

// probe is an actor that stands in for a peer: it forwards every message it
// receives (lifecycle messages aside) to a channel.
type probe struct{ got chan any }

func newProbe() *probe { return &probe{got: make(chan any, 256)} }

func (p *probe) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting, *actor.PoisonPill:
		return
	}
	p.got <- ctx.Message()
}

// next returns the next message the probe got, of type T.
func next[T any](t *testing.T, p *probe) T {
	t.Helper()
	m := testkit.Recv(t, p.got)
	v, ok := m.(T)
	require.Truef(t, ok, "probe got %T, want %T", m, *new(T))
	return v
}

// quiet asserts the probe got nothing more.
func quiet(t *testing.T, p *probe) {
	t.Helper()
	select {
	case m := <-p.got:
		t.Fatalf("probe got an unexpected %T", m)
	default:
	}
}

// testSystem is a real actor system with a test config on an in-memory store.
type testSystem struct {
	sys   *actor.ActorSystem
	cfg   *Config
	store *persistence.Store
	clock *testkit.Clock // Config.Now
}

func newTestSystem(t *testing.T) *testSystem {
	t.Helper()
	store, err := persistence.Open("")
	require.NoError(t, err)
	ts := &testSystem{store: store, clock: testkit.NewClock()}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ts.cfg = &Config{
		Config: batchtype.Config{
			TTL: time.Hour, TargetsPerJob: 32, JobsPerCaller: 2, JobsTotal: 4, Workers: 1,
			MaxBytes: 1 << 20, RetryWait: time.Hour, RetryFor: time.Minute, Now: ts.clock.Now,
		},
		Store: store, FetchContext: context.Background(), Log: log, Views: &Views{},
	}
	ts.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return ActorSystemLogger(log) }))
	// The hooks run in an observer, as in a runner; tests set ts.cfg.Hooks.
	ts.cfg.observer = ts.sys.Root.Spawn(props(func() actor.Actor { return &observer{hooks: &ts.cfg.Hooks} }, nil,
		actor.WithGuardian(&observerStrategy{cfg: ts.cfg})))
	// A dead letter is a message lost: none may happen, but for the
	// maintainer's timer tick that fires as the maintainer stops (nothing
	// is lost: the next runner's maintainer sweeps).
	var dead sync.Mutex
	var deadLetters []string
	sub := ts.sys.EventStream.Subscribe(func(evt any) {
		if d, ok := evt.(*actor.DeadLetterEvent); ok {
			if _, tick := d.Message.(*maintainTick); tick {
				return
			}
			dead.Lock()
			deadLetters = append(deadLetters, fmt.Sprintf("%T to %s", d.Message, d.PID.Id))
			dead.Unlock()
		}
	})
	t.Cleanup(func() {
		ts.sys.EventStream.Unsubscribe(sub)
		dead.Lock()
		require.Empty(t, deadLetters, "dead letters")
		dead.Unlock()
		ts.sys.Shutdown()
		require.NoError(t, store.Close())
	})
	return ts
}

// spawnProbe starts a probe actor.
func (ts *testSystem) spawnProbe(t *testing.T) (*probe, *actor.PID) {
	t.Helper()
	p := newProbe()
	pid := ts.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	t.Cleanup(func() { _ = ts.sys.Root.StopFuture(pid).Wait() })
	return p, pid
}

// stop stops an actor and waits for it.
func (ts *testSystem) stop(t *testing.T, pid *actor.PID) {
	t.Helper()
	require.NoError(t, ts.sys.Root.StopFuture(pid).Wait())
}

// newJobRecord stores a queued job of n targets and returns its record.
func (ts *testSystem) newJobRecord(t *testing.T, id, caller string, n int) persistence.JobRecord {
	t.Helper()
	now := ts.clock.Now().UnixNano()
	rec := persistence.JobRecord{ID: id, Caller: caller, Status: persistence.StatusQueued, TargetsTotal: n, Created: now, Lease: now}
	rec.Key[0] = id[0]
	rec.Key[1] = id[1]
	targets := make([]persistence.TargetRecord, n)
	for i := range targets {
		targets[i] = persistence.TargetRecord{Idx: i, URL: "http://h/" + id, Status: persistence.TargetPending}
	}
	require.NoError(t, ts.store.CreateJob(&rec, targets))
	return rec
}

// ask sends msg to pid and waits for the answer.
func (ts *testSystem) ask(t *testing.T, pid *actor.PID, msg any) any {
	t.Helper()
	res, err := ts.sys.Root.RequestFuture(pid, msg, waitTimeout).Result()
	require.NoError(t, err)
	return res
}
