package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunner_Smoke(t *testing.T) {
	b := setup(t, okFetch, engineConfig())
	id := b.submit(t, "alice", targets("a", 3))
	j, ts := b.waitStatus(t, id, "done")
	require.Equal(t, 3, j.TargetsDone)
	require.Len(t, ts, 3)
	require.Equal(t, "content of http://h/a/2", ts[2].Result.Content)
}
