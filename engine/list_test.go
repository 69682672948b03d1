package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/stretchr/testify/require"
)

// listAll pages through caller's jobs with opt, limit at a time.
func listAll(t *testing.T, r *engine.Runner, caller string, opt engine.ListOptions) []engine.Job {
	t.Helper()
	var all []engine.Job
	for range 1000 {
		jobs, next, err := r.List(caller, opt)
		require.NoError(t, err)
		require.LessOrEqual(t, len(jobs), max(opt.Limit, 1))
		all = append(all, jobs...)
		if next == "" {
			return all
		}
		opt.Cursor = next
	}
	t.Fatal("the cursor never ended")
	return nil
}

// TestRunner_List: a caller's jobs newest first, a page at a time across
// jobs created in the same second, every status filter, never another
// caller's jobs (not even through that caller's cursor), expired jobs
// absent, and bad requests refused.
func TestRunner_List(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/slow") {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		if strings.Contains(tg.URL, "/bad") {
			return engine.Result{}, errors.New("nope")
		}
		return engine.Result{Content: "x"}, nil
	}, engine.Config{JobsPerCaller: 8, TTL: time.Hour, Workers: 2})
	ctx := context.Background()
	wait := func(id string) {
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		_, err := b.r.Wait(wctx, id)
		require.NoError(t, err)
	}
	// alice: 7 finished jobs within one second, then a cancelled one and a
	// running one; bob: two.
	var alice []string // oldest first
	for i := range 7 {
		name := "ok" + string(rune('a'+i))
		if i%3 == 0 {
			name = "bad" + string(rune('a'+i))
		}
		id := b.submit(t, "alice", targets(name, 1))
		wait(id)
		alice = append(alice, id)
		b.clock.Advance(time.Millisecond)
	}
	bob1 := b.submit(t, "bob", targets("okb", 1))
	wait(bob1)
	cancelled := b.submit(t, "alice", targets("slowc", 2))
	require.True(t, b.r.Cancel(cancelled))
	alice = append(alice, cancelled)
	b.clock.Advance(time.Millisecond)
	running := b.submit(t, "alice", targets("slowr", 1))
	alice = append(alice, running)
	waitFor(t, "running", func() bool { j, _ := b.r.Job(running); return j.Status == "running" })

	newestFirst := func(ids []string) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[len(ids)-1-i] = id
		}
		return out
	}
	idsOf := func(jobs []engine.Job) []string {
		var out []string
		for _, j := range jobs {
			require.Equal(t, "alice", j.Caller)
			out = append(out, j.ID)
		}
		return out
	}
	for _, limit := range []int{1, 2, 3, 100} {
		require.Equal(t, newestFirst(alice), idsOf(listAll(t, b.r, "alice", engine.ListOptions{Limit: limit})), "limit %d", limit)
	}
	first, _, err := b.r.List("alice", engine.ListOptions{})
	require.NoError(t, err)
	require.Len(t, first, len(alice), "default limit 20")

	for status, want := range map[string]int{"live": 1, "running": 1, "queued": 0, "terminal": 8, "done": 4, "failed": 3, "partial": 0, "cancelled": 1} {
		got := listAll(t, b.r, "alice", engine.ListOptions{Status: status, Limit: 2})
		require.Len(t, got, want, status)
		for _, j := range got {
			switch status {
			case "live":
				require.True(t, engine.IsLive(j.Status))
			case "terminal":
				require.False(t, engine.IsLive(j.Status))
			default:
				require.Equal(t, status, j.Status)
			}
		}
	}

	// Isolation: bob with alice's cursor sees only his own jobs.
	_, aliceCursor, err := b.r.List("alice", engine.ListOptions{Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, aliceCursor)
	bobs := listAll(t, b.r, "bob", engine.ListOptions{Cursor: aliceCursor, Limit: 1})
	for _, j := range bobs {
		require.Equal(t, "bob", j.Caller)
	}
	all := listAll(t, b.r, "bob", engine.ListOptions{})
	require.Len(t, all, 1)
	require.Equal(t, bob1, all[0].ID)
	none, next, err := b.r.List("carol", engine.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, none)
	require.Empty(t, next)

	for _, opt := range []engine.ListOptions{{Status: "nope"}, {Limit: -1}, {Limit: 101}, {Cursor: "!!"}, {Cursor: "AAAA"}} {
		_, _, err := b.r.List("alice", opt)
		require.ErrorIs(t, err, engine.ErrBadList, "%+v", opt)
	}

	// Expired jobs never appear, swept or not; live ones always do.
	b.clock.Advance(time.Hour + time.Second)
	left := listAll(t, b.r, "alice", engine.ListOptions{})
	require.Equal(t, []string{running}, idsOf(left), "only the live job outlives its TTL")
	close(gate)
}
