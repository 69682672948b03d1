package engine_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// idsOf submits n jobs of one target on b and returns their ids, each
// checked to be 32 lowercase hex digits and readable by Job.
func idsOf(t *testing.T, b *bundle, n int) [][]byte {
	t.Helper()
	var ids [][]byte
	seen := map[string]bool{}
	for i := range n {
		id := b.submit(t, "alice", targets(fmt.Sprintf("tag%d", i), 1))
		require.Len(t, id, 32, id)
		require.Equal(t, strings.ToLower(id), id, "ids are lowercase")
		raw, err := hex.DecodeString(id)
		require.NoError(t, err, id)
		require.False(t, seen[id], "id %s given twice", id)
		seen[id] = true
		_, ok := b.r.Job(id)
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
		b := setup(t, okFetch, cfg(tag))
		ids := idsOf(t, b, n)
		for _, id := range ids {
			require.Equal(t, tag, id[:engine.NodeTagLen], "id %x", id)
		}
		requireRandomFrom(t, ids, engine.NodeTagLen)
	})

	t.Run("NoTag", func(t *testing.T) {
		t.Parallel()
		for _, tag := range [][]byte{nil, {}} {
			b := setup(t, okFetch, cfg(tag))
			requireRandomFrom(t, idsOf(t, b, n), 0)
		}
	})

	t.Run("BadLength", func(t *testing.T) {
		t.Parallel()
		for _, size := range []int{1, 3, 5, 16} {
			store, err := persistence.Open("")
			require.NoError(t, err)
			r, err := engine.New(store, okFetch, cfg(make([]byte, size)), nil)
			require.Error(t, err, "a %d-byte tag", size)
			require.Nil(t, r)
			require.Contains(t, err.Error(), "NodeTag")
			require.NoError(t, store.Close())
		}
	})

	t.Run("Copied", func(t *testing.T) {
		t.Parallel()
		tag := []byte{1, 2, 3, 4}
		b := setup(t, okFetch, cfg(tag))
		tag[0], tag[3] = 0xff, 0xff // the caller's slice, changed after New
		for _, id := range idsOf(t, b, 4) {
			require.Equal(t, []byte{1, 2, 3, 4}, id[:engine.NodeTagLen], "id %x", id)
		}
	})
}
