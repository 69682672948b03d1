package engine_test

// Adversarial tests that failed against the first version of the reads and
// failure handling, kept as regression tests: each names the
// rule it breaks. Helpers are in adversary_test.go.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestAdversary_TouchAfterEndKept: a finished job Touched at t stays
// readable until t + TTL, whether or not its actor has stopped yet. The
// window between a job's terminal write and its actor's stop is raced
// on purpose, several times.
func TestAdversary_TouchAfterEndKept(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	for round := range 20 {
		rig := advStart(t, okFetch, engine.Config{TTL: ttl})
		id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", round)})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
		j, err := rig.r.Wait(wctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, engine.StatusDone, j.Status)
		rig.clock.Advance(ttl / 2)
		rig.r.Touch(id)            // at t
		rig.clock.Advance(ttl - 1) // t + TTL - 1ns
		_, ok := rig.r.Job(id)
		require.True(t, ok, "round %d: readable before Close", round)
		rig.r.Close()
		_, ok = rig.r.Job(id)
		require.True(t, ok, "round %d: a job Touched at t reads gone at t+TTL-1ns (after its actor stopped)", round)
	}
}

// TestAdversary_WaitDuringCloseNotEarly: a Wait that runs while Close
// waits for a fetch in flight returns ErrClosed "with the job as it was
// left once the runner has stopped" — never a live job, and the same job
// the reads give once Close has returned (issue 9: Wait does not return
// early; SPEC rule 9: Close leaves no job live).
func TestAdversary_WaitDuringCloseNotEarly(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-ctx.Done()
		close(cancelled)
		<-release // the fetch takes a moment to return at the cancel
		return engine.Result{Content: "finished at the cancel"}, nil
	}
	rig := advStart(t, fetch, engine.Config{})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	waitFor(t, "the target in flight", func() bool {
		_, ts, ok := rig.r.Targets(id)
		return ok && ts[0].Status == engine.TargetRunning
	})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		rig.r.Close()
	}()
	recv(t, cancelled)
	// Close is under way and waits for the fetch. A Wait now may block
	// (and end on its ctx: the job as it stands, running) or return
	// ErrClosed with the job as Close leaves it: never ErrClosed with a
	// live job.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	j, err := rig.r.Wait(ctx, id)
	close(release)
	recv(t, closed)
	final, ok := rig.r.Job(id)
	require.True(t, ok)
	require.False(t, engine.IsLive(final.Status))
	if errors.Is(err, context.DeadlineExceeded) {
		return
	}
	require.ErrorIs(t, err, engine.ErrClosed)
	require.False(t, engine.IsLive(j.Status), "Wait returned ErrClosed with the job %s while Close was still waiting for its fetch; Close then left it %s", j.Status, final.Status)
	require.Equal(t, final, j)
}

// TestAdversary_TouchNeverRevives: once a job reads gone (lease + TTL <=
// now), Touch does not bring it back (issue 10 item 5; Touch's doc: "An
// unknown or expired id is ignored"). Right after Wait the job's actor
// may still run: Touch then lands in its view, unchecked.
func TestAdversary_TouchNeverRevives(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	rig := advStart(t, okFetch, engine.Config{TTL: ttl})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	_, err = rig.r.Wait(wctx, id)
	require.NoError(t, err)
	rig.clock.Advance(ttl)
	_, ok := rig.r.Job(id)
	require.False(t, ok, "lease + TTL <= now: gone")
	rig.r.Touch(id)
	_, ok = rig.r.Job(id)
	require.False(t, ok, "Touch brought back an expired job")
	_, _, ok = rig.r.Status(id)
	require.False(t, ok)
	_, err = rig.r.Wait(wctx, id)
	require.ErrorIs(t, err, engine.ErrNotFound)
	// Reused? An expired job never is.
	id2, reused, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, id, id2)
	rig.r.Close()
	rig.r.Touch(id)
	_, ok = rig.r.Job(id)
	require.False(t, ok)
}

// TestAdversary_TouchNeverRevivesUnsaved: the same, deterministic: a job
// whose terminal write failed keeps its view (its actor holds the truth);
// once it reads gone, Touch must not bring it back.
func TestAdversary_TouchNeverRevivesUnsaved(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-release
		return engine.Result{Content: "ok"}, nil
	}
	rig := advStart(t, fetch, engine.Config{TTL: ttl, RetryWait: time.Hour})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	waitFor(t, "the target in flight", func() bool {
		_, ts, ok := rig.r.Targets(id)
		return ok && ts[0].Status == engine.TargetRunning
	})
	rig.store.SetWriteFault(func() error { return errors.New("disk full") })
	close(release)
	wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	j, err := rig.r.Wait(wctx, id)
	require.NoError(t, err)
	require.Equal(t, engine.StatusDone, j.Status, "as its actor holds it")
	rig.clock.Advance(ttl)
	_, ok := rig.r.Job(id)
	require.False(t, ok, "lease + TTL <= now: gone")
	rig.r.Touch(id)
	_, ok = rig.r.Job(id)
	require.False(t, ok, "Touch brought back an expired job")
	rig.store.SetWriteFault(nil)
}

// TestAdversary_LargeResultStored: issue 9 item 5: the in-memory store
// takes results up to 16 MiB, as the directory store does. A 2 MiB and a
// 15 MiB result must be stored done and read back byte for byte.
func TestAdversary_LargeResultStored(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"memory", "dir"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := ""
			if mode == "dir" {
				dir = t.TempDir()
			}
			store, err := persistence.Open(dir)
			require.NoError(t, err)
			sizes := []int{2 << 20, 15 << 20}
			fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
				_, idx := jobOf(tg.URL)
				return engine.Result{Content: strings.Repeat("<", sizes[idx])}, nil
			}
			rig := advStartOn(t, store, fetch, engine.Config{MaxBytes: 1 << 30})
			id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("big", 0), tgt("big", 1)})
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
			defer cancel()
			j, err := rig.r.Wait(wctx, id)
			require.NoError(t, err)
			_, ts, _ := rig.r.Targets(id)
			require.Equal(t, engine.StatusDone, j.Status, "targets: %+v / %+v", ts[0].Error, ts[1].Error)
			for i, n := range sizes {
				b, ok := rig.r.ResultJSON(id, i)
				require.True(t, ok)
				require.Equal(t, `{"content":"`+strings.Repeat("<", n)+`"}`, string(b))
			}
		})
	}
}

// TestAdversary_BlockingHookShutdownBounded: a hook that blocks:
// Shutdown(ctx) still returns once ctx is done (issue 10: "Close is
// bounded"; Shutdown's doc: it gives up when ctx is done). The Hooks doc
// asks hooks not to block and promises every hook has run once Shutdown
// returns: the two cannot both hold for a hook that never returns, and
// today Shutdown waits for it unbounded.
func TestAdversary_BlockingHookShutdownBounded(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(block) }) }
	defer unblock()
	blocked := make(chan struct{}, 1)
	rig := advStart(t, okFetch, engine.Config{Hooks: engine.Hooks{Job: func(o string) {
		if o == "done" {
			select {
			case blocked <- struct{}{}:
			default:
			}
			<-block
		}
	}}})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	recv(t, blocked)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	within(t, advDeadline, "Shutdown with a hook that blocks", func() { _ = rig.r.Shutdown(ctx) })
	t.Logf("Shutdown returned after %v", time.Since(start))
	unblock()
	requireSettled(t, rig, id)
}
