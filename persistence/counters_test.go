package persistence

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A write that fails for the disk counts in WriteErrors; an owner write
// held to be retried counts in WriteRetries, and not as an error once it
// commits; a write refused for a reason of its own (an unknown job, the
// store closed) counts in neither.
func TestStore_WriteCounters(t *testing.T) {
	s := mustOpen(t, "")
	s.SetRetryWait(time.Hour) // tried again only by AbandonRetries here
	a := putJobRecord(t, s, 1, 1, 1, false)
	require.Zero(t, s.WriteErrors())
	require.Zero(t, s.WriteRetries())

	s.SetWriteFault(func() error { return syscall.ENOSPC })
	require.ErrorIs(t, s.SaveJob(&a), syscall.ENOSPC)
	require.EqualValues(t, 1, s.WriteErrors(), "a failed write")
	require.Zero(t, s.WriteRetries())

	got := make(answers, 4)
	s.SaveOutcomeRetried(a.ID, &TargetRecord{Idx: 0, Status: TargetFailed, Error: "x", Stored: 5}, got.done("a0"))
	first := got.next(t)
	require.ErrorIs(t, first.err, ErrRetrying)
	require.EqualValues(t, 1, s.WriteRetries(), "a held write")

	s.SetWriteFault(nil)
	s.AbandonRetries() // one more try: the disk works again
	require.Equal(t, answer{"a0", nil, true}, got.next(t))
	require.EqualValues(t, 1, s.WriteErrors(), "the held write committed: no error")
	require.EqualValues(t, 1, s.WriteRetries())

	ok, err := s.Touch(testID(99), 9)
	require.False(t, ok)
	_ = err // an unknown job: not the disk's failure, whatever Touch answers
	require.EqualValues(t, 1, s.WriteErrors())
}
