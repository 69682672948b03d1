package engine_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestRunner_CloseStartsNoTarget is the regression test for a flake of
// TestRunner_LogsCarryNoURL: Close cancelled the fetches' context before it
// told the supervisor to stop, so a fetch that returned at the cancel could
// have its job's next target dispatched, and fetched under a cancelled
// context, before the drain began; the job then ran to its end instead of
// failing with "shutdown". Close now stops the dispatching first. The
// window is narrow: the test closes many runners.
func TestRunner_CloseStartsNoTarget(t *testing.T) {
	t.Parallel()
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	var late atomic.Int32
	for range rounds {
		store, err := persistence.Open("")
		require.NoError(t, err)
		started := make(chan struct{})
		r, err := engine.New(store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
			if _, idx := jobOf(tg.URL); idx > 0 {
				late.Add(1)
				return engine.Result{Content: "late"}, nil
			}
			close(started)
			<-ctx.Done()
			return engine.Result{}, ctx.Err()
		}, engine.Config{}, nil)
		require.NoError(t, err)
		id, _, err := r.Submit(context.Background(), caller("alice"), "", targets("a", 2))
		require.NoError(t, err)
		recv(t, started)
		r.Close()
		j, ts, ok := r.Status(id)
		require.True(t, ok)
		require.Equal(t, "failed", j.Status)
		require.Equal(t, "shutdown", j.Error)
		require.Equal(t, "failed", ts[0].Status, "the target in flight is stored")
		require.Equal(t, "pending", ts[1].Status, "no target starts after Close")
		require.NoError(t, store.Close())
	}
	require.Zero(t, late.Load(), "targets fetched after Close")
}
