package engine_test

import (
	"context"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestRunner_NodeTags: the node tags remembered are those of the runner's
// store, past MaxNodeTags refused.
func TestRunner_NodeTags(t *testing.T) {
	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, nil
	}
	b := setup(t, fetch, engine.Config{})
	tags, err := engine.PeerOf(b.r).NodeTags()
	require.NoError(t, err)
	require.Empty(t, tags)
	require.NoError(t, engine.PeerOf(b.r).RememberNodeTag([engine.NodeTagLen]byte{1, 2, 3, 4}, "node-a"))
	tags, err = engine.PeerOf(b.r).NodeTags()
	require.NoError(t, err)
	require.Equal(t, map[[engine.NodeTagLen]byte]string{{1, 2, 3, 4}: "node-a"}, tags)
	stored, err := b.store.NodeTags()
	require.NoError(t, err)
	require.Equal(t, tags, stored)
	for i := range persistence.MaxNodeTags - 1 { // one is stored already
		require.NoError(t, b.store.PutNodeTag([4]byte{9, 9, byte(i >> 8), byte(i)}, "n"))
	}
	require.ErrorIs(t, engine.PeerOf(b.r).RememberNodeTag([engine.NodeTagLen]byte{5}, "one too many"), persistence.ErrTooManyNodeTags)
}
