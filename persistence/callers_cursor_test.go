package persistence

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCallerCursor: a job's cursor is CallerCursorLen bytes, and pages on
// after that job in CallerJobs, in any store that holds the caller's jobs;
// cursors sort as bytes in CallerJobs's order (newest first, ties by id,
// descending), across stores; an id that is not 32 lowercase hex digits
// is an error wrapping ErrBadCursor.
func TestCallerCursor(t *testing.T) {
	s1, s2 := mustOpen(t, ""), mustOpen(t, "")
	type entry struct {
		job    JobRecord
		cursor []byte
	}
	var all []entry
	for n := range 12 {
		s := []*Store{s1, s2}[n%2]
		created := int64(100 + n/3) // three jobs an instant, across both stores
		j := callerJob(t, s, n, "alice", created, n%2 == 0)
		callerJob(t, s, 1000+n, "bob", created, false)
		c, err := CallerCursor(j.Created, j.ID)
		require.NoError(t, err)
		require.Len(t, c, CallerCursorLen)
		all = append(all, entry{j, c})
	}
	slices.SortFunc(all, func(a, b entry) int { return bytes.Compare(a.cursor, b.cursor) })
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1].job, all[i].job
		require.True(t, prev.Created > cur.Created || prev.Created == cur.Created && prev.ID > cur.ID,
			"%s (%d) sorts before %s (%d)", prev.ID, prev.Created, cur.ID, cur.Created)
	}

	// Each store's CallerJobs, after a job's cursor, lists its jobs after
	// that one; the first page's cursors are the cursors of its jobs.
	for i, e := range all {
		var got []string
		for _, s := range []*Store{s1, s2} {
			jobs, next, err := s.CallerJobs("alice", e.cursor, 100, nil)
			require.NoError(t, err)
			require.Nil(t, next)
			for _, j := range jobs {
				got = append(got, j.ID)
			}
		}
		var want []string
		for _, later := range all[i+1:] {
			want = append(want, later.job.ID)
		}
		slices.Sort(got)
		slices.Sort(want)
		require.Equal(t, want, got, "after job %d", i)
	}
	jobs, next, err := s1.CallerJobs("alice", nil, 2, nil)
	require.NoError(t, err)
	last, err := CallerCursor(jobs[1].Created, jobs[1].ID)
	require.NoError(t, err)
	require.Equal(t, last, next, "a page's next is the cursor of its last job")

	for _, id := range []string{"", "xyz", testID(1)[:31], testID(1) + "0", strings.ToUpper(testID(0xabcdef)),
		"0000000000000000000000000000000g", "000000000000000000000000000000 1", strings.Repeat("é", 16)} {
		c, err := CallerCursor(1, id)
		require.ErrorIs(t, err, ErrBadCursor, "id %q", id)
		require.Nil(t, c)
	}
}
