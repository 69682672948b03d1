package engine_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// idsOf submits n jobs of one target on b and returns their ids, each
// checked to be 32 lowercase hex digits and readable by Job.
func idsOf(t *testing.T, b *enginetest.Bundle, n int) [][]byte {
	t.Helper()
	var ids [][]byte
	seen := map[string]bool{}
	for i := range n {
		id := b.Submit(t, "alice", enginetest.Targets(fmt.Sprintf("tag%d", i), 1))
		require.Len(t, id, 32, id)
		require.Equal(t, strings.ToLower(id), id, "ids are lowercase")
		raw, err := hex.DecodeString(id)
		require.NoError(t, err, id)
		require.False(t, seen[id], "id %s given twice", id)
		seen[id] = true
		_, ok := b.Runner.Job(id)
		require.True(t, ok, "job %s not readable", id)
		ids = append(ids, raw)
	}
	return ids
}

// requireRandomFrom requires each byte of ids from position from on to
// take more than one value across them: random, not fixed (with 32 ids,
// a byte repeats by chance once in 2^248).
func requireRandomFrom(t *testing.T, ids [][]byte, from int) {
	t.Helper()
	for pos := from; pos < 16; pos++ {
		values := map[byte]bool{}
		for _, id := range ids {
			values[id[pos]] = true
		}
		require.Greater(t, len(values), 1, "byte %d of every id is %x", pos, ids[0][pos])
	}
}

// TestRunner_NodeTag: with a NodeTag, every id begins with the tag and
// stays 32 hex digits, its other 12 bytes random; without one (nil or
// empty), ids are 16 random bytes as before; a tag of another length is
// refused by New; the tag is copied.
func TestRunner_NodeTag(t *testing.T) {
	t.Parallel()
	const n = 32
	cfg := func(tag []byte) engine.Config {
		return engine.Config{NodeTag: tag, JobsPerCaller: n, JobsTotal: n}
	}

	t.Run("IdsBeginWithTheTag", func(t *testing.T) {
		t.Parallel()
		tag := []byte{0xde, 0xad, 0xbe, 0xef}
		b := enginetest.Setup(t, enginetest.OKFetch, cfg(tag))
		ids := idsOf(t, b, n)
		for _, id := range ids {
			require.Equal(t, tag, id[:engine.NodeTagLen], "id %x", id)
		}
		requireRandomFrom(t, ids, engine.NodeTagLen)
	})

	t.Run("NoTag", func(t *testing.T) {
		t.Parallel()
		for _, tag := range [][]byte{nil, {}} {
			b := enginetest.Setup(t, enginetest.OKFetch, cfg(tag))
			requireRandomFrom(t, idsOf(t, b, n), 0)
		}
	})

	t.Run("BadLength", func(t *testing.T) {
		t.Parallel()
		store := enginetest.OpenStore(t, "")
		for _, size := range []int{1, 3, 5, 16} {
			r, err := engine.New(store, enginetest.OKFetch, cfg(make([]byte, size)), nil)
			require.Error(t, err, "a %d-byte tag", size)
			require.Nil(t, r)
			require.Contains(t, err.Error(), "NodeTag")
		}
	})

	t.Run("Copied", func(t *testing.T) {
		t.Parallel()
		tag := []byte{1, 2, 3, 4}
		b := enginetest.Setup(t, enginetest.OKFetch, cfg(tag))
		tag[0], tag[3] = 0xff, 0xff // the caller's slice, changed after New
		for _, id := range idsOf(t, b, 4) {
			require.Equal(t, []byte{1, 2, 3, 4}, id[:engine.NodeTagLen], "id %x", id)
		}
	})
}

// TestRunner_NodeTags: the node tags remembered are those of the runner's
// store, past MaxNodeTags refused.
func TestRunner_NodeTags(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
	tags, err := engine.PeerOf(b.Runner).NodeTags()
	require.NoError(t, err)
	require.Empty(t, tags)
	require.NoError(t, engine.PeerOf(b.Runner).RememberNodeTag([engine.NodeTagLen]byte{1, 2, 3, 4}, "node-a"))
	tags, err = engine.PeerOf(b.Runner).NodeTags()
	require.NoError(t, err)
	require.Equal(t, map[[engine.NodeTagLen]byte]string{{1, 2, 3, 4}: "node-a"}, tags)
	stored, err := b.Store.NodeTags()
	require.NoError(t, err)
	require.Equal(t, tags, stored)
	for i := range persistence.MaxNodeTags - 1 { // one is stored already
		require.NoError(t, b.Store.PutNodeTag([4]byte{9, 9, byte(i >> 8), byte(i)}, "n"))
	}
	require.ErrorIs(t, engine.PeerOf(b.Runner).RememberNodeTag([engine.NodeTagLen]byte{5}, "one too many"), persistence.ErrTooManyNodeTags)
}
