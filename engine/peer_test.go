package engine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
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

// bodyAdmission is an Admission that admits every job and records the
// body each Admit is given, by job id.
type bodyAdmission struct {
	mu     sync.Mutex
	bodies map[string]string
}

func (a *bodyAdmission) Admit(_ context.Context, _, _, body, id string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bodies[id] = body
	return "", nil
}
func (a *bodyAdmission) Release(string, string)                {}
func (a *bodyAdmission) Reused(string, string, string, string) {}
func (a *bodyAdmission) Ended(string, string, string)          {}
func (a *bodyAdmission) body(id string) string                 { a.mu.Lock(); defer a.mu.Unlock(); return a.bodies[id] }

// TestPeer_TargetsHash: a submission with a key of the caller's own gives
// its Admission the hash of its targets, and Peer.TargetsHash reads the
// same hash back from the stored job (on which a cluster's grain binds the
// key); targets cut at other boundaries hash apart; a derived key gives
// no body; another caller's job or an unknown id is ErrNotFound.
func TestPeer_TargetsHash(t *testing.T) {
	adm := &bodyAdmission{bodies: map[string]string{}}
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{Admission: adm, JobsPerCaller: 8})
	p := engine.PeerOf(b.Runner)
	ctx := context.Background()
	submit := func(key string, ts ...engine.Target) string {
		t.Helper()
		id, reused, err := b.Runner.SubmitWith(ctx, enginetest.Caller("alice"), "", ts, engine.SubmitOptions{IdempotencyKey: key})
		require.NoError(t, err)
		require.False(t, reused)
		return id
	}
	ab := submit("k1", engine.Target{URL: "https://example.com/ab"}, engine.Target{URL: "https://example.com/c"})
	a := submit("k2", engine.Target{URL: "https://example.com/a"}, engine.Target{URL: "bhttps://example.com/c"})
	grep := submit("k3", engine.Target{URL: "https://example.com/ab", Options: engine.Options{Grep: "x"}}, engine.Target{URL: "https://example.com/c"})
	derived := submit("", engine.Target{URL: "https://example.com/ab"}, engine.Target{URL: "https://example.com/c"})

	hashes := map[string]bool{}
	for _, id := range []string{ab, a, grep} {
		h, err := p.TargetsHash("alice", id)
		require.NoError(t, err)
		require.Len(t, h, 64, "a hex SHA-256")
		require.Equal(t, adm.body(id), h, "job %s: the body given to Admit and the stored targets' hash", id)
		hashes[h] = true
	}
	require.Len(t, hashes, 3, "targets cut at other boundaries or with other options hash apart")
	require.Empty(t, adm.body(derived), "a derived key hashes the targets already: no body")
	h, err := p.TargetsHash("alice", derived)
	require.NoError(t, err)
	require.Equal(t, adm.body(ab), h, "the same targets, the same hash, with or without a key")

	_, err = p.TargetsHash("bob", ab)
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = p.TargetsHash("alice", "0123456789abcdef0123456789abcdef")
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = engine.PeerOf(nil).TargetsHash("alice", ab)
	require.ErrorIs(t, err, engine.ErrInvalid)
}
