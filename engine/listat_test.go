package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/stretchr/testify/require"
)

// waitAll waits until each of ids has ended on b.
func (b *bundle) waitAll(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		_, err := b.r.Wait(ctx, id)
		cancel()
		require.NoError(t, err)
	}
}

// jobIDs returns the ids of jobs, in order.
func jobIDs(jobs []engine.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestRunner_ListAt: ListAt's jobs and next cursor are List's; each job's
// cursor, given as Cursor, lists the jobs after it (the next page's cursor
// of a full page is the cursor of its last job); cursors compare in List's
// order; bad requests are refused as List refuses them.
func TestRunner_ListAt(t *testing.T) {
	t.Parallel()
	b := setup(t, okFetch, engine.Config{JobsPerCaller: 16, JobsTotal: 16})
	var ids []string
	for i := range 9 {
		ids = append(ids, b.submit(t, "alice", targets(fmt.Sprintf("listat%d", i), 1)))
		if i%3 == 2 {
			b.clock.Advance(time.Millisecond) // three jobs a time: ties broken by id
		}
	}
	b.submit(t, "bob", targets("bob", 1))
	b.waitAll(t, ids...)

	all, _, err := b.r.List("alice", engine.ListOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, all, len(ids))
	want := jobIDs(all)

	for _, limit := range []int{1, 2, 4, 9, 100} {
		opt := engine.ListOptions{Limit: limit}
		for page := 0; ; page++ {
			require.Less(t, page, 20, "limit %d: the cursor never ended", limit)
			jobs, cursors, next, err := engine.PeerOf(b.r).ListAt("alice", opt)
			require.NoError(t, err)
			listed, listNext, err := b.r.List("alice", opt)
			require.NoError(t, err)
			require.Equal(t, listed, jobs, "limit %d page %d: ListAt's jobs are List's", limit, page)
			require.Equal(t, listNext, next, "limit %d page %d: ListAt's next is List's", limit, page)
			require.Len(t, cursors, len(jobs))
			if next != "" {
				require.Equal(t, cursors[len(cursors)-1], next, "a full page goes on after its last job")
			}
			for i, c := range cursors {
				if i > 0 {
					require.Negative(t, engine.CompareCursors(cursors[i-1], c), "cursors in List's order")
					require.Positive(t, engine.CompareCursors(c, cursors[i-1]))
				}
				require.Zero(t, engine.CompareCursors(c, c))
				at := slices.Index(want, jobs[i].ID)
				after, _, err := b.r.List("alice", engine.ListOptions{Limit: 100, Cursor: c})
				require.NoError(t, err)
				require.Equal(t, want[at+1:], jobIDs(after), "the cursor of job %d lists from job %d on", at, at+1)
			}
			if next == "" {
				break
			}
			opt.Cursor = next
		}
	}

	// A status filter: the cursors page through the jobs it keeps.
	jobs, cursors, _, err := engine.PeerOf(b.r).ListAt("alice", engine.ListOptions{Status: "done", Limit: 3})
	require.NoError(t, err)
	require.Len(t, cursors, 3)
	rest, _, err := b.r.List("alice", engine.ListOptions{Status: "done", Limit: 100, Cursor: cursors[2]})
	require.NoError(t, err)
	require.Equal(t, want, append(jobIDs(jobs), jobIDs(rest)...))

	// Refused as List refuses.
	for _, opt := range []engine.ListOptions{{Status: "nope"}, {Limit: -1}, {Limit: engine.MaxListLimit + 1}, {Cursor: "!"}, {Cursor: "AAAA"}} {
		_, cursors, next, err := engine.PeerOf(b.r).ListAt("alice", opt)
		require.ErrorIs(t, err, engine.ErrBadList, "%+v", opt)
		require.Nil(t, cursors)
		require.Empty(t, next)
		_, _, listErr := b.r.List("alice", opt)
		require.EqualError(t, err, listErr.Error())
	}
}

// TestCompareCursors: the cursors of two runners, each on its own store,
// whose jobs were created interleaved in time (and some at the same
// instant), sort the jobs of both newest first, as CreatedAt does, ties
// by id; the cursor of any job of the merged list lists, on each runner,
// exactly that runner's jobs after it. A cursor ListAt did not give sorts
// after every good one.
func TestCompareCursors(t *testing.T) {
	t.Parallel()
	clk := newClock()
	cfg := engine.Config{Now: clk.Now, JobsPerCaller: 32, JobsTotal: 32}
	b1, b2 := setup(t, okFetch, cfg), setup(t, okFetch, cfg)
	created := map[string]int64{} // by id: when, in nanoseconds (CreatedAt is in seconds)
	for i := range 12 {
		b := []*bundle{b1, b2}[i%2]
		if i%4 == 3 {
			b = b1 // now and then, two in a row on one runner
		}
		now := clk.Now().UnixNano()
		id := b.submit(t, "alice", targets(fmt.Sprintf("cmp%d", i), 1))
		created[id] = now
		b.waitAll(t, id)
		switch i % 3 {
		case 0:
			clk.Advance(time.Second)
		case 2:
			clk.Advance(time.Millisecond) // the same CreatedAt, a later instant
		} // else the next job is created at the same instant, on the other runner or this one
	}
	type entry struct {
		job    engine.Job
		cursor string
	}
	var merged []entry
	for _, b := range []*bundle{b1, b2} {
		jobs, cursors, next, err := engine.PeerOf(b.r).ListAt("alice", engine.ListOptions{Limit: 100})
		require.NoError(t, err)
		require.Empty(t, next)
		require.NotEmpty(t, jobs)
		for i := range jobs {
			merged = append(merged, entry{jobs[i], cursors[i]})
		}
	}
	require.Len(t, merged, 12)
	slices.SortFunc(merged, func(a, b entry) int { return engine.CompareCursors(a.cursor, b.cursor) })
	sameInstant := 0
	for i := 1; i < len(merged); i++ {
		prev, cur := merged[i-1].job, merged[i].job
		require.GreaterOrEqual(t, prev.CreatedAt, cur.CreatedAt, "newest first")
		require.GreaterOrEqual(t, created[prev.ID], created[cur.ID], "newest first, to the nanosecond")
		if created[prev.ID] == created[cur.ID] {
			sameInstant++
			require.Greater(t, prev.ID, cur.ID, "ties by id, descending")
		}
	}
	require.Positive(t, sameInstant, "some jobs were created at the same instant")

	// Any job's cursor pages on, on both runners, after that job.
	for i, e := range merged {
		var after []string
		for _, b := range []*bundle{b1, b2} {
			jobs, _, err := b.r.List("alice", engine.ListOptions{Limit: 100, Cursor: e.cursor})
			require.NoError(t, err)
			after = append(after, jobIDs(jobs)...)
		}
		var want []string
		for _, later := range merged[i+1:] {
			want = append(want, later.job.ID)
		}
		slices.Sort(after)
		slices.Sort(want)
		require.Equal(t, want, after, "after job %d of the merged list", i)
	}

	// Garbage sorts last: not base64, base64 of the wrong length, empty.
	good := merged[len(merged)-1].cursor // the oldest job's
	for _, bad := range []string{"!!", "not a cursor", "AAAA", "_____w", ""} {
		require.Positive(t, engine.CompareCursors(bad, good), "%q before a good cursor", bad)
		require.Negative(t, engine.CompareCursors(good, bad), "%q before a good cursor", bad)
	}
	require.Zero(t, engine.CompareCursors("!!", "!!"))
	require.Equal(t, -engine.CompareCursors("!!", "AAAA"), engine.CompareCursors("AAAA", "!!"), "garbage compares consistently")
}
