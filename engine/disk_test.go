package engine_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// stepFetch is a FetchFunc that returns one target per receive on step, and a
// channel that Hooks.Target signals after each store attempt.
type stepper struct {
	step   chan struct{}
	stored chan error
}

func newStepper() *stepper {
	return &stepper{step: make(chan struct{}), stored: make(chan error, 64)}
}

func (s *stepper) fetch(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
	select {
	case <-s.step:
	case <-ctx.Done():
		return engine.Result{}, ctx.Err()
	}
	return engine.Result{Content: "content of " + tg.URL}, nil
}

// one lets one fetch return and waits until its outcome was stored (or the
// store failed).
func (s *stepper) one(t *testing.T) {
	t.Helper()
	select {
	case s.step <- struct{}{}:
	case <-time.After(waitTimeout):
		t.Fatal("no fetch was waiting")
	}
	recv(t, s.stored)
}

// setupDisk starts a runner on a directory store with a stepper, its log
// kept for inspection and scanned for secrets.
func setupDisk(t *testing.T, cfg engine.Config) (*bundle, *stepper, *logScanner) {
	t.Helper()
	store, err := persistence.Open(t.TempDir())
	require.NoError(t, err)
	st := newStepper()
	b := &bundle{store: store, clock: newClock(), hooks: newHookRecorder()}
	log := (&logScanner{}).keepLines()
	cfg.Now = b.clock.Now
	hooks := b.hooks.hooks()
	target := hooks.Target
	hooks.Target = func(err error, d time.Duration, n int) {
		target(err, d, n)
		st.stored <- err
	}
	cfg.Hooks = hooks
	r, err := engine.New(store, st.fetch, cfg, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.NoError(t, err)
	b.r = r
	t.Cleanup(func() {
		r.Close()
		require.NoError(t, store.Close())
		log.check(t)
	})
	return b, st, log
}

// TestRunner_WriteFault injects failing writes at the persistence boundary
// while jobs run: the runner logs Warn with the job id, keeps answering
// Status, never panics, and recovers once writes work again.
func TestRunner_WriteFault(t *testing.T) {
	t.Parallel()
	b, st, log := setupDisk(t, engine.Config{JobsPerCaller: 4})
	var failing atomic.Bool
	b.store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.ENOSPC
		}
		return nil
	})
	ctx := context.Background()

	a := b.submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}, {URL: secretURL("a", 2)}})
	st.one(t) // a0 stored
	failing.Store(true)
	st.one(t) // a1: its store fails
	require.Contains(t, log.String(), "job_id="+a)
	j, ts, ok := b.r.Status(a)
	require.True(t, ok, "Status keeps answering")
	require.Equal(t, "running", j.Status)
	require.Equal(t, "done", ts[0].Status)

	_, _, err := b.r.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.ErrorIs(t, err, syscall.ENOSPC, "a Submit that cannot be stored fails")
	b.r.Touch(a)

	failing.Store(false)
	st.one(t) // a2 stored: writes work again
	j, ts = b.waitStatus(t, a, "done")
	require.Equal(t, 3, j.TargetsDone)
	for i, tg := range ts {
		require.Equal(t, "done", tg.Status, "target %d: an outcome whose write failed is written once writes work", i)
		require.Equal(t, "content of "+secretURL("a", i), tg.Result.Content)
	}
	waitSettled(t, b.store, a, "done")

	// New jobs run as before.
	c := b.submit(t, "carol", []engine.Target{{URL: secretURL("c", 0)}})
	st.one(t)
	_, ts = b.waitStatus(t, c, "done")
	require.Equal(t, "content of "+secretURL("c", 0), ts[0].Result.Content)
	require.Contains(t, log.String(), "level=WARN")
}

// waitSettled waits until the store holds job id settled with status.
func waitSettled(t *testing.T, store *persistence.Store, id, status string) {
	t.Helper()
	waitFor(t, "job "+id+" stored "+status+" and settled", func() bool {
		j, err := store.Job(id)
		return err == nil && j.Status == status && j.Settled
	})
	left, err := store.Unsettled()
	require.NoError(t, err)
	for _, j := range left {
		require.NotEqual(t, id, j.ID)
	}
}

// TestRunner_WriteFaultAtTheEnd is the regression test for a job whose last
// writes failed: its actor was stopped all the same, and the store kept the
// job running and unsettled for good (read as running by Status, never
// swept) until a restart reaped it. The job's actor now keeps what it could
// not write and writes it once writes work again.
func TestRunner_WriteFaultAtTheEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status string
		run    func(t *testing.T, b *bundle, st *stepper, id string)
	}{
		{"LastTarget", "done", func(t *testing.T, b *bundle, st *stepper, id string) {
			st.one(t)
		}},
		{"Cancel", "cancelled", func(t *testing.T, b *bundle, st *stepper, id string) {
			require.True(t, b.r.Cancel(id))
			st.one(t) // the target in flight is stored after the cancel
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, st, log := setupDisk(t, engine.Config{RetryWait: 5 * time.Millisecond})
			var failing atomic.Bool
			b.store.SetWriteFault(func() error {
				if failing.Load() {
					return syscall.EROFS
				}
				return nil
			})
			id := b.submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
			if tc.status == "done" {
				st.one(t)
			}
			waitFor(t, "a target in flight", func() bool {
				_, ts, _ := b.r.Status(id)
				return ts[len(ts)-1].Status == "running" || ts[0].Status == "running"
			})
			failing.Store(true)
			tc.run(t, b, st, id)
			require.Contains(t, log.String(), "job_id="+id)
			j, _, ok := b.r.Status(id)
			require.True(t, ok)
			require.Equal(t, tc.status, j.Status, "Status answers with the job's truth")

			failing.Store(false)
			waitSettled(t, b.store, id, tc.status)
			j, ts, ok := b.r.Status(id)
			require.True(t, ok)
			require.Equal(t, tc.status, j.Status)
			if tc.status == "done" {
				require.Equal(t, "done", ts[1].Status)
				require.Equal(t, "content of "+secretURL("a", 1), ts[1].Result.Content)
			} else {
				require.Equal(t, "done", ts[0].Status, "the target in flight at the cancel")
				require.Equal(t, 1, j.TargetsDone)
			}
			// The job settled: the caps are free, and it is swept in time.
			b.clock.Advance(engine.DefaultTTL + time.Second)
			c := b.submit(t, "alice", []engine.Target{{URL: secretURL("c", 0)}})
			_, _, ok = b.r.Status(id)
			require.False(t, ok, "swept")
			st.one(t)
			b.waitStatus(t, c, "done")
		})
	}
}
