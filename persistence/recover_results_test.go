package persistence

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A result whose value-log bytes a power cut took while Badger's log kept
// its row (here: the value log cut short after a close) does not read;
// DropUnreadableResults takes its outcome row and chunks away, counts it,
// keeps the job's other outcome, and the byte total agrees with the rows.
func TestStore_DropUnreadableResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	j := putJobRecord(t, s, 1, 1, 1, false)
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`"small"`), Stored: 2}))
	require.NoError(t, s.SaveOutcome(j.ID, &TargetRecord{Idx: 1, Status: TargetDone, Result: make([]byte, 300_000), Stored: 3}))
	require.NoError(t, s.Close())
	vlogs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	require.NoError(t, err)
	require.NotEmpty(t, vlogs)
	last := vlogs[len(vlogs)-1]
	st, err := os.Stat(last)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(300_000))
	require.NoError(t, os.Truncate(last, st.Size()-100_000)) // the result's tail: gone

	s = mustOpen(t, dir)
	_, err = s.Target(j.ID, 1)
	require.Error(t, err, "the result does not read")
	n, err := s.DropUnreadableResults(j.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, s.Recovery().DroppedResults)
	one, err := s.Target(j.ID, 1)
	require.NoError(t, err, "the target reads as never stored")
	require.NotEqual(t, TargetDone, one.Status)
	require.Empty(t, one.Result)
	got, err := s.Target(j.ID, 0)
	require.NoError(t, err)
	require.Equal(t, `"small"`, string(got.Result))
	total, err := s.CountBytes()
	require.NoError(t, err)
	require.Equal(t, total, s.Bytes())
	n, err = s.DropUnreadableResults(j.ID)
	require.NoError(t, err)
	require.Zero(t, n, "nothing more to drop")
	n, err = s.DropUnreadableResults("nope")
	require.NoError(t, err)
	require.Zero(t, n)
}
