package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestRunner_LiveByClass: the live jobs counted by the class they were
// submitted with, refused and reused submits not counted, none once they
// end; the classes kept stay bounded by the live jobs, not by every job
// ever submitted.
func TestRunner_LiveByClass(t *testing.T) {
	t.Parallel()
	gate := testkit.NewGate()
	b := enginetest.Setup(t, enginetest.GatedFetch(gate), engine.Config{JobsPerCaller: 1, JobsTotal: 3})
	ctx := context.Background()
	require.Empty(t, b.Runner.LiveByClass())
	var ids []string
	for _, c := range []struct{ name, class string }{{"alice", "standard"}, {"bob", "standard"}, {"carol", "admin"}} {
		id, _, err := b.Runner.Submit(ctx, enginetest.Caller(c.name), c.class, enginetest.Targets(c.name, 1))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	_, reused, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "other", enginetest.Targets("alice", 1))
	require.NoError(t, err)
	require.True(t, reused)
	_, _, err = b.Runner.Submit(ctx, enginetest.Caller("dave"), "other", enginetest.Targets("dave", 1))
	require.ErrorIs(t, err, engine.ErrBusy)
	require.Equal(t, map[string]int{"standard": 2, "admin": 1}, b.Runner.LiveByClass())

	gate.Open()
	for _, id := range ids {
		b.WaitSettled(t, id)
	}
	require.Empty(t, b.Runner.LiveByClass())
	require.Zero(t, engine.ClassEntries(b.Runner))

	for i := range 150 {
		id, _, err := b.Runner.Submit(ctx, enginetest.Caller("erin"), "standard", enginetest.Targets(fmt.Sprint("e", i), 1))
		require.NoError(t, err)
		b.WaitSettled(t, id)
	}
	require.LessOrEqual(t, engine.ClassEntries(b.Runner), 65, "kept only while live (pruned past 64)")
	require.Empty(t, b.Runner.LiveByClass())
}
