package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/stretchr/testify/require"
)

// agree checks that Job, Targets and Status say the same of id.
func agree(t *testing.T, r *engine.Runner, id string) engine.Job {
	t.Helper()
	j, ok := r.Job(id)
	require.True(t, ok)
	tj, tts, ok := r.Targets(id)
	require.True(t, ok)
	sj, sts, ok := r.Status(id)
	require.True(t, ok)
	require.Equal(t, sj, tj, "Targets and Status: the same summary")
	// Read again (of a live job, from what the first read kept): the same.
	tj2, tts2, ok := r.Targets(id)
	require.True(t, ok)
	require.Equal(t, tj, tj2, "Targets read twice")
	require.Equal(t, tts, tts2, "Targets read twice")
	if len(tts2) > 0 {
		tts2[0].Status = "mangled" // the caller's own copy
		_, tts3, _ := r.Targets(id)
		require.NotEqual(t, "mangled", tts3[0].Status)
	}
	require.Equal(t, len(sts), len(tts))
	done, failed := 0, 0
	for i := range sts {
		require.Equal(t, sts[i].Status, tts[i].Status, "target %d", i)
		require.Equal(t, sts[i].Error, tts[i].Error)
		require.Nil(t, tts[i].Result, "Targets reads no result")
		switch sts[i].Status {
		case "done":
			done++
			require.NotNil(t, sts[i].Result)
			res, ok := r.Result(id, i)
			require.True(t, ok)
			require.Equal(t, sts[i].Result, res)
		case "failed":
			done++
			failed++
		}
	}
	require.Equal(t, done, sj.TargetsDone, "the summary counts the targets it shows")
	require.Equal(t, failed, sj.TargetsFailed)
	// Job is read apart: it may only be ahead of what Status saw.
	require.GreaterOrEqual(t, j.TargetsDone, 0)
	return sj
}

// TestRunner_ReadsAgree: Job, Targets, Result and Status agree at every
// step of a job: a target in flight, a write held at the store, a write
// that failed and waits for its retry, the end.
func TestRunner_ReadsAgree(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-step
		if strings.HasSuffix(tg.URL, "/1") {
			return engine.Result{}, &engine.TargetError{Msg: "nope", Hint: "h"}
		}
		return engine.Result{Content: "<b>" + tg.URL + "</b>"}, nil
	}, engine.Config{RetryWait: 5 * time.Millisecond})
	id := b.submit(t, "alice", targets("a", 4))
	waitFor(t, "a0 running", func() bool { _, ts, _ := b.r.Targets(id); return ts[0].Status == "running" })
	j := agree(t, b.r, id)
	require.Equal(t, "running", j.Status)

	// a0: its write held at the store: it reads running until it is stored.
	held, release := make(chan struct{}, 1), make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	b.store.SetWriteFault(func() error {
		if holding.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	step <- struct{}{}
	recv(t, held)
	j = agree(t, b.r, id)
	require.Equal(t, 0, j.TargetsDone)
	holding.Store(false)
	close(release)
	waitFor(t, "a0 stored", func() bool { j, _ := b.r.Job(id); return j.TargetsDone == 1 })
	agree(t, b.r, id)

	// a1: its write fails and waits for a retry: it reads as the actor holds it.
	var failing atomic.Bool
	failing.Store(true)
	b.store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.EROFS
		}
		return nil
	})
	step <- struct{}{}
	waitFor(t, "a1 as held", func() bool { j, _ := b.r.Job(id); return j.TargetsDone == 2 })
	j = agree(t, b.r, id)
	require.Equal(t, 1, j.TargetsFailed)
	failing.Store(false)
	b.store.SetWriteFault(nil)
	step <- struct{}{}
	step <- struct{}{}
	wctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	j, err := b.r.Wait(wctx, id)
	require.NoError(t, err)
	require.Equal(t, "partial", j.Status)
	agree(t, b.r, id)

	raw, ok := b.r.ResultJSON(id, 0)
	require.True(t, ok)
	require.Contains(t, string(raw), "<b>http://h/a/0</b>", "results are stored without HTML escaping")
	_, ok = b.r.ResultJSON(id, 1)
	require.False(t, ok, "a failed target has no result")
	for _, idx := range []int{-1, 4, 1 << 20} {
		_, ok = b.r.ResultJSON(id, idx)
		require.False(t, ok)
	}
	_, ok = b.r.Result("nope", 0)
	require.False(t, ok)
}

// TestRunner_TargetsNeverGoBack: readers polling a live job's Targets all
// at once, under -race (many of them from what another read of the same
// snapshot kept), see each target only move forward (pending, running,
// then done or failed) and the progress only grow, each read counting
// the targets it shows; at the end they agree with Status.
func TestRunner_TargetsNeverGoBack(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "3") {
			return engine.Result{}, &engine.TargetError{Msg: "nope"}
		}
		return engine.Result{Content: tg.URL}, nil
	}, engine.Config{})
	id := b.submit(t, "alice", targets("a", 32))
	rank := map[string]int{"pending": 0, "running": 1, "done": 2, "failed": 2}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := make([]int, 32)
			lastDone := 0
			for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); {
				j, ts, ok := b.r.Targets(id)
				if !ok || len(ts) != 32 {
					t.Errorf("read %v, %d targets", ok, len(ts))
					return
				}
				done, failed := 0, 0
				for i, tg := range ts {
					r, known := rank[tg.Status]
					if !known || r < last[i] {
						t.Errorf("target %d: %s after rank %d", i, tg.Status, last[i])
						return
					}
					last[i] = r
					if r == 2 {
						done++
					}
					if tg.Status == "failed" {
						failed++
					}
				}
				if j.TargetsDone != done || j.TargetsFailed != failed || done < lastDone {
					t.Errorf("progress %d (%d failed), the targets show %d (%d), before %d", j.TargetsDone, j.TargetsFailed, done, failed, lastDone)
					return
				}
				lastDone = done
				if !engine.IsLive(j.Status) {
					return
				}
			}
			t.Error("the job did not end")
		})
	}
	wg.Wait()
	agree(t, b.r, id)
}

