package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestAdv37_RestartHintOfATargetInFlight: a target a worker was fetching
// when the process was killed is left pending, and after the restart its
// hint says "not run: the server restarted ... before this target
// started", which is false: it had started (its fetch may even have
// reached the site). The cancel's hints tell the two apart ("while this
// target was fetched"); the restart's claim what the store cannot know.
func TestAdv37_RestartHintOfATargetInFlight(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	started := make(chan struct{})
	release := make(chan struct{})
	first, err := engine.New(store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		close(started)
		<-release
		return engine.Result{Content: "late"}, nil
	}, engine.Config{}, nil)
	require.NoError(t, err)
	id, _, err := first.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("q", 1))
	require.NoError(t, err)
	<-started
	// The rows as a process killed now leaves them: the job running, its
	// one target in flight (pending in the store).
	// (the store's writes are asynchronous: wait for the running row).
	var (
		rec persistence.JobRecord
		ts  []persistence.TargetRecord
	)
	testkit.WaitFor(t, "the job stored running", func() bool {
		rec, ts, err = store.JobWithTargets(id)
		return err == nil && rec.Status == "running"
	})
	close(release)
	first.Close()
	require.NoError(t, store.Close())
	require.Equal(t, "running", rec.Status)

	dir2 := t.TempDir()
	crashed := enginetest.OpenStore(t, dir2)
	require.NoError(t, crashed.CreateJob(&rec, ts))
	require.NoError(t, crashed.Close())
	b := enginetest.SetupOn(t, enginetest.OpenStore(t, dir2), enginetest.OKFetch, engine.Config{})
	j, got, ok := b.Runner.Status(id)
	require.True(t, ok)
	require.Equal(t, "restart", j.Error)
	require.Equal(t, "pending", got[0].Status)
	if strings.Contains(got[0].Hint, "before this target started") {
		t.Errorf("the target in flight at the crash reads %q: it had started", got[0].Hint)
	}
}
