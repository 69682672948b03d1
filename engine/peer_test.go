package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sift/batch/engine"
)

// TestPeer_NoRunner: a Peer of no runner reads and writes nothing, and says
// so, instead of panicking.
func TestPeer_NoRunner(t *testing.T) {
	p := engine.PeerOf(nil)
	_, err := p.NodeTags()
	require.ErrorIs(t, err, engine.ErrInvalid)
	require.ErrorIs(t, p.RememberNodeTag([engine.NodeTagLen]byte{1}, "n"), engine.ErrInvalid)
	_, _, _, err = p.ListAt("alice", engine.ListOptions{})
	require.ErrorIs(t, err, engine.ErrInvalid)
	_, err = p.Admitted("alice")
	require.ErrorIs(t, err, engine.ErrInvalid)
	require.False(t, p.Reusable("alice", "00", "0123456789abcdef0123456789abcdef"))
	var zero engine.Peer
	_, err = zero.NodeTags()
	require.ErrorIs(t, err, engine.ErrInvalid)
}
