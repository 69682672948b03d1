package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
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
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
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
	// alice: 7 finished jobs within one second, then a cancelled one and a
	// running one; bob: two.
	var alice []string // oldest first
	for i := range 7 {
		name := "ok" + string(rune('a'+i))
		if i%3 == 0 {
			name = "bad" + string(rune('a'+i))
		}
		id := b.Submit(t, "alice", enginetest.Targets(name, 1))
		waitJob(t, b.Runner, id)
		alice = append(alice, id)
		b.Clock.Advance(time.Millisecond)
	}
	bob1 := b.Submit(t, "bob", enginetest.Targets("okb", 1))
	waitJob(t, b.Runner, bob1)
	cancelled := b.Submit(t, "alice", enginetest.Targets("slowc", 2))
	require.True(t, b.Runner.Cancel(cancelled))
	alice = append(alice, cancelled)
	b.Clock.Advance(time.Millisecond)
	running := b.Submit(t, "alice", enginetest.Targets("slowr", 1))
	alice = append(alice, running)
	testkit.WaitFor(t, "running", func() bool { j, _ := b.Runner.Job(running); return j.Status == "running" })

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
		require.Equal(t, newestFirst(alice), idsOf(listAll(t, b.Runner, "alice", engine.ListOptions{Limit: limit})), "limit %d", limit)
	}
	first, _, err := b.Runner.List("alice", engine.ListOptions{})
	require.NoError(t, err)
	require.Len(t, first, len(alice), "default limit 20")

	for status, want := range map[string]int{"live": 1, "running": 1, "queued": 0, "terminal": 8, "done": 4, "failed": 3, "partial": 0, "cancelled": 1} {
		got := listAll(t, b.Runner, "alice", engine.ListOptions{Status: status, Limit: 2})
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
	_, aliceCursor, err := b.Runner.List("alice", engine.ListOptions{Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, aliceCursor)
	bobs := listAll(t, b.Runner, "bob", engine.ListOptions{Cursor: aliceCursor, Limit: 1})
	for _, j := range bobs {
		require.Equal(t, "bob", j.Caller)
	}
	all := listAll(t, b.Runner, "bob", engine.ListOptions{})
	require.Len(t, all, 1)
	require.Equal(t, bob1, all[0].ID)
	none, next, err := b.Runner.List("carol", engine.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, none)
	require.Empty(t, next)

	for _, opt := range []engine.ListOptions{{Status: "nope"}, {Limit: -1}, {Limit: 101}, {Cursor: "!!"}, {Cursor: "AAAA"}} {
		_, _, err := b.Runner.List("alice", opt)
		require.ErrorIs(t, err, engine.ErrBadList, "%+v", opt)
	}

	// Expired jobs never appear, swept or not; live ones always do.
	b.Clock.Advance(time.Hour + time.Second)
	left := listAll(t, b.Runner, "alice", engine.ListOptions{})
	require.Equal(t, []string{running}, idsOf(left), "only the live job outlives its TTL")
	close(gate)
}

// TestRunner_ListAt: ListAt's jobs and next cursor are List's; each job's
// cursor, given as Cursor, lists the jobs after it (the next page's cursor
// of a full page is the cursor of its last job); cursors compare in List's
// order; bad requests are refused as List refuses them.
func TestRunner_ListAt(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{JobsPerCaller: 16, JobsTotal: 16})
	var ids []string
	for i := range 9 {
		ids = append(ids, b.Submit(t, "alice", enginetest.Targets(fmt.Sprintf("listat%d", i), 1)))
		if i%3 == 2 {
			b.Clock.Advance(time.Millisecond) // three jobs a time: ties broken by id
		}
	}
	b.Submit(t, "bob", enginetest.Targets("bob", 1))
	waitJobs(t, b.Runner, ids...)

	all, _, err := b.Runner.List("alice", engine.ListOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, all, len(ids))
	want := jobIDs(all)

	for _, limit := range []int{1, 2, 4, 9, 100} {
		opt := engine.ListOptions{Limit: limit}
		for page := 0; ; page++ {
			require.Less(t, page, 20, "limit %d: the cursor never ended", limit)
			jobs, cursors, next, err := engine.PeerOf(b.Runner).ListAt("alice", opt)
			require.NoError(t, err)
			listed, listNext, err := b.Runner.List("alice", opt)
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
				after, _, err := b.Runner.List("alice", engine.ListOptions{Limit: 100, Cursor: c})
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
	jobs, cursors, _, err := engine.PeerOf(b.Runner).ListAt("alice", engine.ListOptions{Status: "done", Limit: 3})
	require.NoError(t, err)
	require.Len(t, cursors, 3)
	rest, _, err := b.Runner.List("alice", engine.ListOptions{Status: "done", Limit: 100, Cursor: cursors[2]})
	require.NoError(t, err)
	require.Equal(t, want, append(jobIDs(jobs), jobIDs(rest)...))

	// Refused as List refuses.
	for _, opt := range []engine.ListOptions{{Status: "nope"}, {Limit: -1}, {Limit: engine.MaxListLimit + 1}, {Cursor: "!"}, {Cursor: "AAAA"}} {
		_, cursors, next, err := engine.PeerOf(b.Runner).ListAt("alice", opt)
		require.ErrorIs(t, err, engine.ErrBadList, "%+v", opt)
		require.Nil(t, cursors)
		require.Empty(t, next)
		_, _, listErr := b.Runner.List("alice", opt)
		require.EqualError(t, err, listErr.Error())
	}
}

// TestCompareCursors_MergesRunners: the cursors of two runners, each on its own store,
// whose jobs were created interleaved in time (and some at the same
// instant), sort the jobs of both newest first, as CreatedAt does, ties
// by id; the cursor of any job of the merged list lists, on each runner,
// exactly that runner's jobs after it. A cursor ListAt did not give sorts
// after every good one.
func TestCompareCursors_MergesRunners(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock()
	cfg := engine.Config{Now: clk.Now, JobsPerCaller: 32, JobsTotal: 32}
	b1, b2 := enginetest.Setup(t, enginetest.OKFetch, cfg), enginetest.Setup(t, enginetest.OKFetch, cfg)
	created := map[string]int64{} // by id: when, in nanoseconds (CreatedAt is in seconds)
	for i := range 12 {
		b := []*enginetest.Bundle{b1, b2}[i%2]
		if i%4 == 3 {
			b = b1 // now and then, two in a row on one runner
		}
		now := clk.Now().UnixNano()
		id := b.Submit(t, "alice", enginetest.Targets(fmt.Sprintf("cmp%d", i), 1))
		created[id] = now
		waitJobs(t, b.Runner, id)
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
	for _, b := range []*enginetest.Bundle{b1, b2} {
		jobs, cursors, next, err := engine.PeerOf(b.Runner).ListAt("alice", engine.ListOptions{Limit: 100})
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
		for _, b := range []*enginetest.Bundle{b1, b2} {
			jobs, _, err := b.Runner.List("alice", engine.ListOptions{Limit: 100, Cursor: e.cursor})
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

// A durable runner shows a job to readers only once its creation is on
// stable storage: while the new job's sync is under way (held here in the
// store's sync fault hook), List must not return it: it is not answered
// yet, its sync may still fail (Submit then fails), and a power cut then
// loses it, so a reader would have seen a job that never was.
func TestList_DurableShowsNoJobBeforeItsSync(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync})
	entered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	store.SetSyncFault(func() error {
		if held.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	})
	submitted := make(chan string, 1)
	go func() {
		id, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a", 1))
		if err != nil {
			id = "error: " + err.Error()
		}
		submitted <- id
	}()
	testkit.Recv(t, entered)
	jobs, _, err := b.Runner.List("alice", engine.ListOptions{})
	close(release)
	id := testkit.Recv(t, submitted)
	require.NoError(t, err)
	require.Empty(t, jobs, "List showed job %s while its creation's sync was under way", id)
	b.WaitStatus(t, id, "done")
}

// pageAll pages through every caller's jobs with opt (ListAll).
func pageAll(t *testing.T, r *engine.Runner, opt engine.ListOptions) []engine.Job {
	t.Helper()
	var all []engine.Job
	for range 1000 {
		jobs, next, err := r.ListAll(opt)
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

// TestRunner_ListAll: every caller's jobs, newest first across callers
// (ties by id), a page at a time, each with its caller, every status
// filter; ListAllAt gives the same pages with cursors that page on; a
// List cursor pages on in ListAll's order; expired jobs absent, live ones
// kept; bad requests refused as List refuses them.
func TestRunner_ListAll(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
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
	}, engine.Config{JobsPerCaller: 16, JobsTotal: 32, TTL: time.Hour, Workers: 2})
	var ids []string // oldest first
	callerOf := map[string]string{}
	for i := range 12 {
		caller := []string{"alice", "bob", "carol"}[i%3]
		name := fmt.Sprintf("ok%d", i)
		if i%4 == 0 {
			name = fmt.Sprintf("bad%d", i)
		}
		id := b.Submit(t, caller, enginetest.Targets(name, 1))
		waitJob(t, b.Runner, id)
		ids, callerOf[id] = append(ids, id), caller
		if i%2 == 1 {
			b.Clock.Advance(time.Millisecond) // two jobs a time: ties broken by id
		}
	}
	running := b.Submit(t, "dave", enginetest.Targets("slowr", 1))
	ids, callerOf[running] = append(ids, running), "dave"
	testkit.WaitFor(t, "running", func() bool { j, _ := b.Runner.Job(running); return j.Status == "running" })

	all := pageAll(t, b.Runner, engine.ListOptions{Limit: 100})
	require.Len(t, all, len(ids))
	for i := 1; i < len(all); i++ {
		require.GreaterOrEqual(t, all[i-1].CreatedAt, all[i].CreatedAt, "newest first")
	}
	for _, j := range all {
		require.Equal(t, callerOf[j.ID], j.Caller, "each job with its caller")
	}
	require.Equal(t, running, all[0].ID, "the newest first")
	want := jobIDs(all)
	require.ElementsMatch(t, ids, want)
	for _, limit := range []int{1, 2, 5} {
		require.Equal(t, want, jobIDs(pageAll(t, b.Runner, engine.ListOptions{Limit: limit})), "limit %d", limit)
	}
	first, _, err := b.Runner.ListAll(engine.ListOptions{})
	require.NoError(t, err)
	require.Len(t, first, len(ids), "default limit 20")

	for status, n := range map[string]int{"live": 1, "running": 1, "queued": 0, "terminal": 12, "done": 9, "failed": 3, "cancelled": 0} {
		got := pageAll(t, b.Runner, engine.ListOptions{Status: status, Limit: 2})
		require.Len(t, got, n, status)
	}

	// ListAllAt: the same pages, and each job's cursor lists what follows.
	jobs, cursors, next, err := engine.PeerOf(b.Runner).ListAllAt(engine.ListOptions{Limit: 5})
	require.NoError(t, err)
	require.Equal(t, want[:5], jobIDs(jobs))
	require.Equal(t, cursors[4], next)
	for i, c := range cursors {
		after := pageAll(t, b.Runner, engine.ListOptions{Limit: 100, Cursor: c})
		require.Equal(t, want[i+1:], jobIDs(after))
	}
	_, _, _, err = engine.PeerOf(nil).ListAllAt(engine.ListOptions{})
	require.ErrorIs(t, err, engine.ErrInvalid)

	// A cursor of alice's list goes on after her job, in everyone's order.
	_, aliceNext, err := b.Runner.List("alice", engine.ListOptions{Limit: 1})
	require.NoError(t, err)
	newestAlice := slices.IndexFunc(all, func(j engine.Job) bool { return j.Caller == "alice" })
	require.Equal(t, want[newestAlice+1:], jobIDs(pageAll(t, b.Runner, engine.ListOptions{Limit: 100, Cursor: aliceNext})))

	for _, opt := range []engine.ListOptions{{Status: "nope"}, {Limit: -1}, {Limit: 101}, {Cursor: "!!"}, {Cursor: "AAAA"}} {
		_, _, err := b.Runner.ListAll(opt)
		require.ErrorIs(t, err, engine.ErrBadList, "%+v", opt)
	}

	// Expired jobs never appear, swept or not; the live one does.
	b.Clock.Advance(time.Hour + time.Second)
	require.Equal(t, []string{running}, jobIDs(pageAll(t, b.Runner, engine.ListOptions{})))
	n, _, err := b.Store.Sweep(b.Clock.Now().Add(-time.Hour).UnixNano(), 100)
	require.NoError(t, err)
	require.Equal(t, 12, n)
	require.Equal(t, []string{running}, jobIDs(pageAll(t, b.Runner, engine.ListOptions{})), "the sweep took their entries")
	close(gate)
}

// TestRunner_ListAllAcrossRestart: the index of every job is on disk: a
// runner on the reopened store lists the same jobs, the one left live
// failed by the restart.
func TestRunner_ListAllAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gate := testkit.NewGate()
	store := enginetest.OpenStore(t, dir)
	b := enginetest.SetupOn(t, store, func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/held") {
			return enginetest.GatedFetch(gate)(ctx, c, tg)
		}
		return enginetest.OKFetch(ctx, c, tg)
	}, engine.Config{JobsPerCaller: 8, Workers: 1})
	var ids []string
	for i := range 6 {
		id := b.Submit(t, []string{"alice", "bob"}[i%2], enginetest.Targets(fmt.Sprintf("r%d", i), 1))
		waitJob(t, b.Runner, id)
		ids = append(ids, id)
		b.Clock.Advance(time.Second)
	}
	held := b.Submit(t, "carol", enginetest.Targets("held", 1))
	testkit.WaitFor(t, "held running", func() bool { j, _ := b.Runner.Job(held); return j.Status == "running" })
	before := pageAll(t, b.Runner, engine.ListOptions{Limit: 3})
	want := []string{held}
	for i := range ids {
		want = append(want, ids[len(ids)-1-i])
	}
	require.Equal(t, want, jobIDs(before))
	defer gate.Open()
	b.Runner.Close() // the held job is failed by the shutdown
	require.NoError(t, store.Close())

	b2 := enginetest.SetupOn(t, enginetest.OpenStore(t, dir), enginetest.OKFetch, engine.Config{Now: b.Clock.Now})
	after := pageAll(t, b2.Runner, engine.ListOptions{Limit: 3})
	require.Equal(t, want, jobIDs(after))
	for _, j := range after {
		require.False(t, engine.IsLive(j.Status), "%s: %s", j.ID, j.Status)
		require.NotZero(t, j.EndedAt, "%s ended", j.ID)
	}
	require.Equal(t, engine.StatusFailed, after[0].Status)
}

// TestRunner_ListAllUnderEviction: jobs evicted past MaxBytes leave the
// list with their rows; the ones kept and the live one stay.
func TestRunner_ListAllUnderEviction(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	content := strings.Repeat("x", 1000)
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if name, _ := jobOf(tg.URL); name == "live" {
			<-gate
		}
		return engine.Result{Content: content}, nil
	}, engine.Config{MaxBytes: 3800, JobsPerCaller: 8, Workers: 2})
	defer close(gate)
	live := b.Submit(t, "alice", enginetest.Targets("live", 2))
	var ids []string
	for i := range 5 {
		id := b.Submit(t, []string{"bob", "carol"}[i%2], enginetest.Targets(fmt.Sprintf("old%d", i), 1))
		b.WaitStatus(t, id, "done")
		ids = append(ids, id)
		b.Clock.Advance(time.Second)
	}
	testkit.WaitFor(t, "eviction", func() bool { return b.Store.Bytes() <= 3800 })
	var kept []string
	for _, id := range ids {
		if _, ok := b.Runner.Job(id); ok {
			kept = append([]string{id}, kept...)
		}
	}
	require.Less(t, len(kept), len(ids), "some were evicted")
	require.Equal(t, append(kept, live), jobIDs(pageAll(t, b.Runner, engine.ListOptions{Limit: 2})))
}

