package enginetest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// Bundle is a runner under test with what it was built with (River's
// testBundle): its store, its fake clock, its captured logs and its
// recorded hooks. Make one with [Setup] or [SetupOn].
type Bundle struct {
	// Runner is the runner under test; it is closed when the test ends.
	Runner *engine.Runner
	// Store is the runner's store.
	Store *persistence.Store
	// Clock is the runner's Config.Now, unless the test set its own.
	Clock *testkit.Clock
	// Logs holds every line the runner logged, Badger's debug lines too,
	// as slog's text format.
	Logs *testkit.SyncBuffer
	// Hooks records every hook call; the test's own hooks, if any, are
	// called after it.
	Hooks *HookRecorder
	// Log is the logger the runner logs to (into Logs).
	Log *slog.Logger
}

// Setup starts a runner with fetch and cfg on a new in-memory store; both
// are closed when the test ends (runner first). cfg's zero fields take the
// engine's defaults but two: Now is the bundle's [testkit.Clock] unless
// cfg sets it, and Hooks are the bundle's [HookRecorder], which calls
// cfg's hooks, if any, after recording.
func Setup(t testing.TB, fetch engine.FetchFunc, cfg engine.Config) *Bundle {
	t.Helper()
	return SetupOn(t, OpenStore(t, ""), fetch, cfg)
}

// SetupOn is [Setup] on a store the test opened (on disk, with a write
// fault, or reopened after a first runner). When the test ends the runner
// is closed, then the store (a store already closed, or closed again by
// [OpenStore]'s cleanup, is fine: Close is idempotent).
func SetupOn(t testing.TB, store *persistence.Store, fetch engine.FetchFunc, cfg engine.Config) *Bundle {
	t.Helper()
	b := &Bundle{Store: store, Clock: testkit.NewClock(), Logs: &testkit.SyncBuffer{}, Hooks: NewHookRecorder()}
	if cfg.Now == nil {
		cfg.Now = b.Clock.Now
	}
	cfg.Hooks = b.Hooks.chain(cfg.Hooks)
	b.Log = slog.New(slog.NewTextHandler(b.Logs, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
	r, err := engine.New(store, fetch, cfg, b.Log)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	b.Runner = r
	t.Cleanup(func() {
		r.Close()
		if err := store.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return b
}

// Submit submits targets for the caller named caller (no class) and fails
// the test unless a new job was created; it returns the job's id.
func (b *Bundle) Submit(t testing.TB, caller string, ts []engine.Target) string {
	t.Helper()
	id, reused, err := b.Runner.Submit(context.Background(), Caller(caller), "", ts)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	if reused {
		t.Fatalf("submit reused job %s, want a new job", id)
	}
	return id
}

// WaitStatus waits until job id reads status, failing the test after
// [testkit.Deadline]; it returns the job and its targets as last read.
func (b *Bundle) WaitStatus(t testing.TB, id, status string) (engine.Job, []engine.TargetStatus) {
	t.Helper()
	var j engine.Job
	var ts []engine.TargetStatus
	testkit.WaitFor(t, "job "+id+" "+status, func() bool {
		var ok bool
		j, ts, ok = b.Runner.Status(id)
		return ok && j.Status == status
	})
	return j, ts
}

// WaitSettled waits until job id reads a terminal status (not live: done,
// partial, failed or cancelled), failing the test after
// [testkit.Deadline]; it returns the job as last read.
func (b *Bundle) WaitSettled(t testing.TB, id string) engine.Job {
	t.Helper()
	var j engine.Job
	testkit.WaitFor(t, "job "+id+" to settle", func() bool {
		var ok bool
		j, ok = b.Runner.Job(id)
		return ok && !engine.IsLive(j.Status)
	})
	return j
}