// TestRunner_Wait: Wait returns on each terminal status, for an unknown
// id, on ctx, and on Close.
func TestRunner_Wait(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/slow/") {
			select {
			case <-gate:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		}
		if strings.Contains(tg.URL, "/bad/") {
			return engine.Result{}, errors.New("nope")
		}
		return engine.Result{Content: "x"}, nil
	}, engine.Config{JobsPerCaller: 8})
	ctx := context.Background()
	wait := func(id string) (engine.Job, error) {
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		return b.r.Wait(wctx, id)
	}
	for _, tc := range []struct{ name, status string }{{"ok", "done"}, {"bad", "failed"}} {
		j, err := wait(b.submit(t, "alice", targets(tc.name, 2)))
		require.NoError(t, err)
		require.Equal(t, tc.status, j.Status)
	}
	_, err := wait("nope")
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = wait(strings.Repeat("ab", 16))
	require.ErrorIs(t, err, engine.ErrNotFound)

	slow := b.submit(t, "alice", targets("slow", 2))
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	j, err := b.r.Wait(short, slow)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, slow, j.ID)
	require.True(t, engine.IsLive(j.Status), "not ended early")

	cancelled := b.submit(t, "alice", targets("slow", 3))
	got := make(chan error, 1)
	go func() { j, err := wait(cancelled); require.Equal(t, "cancelled", j.Status); got <- err }()
	require.True(t, b.r.Cancel(cancelled))
	require.NoError(t, recv(t, got))

	go func() { j, err := wait(slow); require.Equal(t, "failed", j.Status); got <- err }()
	b.r.Close()
	require.ErrorIs(t, recv(t, got), engine.ErrClosed)
	j, err = wait(slow)
	require.ErrorIs(t, err, engine.ErrClosed)
	require.Equal(t, "shutdown", j.Error)
}

// TestRunner_TouchCoalesced: a finished job's stored lease is written at
// most once a second, never earlier than the latest Touch, so a polled job
// never expires early; an expired job is not brought back.
func TestRunner_TouchCoalesced(t *testing.T) {
	t.Parallel()
	b := setup(t, okFetch, engine.Config{TTL: time.Hour})
	id := b.submit(t, "alice", targets("a", 1))
	b.waitStatus(t, id, "done")
	waitFor(t, "settled", func() bool { rec, err := b.store.Job(id); return err == nil && rec.Settled })
	b.clock.Advance(1500 * time.Millisecond)
	b.r.Touch(id)
	rec, err := b.store.Row(id)
	require.NoError(t, err)
	first := rec.Lease
	require.GreaterOrEqual(t, first, b.clock.Now().UnixNano(), "never earlier than the Touch")
	require.Less(t, first, b.clock.Now().Add(time.Second).UnixNano())
	for range 5 { // within the same second: no write
		b.clock.Advance(100 * time.Millisecond)
		b.r.Touch(id)
		rec, err = b.store.Row(id)
		require.NoError(t, err)
		require.Equal(t, first, rec.Lease)
	}
	touched := b.clock.Now()
	b.clock.Advance(time.Hour - time.Nanosecond)
	_, ok := b.r.Job(id)
	require.True(t, ok, "readable until its last Touch + TTL")
	b.clock.Advance(time.Second)
	_, ok = b.r.Job(id)
	require.False(t, ok, "expired")
	b.r.Touch(id)
	_, ok = b.r.Job(id)
	require.False(t, ok, "Touch does not bring back an expired job")
	rec, err = b.store.Row(id)
	require.NoError(t, err)
	require.Equal(t, first, rec.Lease)
	require.Less(t, touched.UnixNano(), b.clock.Now().UnixNano())
}

// TestRunner_Live: the live jobs in submit order, and none once they end.
func TestRunner_Live(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return engine.Result{Content: "x"}, nil
	}, engine.Config{JobsPerCaller: 4})
	var ids []string
	for i := range 3 {
		ids = append(ids, b.submit(t, "alice", targets(string(rune('a'+i)), 1)))
		b.clock.Advance(time.Millisecond)
	}
	live := b.r.Live()
	require.Len(t, live, 3)
	for i, j := range live {
		require.Equal(t, ids[i], j.ID, "submit order")
		require.True(t, engine.IsLive(j.Status))
	}
	close(gate)
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		_, err := b.r.Wait(wctx, id)
		cancel()
		require.NoError(t, err)
	}
	require.Empty(t, b.r.Live())
}
