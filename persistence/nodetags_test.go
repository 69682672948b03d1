package persistence

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStore_NodeTags: the tags put are read back, across a reopen of the
// directory; a tag put again is one key; a new name replaces the old.
func TestStore_NodeTags(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	tags, err := s.NodeTags()
	require.NoError(t, err)
	require.Empty(t, tags)
	a, b := [4]byte{1, 2, 3, 4}, [4]byte{0xff, 0, 0, 1}
	require.NoError(t, s.PutNodeTag(a, "node-a"))
	require.NoError(t, s.PutNodeTag(a, "node-a"))
	require.NoError(t, s.PutNodeTag(b, "node-b"))
	require.NoError(t, s.PutNodeTag(b, "node-b2"))
	require.NoError(t, s.Close())

	s = mustOpen(t, dir)
	tags, err = s.NodeTags()
	require.NoError(t, err)
	require.Equal(t, map[[4]byte]string{a: "node-a", b: "node-b2"}, tags)
	require.Equal(t, 2, keysByPrefix(t, s)[prefixNode])
}

// TestStore_NodeTagsBounded: past MaxNodeTags a new tag is refused (a
// known one is still renamed); a name past MaxNodeNameLen is refused.
func TestStore_NodeTagsBounded(t *testing.T) {
	s := mustOpen(t, "")
	var tag [4]byte
	for i := range MaxNodeTags {
		binary.BigEndian.PutUint32(tag[:], uint32(i))
		require.NoError(t, s.PutNodeTag(tag, "n"))
	}
	binary.BigEndian.PutUint32(tag[:], MaxNodeTags)
	require.ErrorIs(t, s.PutNodeTag(tag, "one too many"), ErrTooManyNodeTags)
	binary.BigEndian.PutUint32(tag[:], 7)
	require.NoError(t, s.PutNodeTag(tag, "renamed"))
	require.ErrorIs(t, s.PutNodeTag([4]byte{9, 9, 9, 9}, strings.Repeat("x", MaxNodeNameLen+1)), ErrTooLarge)
	tags, err := s.NodeTags()
	require.NoError(t, err)
	require.Len(t, tags, MaxNodeTags)
	require.Equal(t, "renamed", tags[tag])
}

// TestStore_NodeTagsReadOnlyAndClosed: a read-only store reads the tags
// and refuses to write one; a closed store does neither.
func TestStore_NodeTagsReadOnlyAndClosed(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.PutNodeTag([4]byte{1}, "a"))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.PutNodeTag([4]byte{2}, "b"), ErrClosed)
	_, err = s.NodeTags()
	require.ErrorIs(t, err, ErrClosed)

	ro, err := OpenReadOnly(dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, ro.Close()) }()
	tags, err := ro.NodeTags()
	require.NoError(t, err)
	require.Equal(t, map[[4]byte]string{{1}: "a"}, tags)
	require.ErrorIs(t, ro.PutNodeTag([4]byte{2}, "b"), ErrReadOnly)
}