// TestRunner_ListAllWhileJobsComeAndGo: readers page through every
// caller's jobs while jobs are submitted, run, and are evicted past
// MaxBytes: no page fails, and each walk goes strictly from newer to older
// (its cursors increase), so no job is listed twice in a walk.
func TestRunner_ListAllWhileJobsComeAndGo(t *testing.T) {
	t.Parallel()
	content := strings.Repeat("x", 500)
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: content}, nil
	}, engine.Config{MaxBytes: 20_000, JobsPerCaller: 64, JobsTotal: 256, Workers: 2})
	peer := engine.PeerOf(b.Runner)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := range 40 {
				caller := fmt.Sprintf("c%d", (w+i)%5)
				if _, _, err := b.Runner.Submit(context.Background(), enginetest.Caller(caller), "", enginetest.Targets(fmt.Sprintf("come%d-%d", w, i), 1+i%3)); err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				if i%7 == 0 {
					b.Clock.Advance(time.Millisecond)
				}
			}
		})
	}
	var walks atomic.Int64
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				opt := engine.ListOptions{Limit: 3, Status: []string{"", "terminal", "live"}[walks.Load()%3]}
				var last string
				seen := map[string]bool{}
				for page := 0; ; page++ {
					if page > 1000 {
						t.Error("the walk never ended")
						return
					}
					jobs, cursors, next, err := peer.ListAllAt(opt)
					if err != nil {
						t.Errorf("page %d: %v", page, err)
						return
					}
					for i, c := range cursors {
						if last != "" && engine.CompareCursors(last, c) >= 0 {
							t.Errorf("a walk went back: %q then %q", last, c)
							return
						}
						if seen[jobs[i].ID] {
							t.Errorf("job %s listed twice in a walk", jobs[i].ID)
							return
						}
						seen[jobs[i].ID], last = true, c
					}
					if next == "" {
						break
					}
					opt.Cursor = next
				}
				walks.Add(1)
			}
		})
	}
	wg.Wait()
	testkit.WaitFor(t, "every job ended", func() bool {
		live, _, err := b.Runner.ListAll(engine.ListOptions{Status: "live"})
		return err == nil && len(live) == 0
	})
	close(done)
	readers.Wait()
	require.Positive(t, walks.Load())
	// Eviction runs at or right after a target is stored (the contract's
	// rule 4): wait for the last one to have run, not only for the jobs.
	testkit.WaitFor(t, "stored bytes evicted down to MaxBytes", func() bool { return b.Store.Bytes() <= 20_000 })
	all := pageAll(t, b.Runner, engine.ListOptions{Limit: 100})
	require.Less(t, len(all), 120, "some were evicted")
	for _, j := range all {
		_, ok := b.Runner.Job(j.ID)
		require.True(t, ok, "a listed job reads")
	}
}
