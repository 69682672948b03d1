package persistence

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStore_JobTrace checks a job row's trace context: kept through a
// write, a read and a reopen; a row without one (written before it
// existed) reads as none; a row with a trace of the wrong length is
// corrupt.
func TestStore_JobTrace(t *testing.T) {
	tc := TraceContext{Flags: 1}
	for i := range tc.TraceID {
		tc.TraceID[i] = byte(i + 1)
	}
	for i := range tc.SpanID {
		tc.SpanID[i] = byte(0xa0 + i)
	}
	j := JobRecord{ID: testID(7), Caller: "c", Status: StatusQueued, TargetsTotal: 1, Created: 5, Lease: 5, Trace: tc}
	id, _ := parseID(j.ID)

	t.Run("RowRoundTrip", func(t *testing.T) {
		row := encodeJob(&j)
		require.LessOrEqual(t, len(row), jobSize(&j))
		got, err := decodeJob(id, row)
		require.NoError(t, err)
		require.Equal(t, j, got)
	})
	t.Run("OldRowReadsNone", func(t *testing.T) {
		old := j
		old.Trace = TraceContext{}
		row := encodeJob(&old) // what a runner wrote before traces: no tail
		require.Len(t, row, len(encodeJob(&j))-jobTraceLen)
		got, err := decodeJob(id, row)
		require.NoError(t, err)
		require.True(t, got.Trace.IsZero())
		require.Equal(t, old, got)
	})
	t.Run("BadTailIsCorrupt", func(t *testing.T) {
		row := encodeJob(&j)
		for _, bad := range [][]byte{row[:len(row)-1], append(row[:len(row):len(row)], 0)} {
			_, err := decodeJob(id, bad)
			require.ErrorIs(t, err, ErrCorrupt)
		}
	})
	t.Run("StoredAndReopened", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(dir)
		require.NoError(t, err)
		require.NoError(t, s.CreateJob(&j, []TargetRecord{{Idx: 0, URL: "http://a", Status: TargetPending}}))
		got, err := s.Job(j.ID)
		require.NoError(t, err)
		require.Equal(t, tc, got.Trace)
		n, err := s.CountBytes()
		require.NoError(t, err)
		require.Equal(t, n, s.Bytes(), "the trace's bytes are counted like the rest of the row")
		require.NoError(t, s.Close())
		s = mustOpen(t, dir)
		got, err = s.Job(j.ID)
		require.NoError(t, err)
		require.Equal(t, tc, got.Trace)
	})
}
