package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 15 * time.Second

// clock is an injectable Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// hookRecorder records every hook call.
type hookRecorder struct {
	mu          sync.Mutex
	jobs        map[string]int
	targets     int
	targetErrs  int
	jobSeconds  int
	maxDepth    int
	maxInflight int
	ended       chan string // every terminal outcome, in order
}

func newHookRecorder() *hookRecorder {
	return &hookRecorder{jobs: map[string]int{}, ended: make(chan string, 1024)}
}

func (h *hookRecorder) hooks() engine.Hooks {
	return engine.Hooks{
		Job: func(o string) {
			h.mu.Lock()
			h.jobs[o]++
			h.mu.Unlock()
			switch o {
			case "done", "partial", "failed", "cancelled":
				h.ended <- o
			}
		},
		Target: func(err error, _ time.Duration, _ int) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.targets++
			if err != nil {
				h.targetErrs++
			}
		},
		JobSeconds: func(time.Duration) {
			h.mu.Lock()
			h.jobSeconds++
			h.mu.Unlock()
		},
		Depth: func(n int) {
			h.mu.Lock()
			h.maxDepth = max(h.maxDepth, n)
			h.mu.Unlock()
		},
		Inflight: func(n int) {
			h.mu.Lock()
			h.maxInflight = max(h.maxInflight, n)
			h.mu.Unlock()
		},
	}
}

func (h *hookRecorder) job(o string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[o]
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// bundle is what setup returns: the runner and its collaborators.
type bundle struct {
	r     *engine.Runner
	store *persistence.Store
	clock *clock
	hooks *hookRecorder
	logs  *syncBuffer
}

// setup starts a runner on an in-memory store with fetch; cfg's zero fields
// take the defaults, its clock and hooks are set here. Cleanup closes both.
func setup(t *testing.T, fetch engine.FetchFunc, cfg engine.Config) *bundle {
	t.Helper()
	store, err := persistence.Open("")
	require.NoError(t, err)
	return setupOn(t, store, fetch, cfg)
}

func setupOn(t *testing.T, store *persistence.Store, fetch engine.FetchFunc, cfg engine.Config) *bundle {
	t.Helper()
	b := &bundle{store: store, clock: newClock(), hooks: newHookRecorder(), logs: &syncBuffer{}}
	if cfg.Now == nil {
		cfg.Now = b.clock.Now
	}
	cfg.Hooks = b.hooks.hooks()
	// Every line, Badger's debug lines too.
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
	r, err := engine.New(store, fetch, cfg, log)
	require.NoError(t, err)
	b.r = r
	t.Cleanup(func() {
		r.Close()
		require.NoError(t, store.Close())
	})
	return b
}

// targets returns n targets of a job named name: http://h/name/0 ….
func targets(name string, n int) []engine.Target {
	ts := make([]engine.Target, n)
	for i := range ts {
		ts[i] = engine.Target{URL: fmt.Sprintf("http://h/%s/%d", name, i)}
	}
	return ts
}

func caller(name string) *engine.Caller { return &engine.Caller{Name: name} }

func okFetch(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	return engine.Result{Content: "content of " + t.URL}, nil
}

// submit submits and requires success.
func (b *bundle) submit(t *testing.T, c string, ts []engine.Target) string {
	t.Helper()
	id, reused, err := b.r.Submit(context.Background(), caller(c), "", ts)
	require.NoError(t, err)
	require.False(t, reused)
	return id
}

// waitFor waits, up to waitTimeout, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitStatus waits until job id has status.
func (b *bundle) waitStatus(t *testing.T, id, status string) (engine.Job, []engine.TargetStatus) {
	t.Helper()
	var j engine.Job
	var ts []engine.TargetStatus
	waitFor(t, "job "+status, func() bool {
		var ok bool
		j, ts, ok = b.r.Status(id)
		return ok && j.Status == status
	})
	return j, ts
}

// recv receives from ch within waitTimeout.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting on a channel")
		var zero T
		return zero
	}
}
