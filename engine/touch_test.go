package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

func TestRunner_TouchLiveJob(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		started <- struct{}{}
		<-release
		return engine.Result{}, nil
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	testkit.Recv(t, started)
	b.Clock.Advance(time.Minute)
	before, err := b.Store.Job(id)
	require.NoError(t, err)
	b.Runner.Touch(id)
	touched := b.Clock.Now().UnixNano()
	rec, err := b.Store.Job(id)
	require.NoError(t, err)
	require.Equal(t, before.Lease, rec.Lease, "a live job's actor holds the touch: no store write")
	require.True(t, b.Runner.Cancel(id)) // the actor writes its row again, with the touch
	close(release)
	testkit.WaitFor(t, "settled", func() bool {
		rec, err = b.Store.Job(id)
		return err == nil && rec.Settled
	})
	require.Equal(t, touched, rec.Lease, "no later write of the job's own loses the touch")
}

// TestRunner_TouchCoalesced: a finished job's stored lease is written at
// most once a second, never earlier than the latest Touch, so a polled job
// never expires early; an expired job is not brought back.
func TestRunner_TouchCoalesced(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{TTL: time.Hour})
	id := b.Submit(t, "alice", enginetest.Targets("a", 1))
	b.WaitStatus(t, id, "done")
	testkit.WaitFor(t, "settled", func() bool { rec, err := b.Store.Job(id); return err == nil && rec.Settled })
	b.Clock.Advance(1500 * time.Millisecond)
	b.Runner.Touch(id)
	rec, err := b.Store.Row(id)
	require.NoError(t, err)
	first := rec.Lease
	require.GreaterOrEqual(t, first, b.Clock.Now().UnixNano(), "never earlier than the Touch")
	require.Less(t, first, b.Clock.Now().Add(time.Second).UnixNano())
	for range 5 { // within the same second: no write
		b.Clock.Advance(100 * time.Millisecond)
		b.Runner.Touch(id)
		rec, err = b.Store.Row(id)
		require.NoError(t, err)
		require.Equal(t, first, rec.Lease)
	}
	touched := b.Clock.Now()
	b.Clock.Advance(time.Hour - time.Nanosecond)
	_, ok := b.Runner.Job(id)
	require.True(t, ok, "readable until its last Touch + TTL")
	b.Clock.Advance(time.Second)
	_, ok = b.Runner.Job(id)
	require.False(t, ok, "expired")
	b.Runner.Touch(id)
	_, ok = b.Runner.Job(id)
	require.False(t, ok, "Touch does not bring back an expired job")
	rec, err = b.Store.Row(id)
	require.NoError(t, err)
	require.Equal(t, first, rec.Lease)
	require.Less(t, touched.UnixNano(), b.Clock.Now().UnixNano())
}

// TestRunner_TouchedJobNeverExpiresEarly polls a settled job with Touch at
// odd sub-second instants: after each Touch at t it must read at
// t + TTL - 1ns, whatever the coalescing, for TTLs on both sides of 2s.
func TestRunner_TouchedJobNeverExpiresEarly(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, 2*time.Second - 1, 2 * time.Second, 2*time.Second + 1, 3 * time.Second, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{TTL: ttl})
			id := b.Submit(t, "alice", []engine.Target{tgt("ok", 0)})
			waitJob(t, b.Runner, id)
			// The actor gone: the store's path, where Touch coalesces. (A
			// finished job whose actor still runs: see
			// TestRunner_TouchAfterEndKeepsJob.)
			returns(t, "Close", b.Runner.Close)
			steps := []time.Duration{1, 999 * time.Millisecond, 1, 123456789, time.Second, 500 * time.Millisecond, 1, 999999999, 7, ttl / 3, ttl / 2}
			for i, d := range steps {
				b.Clock.Advance(min(d, ttl-1))
				b.Runner.Touch(id)
				b.Runner.Touch(id)
				b.Clock.Advance(ttl - 1)
				_, ok := b.Runner.Job(id)
				require.True(t, ok, "step %d: Touched at t, gone at t+TTL-1ns", i)
				_, _, ok = b.Runner.Targets(id)
				require.True(t, ok, "step %d: Targets", i)
				b.Clock.Advance(-(ttl - 1))
			}
		})
	}
}

// TestRunner_TouchAfterEndKeepsJob: a finished job Touched at t stays
// readable until t + TTL, whether or not its actor has stopped yet. The
// window between a job's terminal write and its actor's stop is raced
// on purpose, several times.
func TestRunner_TouchAfterEndKeepsJob(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { // one store at a time
			b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{TTL: ttl})
			id := b.Submit(t, "alice", []engine.Target{tgt("ok", round)})
			j := waitJob(t, b.Runner, id)
			require.Equal(t, engine.StatusDone, j.Status)
			b.Clock.Advance(ttl / 2)
			b.Runner.Touch(id)       // at t
			b.Clock.Advance(ttl - 1) // t + TTL - 1ns
			_, ok := b.Runner.Job(id)
			require.True(t, ok, "readable before Close")
			b.Runner.Close()
			_, ok = b.Runner.Job(id)
			require.True(t, ok, "a job Touched at t reads gone at t+TTL-1ns (after its actor stopped)")
		})
	}
}

// TestRunner_TouchNeverRevivesExpired: once a job reads gone (lease + TTL <=
// now), Touch does not bring it back (Touch's doc: "An unknown or expired
// id is ignored"). Right after Wait the job's actor
// may still run: Touch then lands in its view, unchecked.
func TestRunner_TouchNeverRevivesExpired(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{TTL: ttl})
	id := b.Submit(t, "alice", []engine.Target{tgt("ok", 0)})
	waitJob(t, b.Runner, id)
	b.Clock.Advance(ttl)
	_, ok := b.Runner.Job(id)
	require.False(t, ok, "lease + TTL <= now: gone")
	b.Runner.Touch(id)
	_, ok = b.Runner.Job(id)
	require.False(t, ok, "Touch brought back an expired job")
	_, _, ok = b.Runner.Status(id)
	require.False(t, ok)
	_, err := b.Runner.Wait(context.Background(), id)
	require.ErrorIs(t, err, engine.ErrNotFound)
	// Reused? An expired job never is.
	id2, reused, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, id, id2)
	b.Runner.Close()
	b.Runner.Touch(id)
	_, ok = b.Runner.Job(id)
	require.False(t, ok)
}

// TestRunner_TouchNeverRevivesExpiredUnsaved: the same, deterministic: a job
// whose terminal write failed keeps its view (its actor holds the truth);
// once it reads gone, Touch must not bring it back.
func TestRunner_TouchNeverRevivesExpiredUnsaved(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-release
		return engine.Result{Content: "ok"}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{TTL: ttl, RetryWait: time.Hour})
	id := b.Submit(t, "alice", []engine.Target{tgt("ok", 0)})
	waitRunning(t, b.Runner, id, 0)
	b.Store.SetWriteFault(func() error { return errors.New("disk full") })
	close(release)
	j := waitJob(t, b.Runner, id)
	require.Equal(t, engine.StatusDone, j.Status, "as its actor holds it")
	b.Clock.Advance(ttl)
	_, ok := b.Runner.Job(id)
	require.False(t, ok, "lease + TTL <= now: gone")
	b.Runner.Touch(id)
	_, ok = b.Runner.Job(id)
	require.False(t, ok, "Touch brought back an expired job")
	b.Store.SetWriteFault(nil)
}
