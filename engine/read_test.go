package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestRunner_Status(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		started <- struct{}{}
		<-release
		return engine.Result{Content: "x"}, nil
	}, engine.Config{TTL: time.Hour})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	testkit.Recv(t, started)
	before, err := b.Store.Job(id)
	require.NoError(t, err)
	b.Clock.Advance(time.Minute)

	j, ts, ok := b.Runner.Status(id)
	require.True(t, ok)
	require.Equal(t, "running", j.Status)
	require.Equal(t, "alice", j.Caller)
	require.Equal(t, 2, j.TargetsTotal)
	require.Equal(t, before.Created/1e9, j.CreatedAt)
	require.Equal(t, "running", ts[0].Status)
	require.Equal(t, "pending", ts[1].Status)
	require.Equal(t, "http://h/a/1", ts[1].URL)
	after, err := b.Store.Job(id)
	require.NoError(t, err)
	require.Equal(t, before.Lease, after.Lease, "Status never writes")

	_, _, ok = b.Runner.Status("nope")
	require.False(t, ok)
	_, _, ok = b.Runner.Status(strings.Repeat("ab", 16))
	require.False(t, ok)

	close(release)
	testkit.Recv(t, started)
	b.WaitStatus(t, id, "done")
	done, err := b.Store.Job(id)
	require.NoError(t, err)
	require.Equal(t, b.Clock.Now().UnixNano(), done.Lease, "storing a target bumps the lease")

	// Touch bumps the lease to now.
	b.Clock.Advance(30 * time.Minute)
	b.Runner.Touch(id)
	touched, err := b.Store.Job(id)
	require.NoError(t, err)
	require.Equal(t, b.Clock.Now().UnixNano(), touched.Lease)
	b.Runner.Touch("unknown") // ignored

	// Past lease + TTL the job reads false, and a sweep deletes it.
	b.Clock.Advance(time.Hour)
	_, _, ok = b.Runner.Status(id)
	require.False(t, ok, "an expired job is not readable")
	b.Submit(t, "bob", enginetest.Targets("b", 1)) // Submit sweeps, after it answers
	testkit.WaitFor(t, "the sweep", func() bool {
		_, err := b.Store.Job(id)
		return errors.Is(err, persistence.ErrNotFound)
	})
	_, err = b.Store.Target(id, 0)
	require.ErrorIs(t, err, persistence.ErrNotFound, "its targets too")
}

// agree checks that Job, Targets, Status and Result say the same of id,
// a job that does not move meanwhile, and returns Status's job.
func agree(t *testing.T, r *engine.Runner, id string) engine.Job {
	t.Helper()
	j, ok := r.Job(id)
	require.True(t, ok)
	tj, tts, ok := r.Targets(id)
	require.True(t, ok)
	sj, sts, ok := r.Status(id)
	require.True(t, ok)
	require.Equal(t, sj, tj, "Targets and Status: the same summary")
	// Read again (of a live job, from what the first read kept): the same.
	tj2, tts2, ok := r.Targets(id)
	require.True(t, ok)
	require.Equal(t, tj, tj2, "Targets read twice")
	require.Equal(t, tts, tts2, "Targets read twice")
	if len(tts2) > 0 {
		tts2[0].Status = "mangled" // the caller's own copy
		_, tts3, _ := r.Targets(id)
		require.NotEqual(t, "mangled", tts3[0].Status)
	}
	require.Equal(t, len(sts), len(tts))
	done, failed := 0, 0
	for i := range sts {
		require.Equal(t, sts[i].Status, tts[i].Status, "target %d", i)
		require.Equal(t, sts[i].Error, tts[i].Error)
		require.Nil(t, tts[i].Result, "Targets reads no result")
		switch sts[i].Status {
		case "done":
			done++
			require.NotNil(t, sts[i].Result)
			res, ok := r.Result(id, i)
			require.True(t, ok)
			require.Equal(t, sts[i].Result, res)
		case "failed":
			done++
			failed++
		}
	}
	require.Equal(t, done, sj.TargetsDone, "the summary counts the targets it shows")
	require.Equal(t, failed, sj.TargetsFailed)
	// Job is read apart: read before Status it is not ahead of it, read
	// after it not behind.
	require.LessOrEqual(t, j.TargetsDone, sj.TargetsDone)
	later, ok := r.Job(id)
	require.True(t, ok)
	require.GreaterOrEqual(t, later.TargetsDone, sj.TargetsDone)
	return sj
}

// TestRunner_ReadsAgree: Job, Targets, Result and Status agree at every
// step of a job: a target in flight, a write held at the store, a write
// that failed and waits for its retry, the end.
func TestRunner_ReadsAgree(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		<-step
		if strings.HasSuffix(tg.URL, "/1") {
			return engine.Result{}, &engine.TargetError{Msg: "nope", Hint: "h"}
		}
		return engine.Result{Content: "<b>" + tg.URL + "</b>"}, nil
	}, engine.Config{RetryWait: 5 * time.Millisecond})
	id := b.Submit(t, "alice", enginetest.Targets("a", 4))
	waitRunning(t, b.Runner, id, 0)
	j := agree(t, b.Runner, id)
	require.Equal(t, "running", j.Status)

	// a0: its write held at the store: it reads running until it is stored.
	held, release := make(chan struct{}, 1), make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	b.Store.SetWriteFault(func() error {
		if holding.Load() {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	step <- struct{}{}
	testkit.Recv(t, held)
	j = agree(t, b.Runner, id)
	require.Equal(t, 0, j.TargetsDone)
	holding.Store(false)
	close(release)
	testkit.WaitFor(t, "a0 stored", func() bool { j, _ := b.Runner.Job(id); return j.TargetsDone == 1 })
	agree(t, b.Runner, id)

	// a1: its write fails and waits for a retry: it reads as the actor holds it.
	var failing atomic.Bool
	failing.Store(true)
	b.Store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.EROFS
		}
		return nil
	})
	step <- struct{}{}
	testkit.WaitFor(t, "a1 as held", func() bool { j, _ := b.Runner.Job(id); return j.TargetsDone == 2 })
	j = agree(t, b.Runner, id)
	require.Equal(t, 1, j.TargetsFailed)
	failing.Store(false)
	b.Store.SetWriteFault(nil)
	step <- struct{}{}
	step <- struct{}{}
	j = waitJob(t, b.Runner, id)
	require.Equal(t, "partial", j.Status)
	agree(t, b.Runner, id)

	raw, ok := b.Runner.ResultJSON(id, 0)
	require.True(t, ok)
	require.Contains(t, string(raw), "<b>http://h/a/0</b>", "results are stored without HTML escaping")
	_, ok = b.Runner.ResultJSON(id, 1)
	require.False(t, ok, "a failed target has no result")
	for _, idx := range []int{-1, 4, 1 << 20} {
		_, ok = b.Runner.ResultJSON(id, idx)
		require.False(t, ok)
	}
	_, ok = b.Runner.Result("nope", 0)
	require.False(t, ok)
}

func TestRunner_ReadsAgreeWhileWriteHeldOrFailing(t *testing.T) {
	t.Parallel()
	go1 := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 1 {
			<-go1
		}
		return engine.Result{Content: "<" + tg.URL + ">"}, nil
	}
	store := enginetest.OpenStore(t, "")
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	unhold := make(chan struct{})
	var unholdOnce sync.Once
	release := func() { unholdOnce.Do(func() { close(unhold) }) }
	defer release()
	var failing atomic.Bool
	store.SetWriteFault(func() error {
		if hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-unhold
		}
		if failing.Load() {
			return errors.New("disk full")
		}
		return nil
	})
	rig := enginetest.SetupOn(t, store, fetch, engine.Config{RetryWait: time.Millisecond})
	r := rig.Runner
	id, _, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("ok", 1), tgt("ok", 2)})
	require.NoError(t, err)
	waitRunning(t, r, id, 1)
	hold.Store(true)
	close(go1)
	testkit.Recv(t, held) // target 1's outcome is at the store, held
	// A write is held at the store: reads agree, target 1 reads running,
	// the progress is target 0's.
	for range 20 {
		requireReadsAgree(t, r, id)
		j, ts, ok := r.Targets(id)
		require.True(t, ok)
		require.Equal(t, engine.StatusRunning, j.Status)
		require.Equal(t, 1, j.TargetsDone)
		require.Equal(t, engine.TargetDone, ts[0].Status)
		require.Equal(t, engine.TargetRunning, ts[1].Status)
		require.Equal(t, engine.TargetPending, ts[2].Status)
		_, ok = r.ResultJSON(id, 1)
		require.False(t, ok)
	}
	// Now writes fail: the held one and the ones after it wait for retries.
	failing.Store(true)
	release()
	testkit.WaitFor(t, "target 2 fetched and its write failed, the job done as its actor holds it", func() bool {
		j, ok := r.Job(id)
		return ok && j.Status == engine.StatusDone
	})
	requireReadsAgree(t, r, id)
	j, ts, ok := r.Status(id)
	require.True(t, ok)
	require.Equal(t, 3, j.TargetsDone)
	for i := range ts {
		require.Equal(t, engine.TargetDone, ts[i].Status)
		b, ok := r.ResultJSON(id, i)
		require.True(t, ok, "result %d as its actor holds it", i)
		require.Contains(t, string(b), "<http://h/ok/")
	}
	failing.Store(false)
	waitJob(t, r, id)
	testkit.WaitFor(t, "the retry written", func() bool {
		rec, err := store.Job(id)
		return err == nil && rec.Status == engine.StatusDone && rec.Settled
	})
	requireReadsAgree(t, r, id)
	returns(t, "Close", r.Close)
	requireSettled(t, rig, id)
}

// TestRunner_TargetsNeverGoBack: readers polling a live job's Targets all
// at once, under -race (many of them from what another read of the same
// snapshot kept), see each target only move forward (pending, running,
// then done or failed) and the progress only grow, each read counting
// the targets it shows; at the end they agree with Status.
func TestRunner_TargetsNeverGoBack(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "3") {
			return engine.Result{}, &engine.TargetError{Msg: "nope"}
		}
		return engine.Result{Content: tg.URL}, nil
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 32))
	rank := map[string]int{"pending": 0, "running": 1, "done": 2, "failed": 2}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := make([]int, 32)
			lastDone := 0
			for deadline := time.Now().Add(testkit.Deadline); time.Now().Before(deadline); {
				j, ts, ok := b.Runner.Targets(id)
				if !ok || len(ts) != 32 {
					t.Errorf("read %v, %d targets", ok, len(ts))
					return
				}
				done, failed := 0, 0
				for i, tg := range ts {
					r, known := rank[tg.Status]
					if !known || r < last[i] {
						t.Errorf("target %d: %s after rank %d", i, tg.Status, last[i])
						return
					}
					last[i] = r
					if r == 2 {
						done++
					}
					if tg.Status == "failed" {
						failed++
					}
				}
				if j.TargetsDone != done || j.TargetsFailed != failed || done < lastDone {
					t.Errorf("progress %d (%d failed), the targets show %d (%d), before %d", j.TargetsDone, j.TargetsFailed, done, failed, lastDone)
					return
				}
				lastDone = done
				if !engine.IsLive(j.Status) {
					return
				}
			}
			t.Error("the job did not end")
		})
	}
	wg.Wait()
	agree(t, b.Runner, id)
}

func TestRunner_ReadersDuringJobsAndClose(t *testing.T) {
	t.Parallel()
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch kind, idx := jobOf(tg.URL); {
		case kind == "slow":
			select {
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		case idx%5 == 3:
			return engine.Result{}, &engine.TargetError{Msg: "bad <" + tg.URL + ">", Hint: "h"}
		case idx%7 == 6:
			panic(enginetest.PanicValue)
		}
		return engine.Result{Content: "<" + tg.URL + ">", Meta: map[string]any{"i": 1}}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 3, JobsTotal: 12, RetryWait: time.Millisecond, MaxBytes: 64 << 10})
	r := b.Runner
	var mu sync.Mutex
	var ids []string
	addID := func(id string) {
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
	}
	pick := func(n int) string {
		mu.Lock()
		defer mu.Unlock()
		if len(ids) == 0 {
			return ""
		}
		return ids[n%len(ids)]
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for g := range 50 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for n := g; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := pick(n)
				switch n % 9 {
				case 0:
					r.Job(id)
				case 1:
					if j, ts, ok := r.Targets(id); ok {
						if len(ts) != j.TargetsTotal {
							panic("Targets: a view with the wrong number of targets")
						}
					}
				case 2:
					r.Status(id)
				case 3:
					r.Touch(id)
				case 4:
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					r.Wait(ctx, id)
					cancel()
				case 5:
					r.ResultJSON(id, n%4-1)
				case 6:
					r.Result(id, n%4)
				case 7:
					if n%50 == 7 {
						r.Cancel(id)
					}
				case 8:
					r.HookPanics()
					_ = r.Err()
				}
				reads.Add(1)
			}
		}()
	}
	for round := range 6 {
		for c := range 4 {
			kind := "ok"
			if c%2 == 0 {
				kind = "slow"
			}
			ts := make([]engine.Target, 8)
			for i := range ts {
				ts[i] = tgt(kind, round*100+i)
			}
			id, _, err := r.Submit(context.Background(), enginetest.Caller(fmt.Sprint("c", c)), "", ts)
			if err == nil {
				addID(id)
			} else {
				require.True(t, errors.Is(err, engine.ErrCallerBusy) || errors.Is(err, engine.ErrBusy), "%v", err)
			}
		}
		mu.Lock()
		last := append([]string(nil), ids...)
		mu.Unlock()
		if len(last) > 0 {
			wctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
			_, err := r.Wait(wctx, last[len(last)-1])
			cancel()
			require.True(t, err == nil || errors.Is(err, engine.ErrNotFound), "%v", err)
		}
	}
	returns(t, "Close among readers", r.Close)
	close(stop)
	returns(t, "the readers", readers.Wait)
	require.Positive(t, reads.Load())
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if j, ok := r.Job(id); ok {
			require.False(t, engine.IsLive(j.Status))
			requireSettled(t, b, id)
		}
	}
	testkit.RequireNoneOf(t, b.Logs.String(), enginetest.PanicValue)
}

// TestRunner_Wait: Wait returns on each terminal status, for an unknown
// id, on ctx, and on Close.
func TestRunner_Wait(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/slow/") {
			select {
			case <-gate:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		}
		if strings.Contains(tg.URL, "/bad/") {
			return engine.Result{}, errors.New("nope")
		}
		return engine.Result{Content: "x"}, nil
	}, engine.Config{JobsPerCaller: 8})
	ctx := context.Background()
	wait := func(id string) (engine.Job, error) {
		wctx, cancel := context.WithTimeout(ctx, testkit.Deadline)
		defer cancel()
		return b.Runner.Wait(wctx, id)
	}
	for _, tc := range []struct{ name, status string }{{"ok", "done"}, {"bad", "failed"}} {
		j, err := wait(b.Submit(t, "alice", enginetest.Targets(tc.name, 2)))
		require.NoError(t, err)
		require.Equal(t, tc.status, j.Status)
	}
	_, err := wait("nope")
	require.ErrorIs(t, err, engine.ErrNotFound)
	_, err = wait(strings.Repeat("ab", 16))
	require.ErrorIs(t, err, engine.ErrNotFound)

	slow := b.Submit(t, "alice", enginetest.Targets("slow", 2))
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	j, err := b.Runner.Wait(short, slow)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, slow, j.ID)
	require.True(t, engine.IsLive(j.Status), "not ended early")

	cancelled := b.Submit(t, "alice", enginetest.Targets("slow", 3))
	got := make(chan error, 1)
	go func() { j, err := wait(cancelled); require.Equal(t, "cancelled", j.Status); got <- err }()
	require.True(t, b.Runner.Cancel(cancelled))
	require.NoError(t, testkit.Recv(t, got))

	go func() { j, err := wait(slow); require.Equal(t, "failed", j.Status); got <- err }()
	b.Runner.Close()
	require.ErrorIs(t, testkit.Recv(t, got), engine.ErrClosed)
	j, err = wait(slow)
	require.ErrorIs(t, err, engine.ErrClosed)
	require.Equal(t, "shutdown", j.Error)
}

func TestRunner_WaitUnknownIDsAndContext(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 8)
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if kind, _ := jobOf(tg.URL); kind == "hang" {
			started <- struct{}{}
			<-ctx.Done()
			return engine.Result{}, ctx.Err()
		}
		return engine.Result{Content: "ok"}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 4})
	r := b.Runner
	bg := context.Background()
	for _, id := range []string{"", "x", strings.Repeat("a", 32), strings.Repeat("A", 32), strings.Repeat("0", 1<<16)} {
		var err error
		returns(t, "Wait on an unknown id", func() { _, err = r.Wait(bg, id) })
		require.ErrorIs(t, err, engine.ErrNotFound)
	}
	id, _, err := r.Submit(bg, enginetest.Caller("alice"), "", []engine.Target{tgt("hang", 0)})
	require.NoError(t, err)
	testkit.Recv(t, started)

	// ctx: returns ctx.Err() with the job as it stands.
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	var j engine.Job
	returns(t, "Wait on ctx", func() { j, err = r.Wait(ctx, id) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, id, j.ID)
	require.Equal(t, engine.StatusRunning, j.Status)
	cctx, ccancel := context.WithCancel(bg)
	ccancel()
	_, err = r.Wait(cctx, id)
	require.ErrorIs(t, err, context.Canceled)

	// An uppercase spelling of a live job's id.
	uctx, ucancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer ucancel()
	returns(t, "Wait on an uppercase id", func() { _, err = r.Wait(uctx, strings.ToUpper(id)) })
	require.Error(t, err)

	returns(t, "Close", r.Close)
	j, err = r.Wait(bg, id)
	if err != nil { // the doc allows either for a job that ended
		require.ErrorIs(t, err, engine.ErrClosed)
	}
	require.Equal(t, engine.StatusFailed, j.Status) // its only target failed at the cancel
}

// TestRunner_Live: the live jobs in submit order, and none once they end.
func TestRunner_Live(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return engine.Result{Content: "x"}, nil
	}, engine.Config{JobsPerCaller: 4})
	var ids []string
	for i := range 3 {
		ids = append(ids, b.Submit(t, "alice", enginetest.Targets(string(rune('a'+i)), 1)))
		b.Clock.Advance(time.Millisecond)
	}
	live := b.Runner.Live()
	require.Len(t, live, 3)
	for i, j := range live {
		require.Equal(t, ids[i], j.ID, "submit order")
		require.True(t, engine.IsLive(j.Status))
	}
	close(gate)
	for _, id := range ids {
		waitJob(t, b.Runner, id)
	}
	require.Empty(t, b.Runner.Live())
}

func TestRunner_ResultsNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	content := `<script>alert("x&y")</script> > < & ` + "\u00e9"
	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: content, Meta: map[string]any{"<k>": "<v>&"}}, nil
	}
	rig := enginetest.Setup(t, fetch, engine.Config{})
	id := rig.Submit(t, "alice", []engine.Target{tgt("ok", 0)})
	waitJob(t, rig.Runner, id)
	check := func() {
		b, ok := rig.Runner.ResultJSON(id, 0)
		require.True(t, ok)
		require.Contains(t, string(b), `<script>`)
		require.Contains(t, string(b), `"<k>":"<v>&"`)
		require.NotContains(t, string(b), `\u003c`)
		require.NotContains(t, string(b), `\u0026`)
		b[0] = 'X' // the bytes are the caller's
		res, ok := rig.Runner.Result(id, 0)
		require.True(t, ok)
		require.Equal(t, content, res.Content)
		_, ts, ok := rig.Runner.Status(id)
		require.True(t, ok)
		require.Equal(t, res, ts[0].Result)
		b2, ok := rig.Runner.ResultJSON(id, 0)
		require.True(t, ok)
		require.Equal(t, byte('{'), b2[0])
	}
	check()
	rig.Runner.Close()
	check()
}

// TestRunner_ReadsRefuseHostileIDs: every read, Cancel, Touch and Wait
// refuse ids that are not a job's (empty, other case, too long or short,
// not hex, a swept job's) and result indexes out of range.
func TestRunner_ReadsRefuseHostileIDs(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{TTL: time.Minute})
	r := b.Runner
	id, _, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("ok", 1)})
	require.NoError(t, err)
	waitJob(t, r, id)
	hostile := []string{"", " ", "\x00", strings.ToUpper(id), id + "0", id[:31], id[:31] + "g", " " + id, id + "\n",
		strings.Repeat("f", 32), strings.Repeat("ab", 1<<20), "../" + id, "\xff\xfe", id[:16]}
	for _, h := range hostile {
		_, ok := r.Job(h)
		require.False(t, ok, "Job(%.40q)", h)
		_, _, ok = r.Targets(h)
		require.False(t, ok)
		_, _, ok = r.Status(h)
		require.False(t, ok)
		_, ok = r.Result(h, 0)
		require.False(t, ok)
		_, ok = r.ResultJSON(h, 0)
		require.False(t, ok)
		require.False(t, r.Cancel(h))
		r.Touch(h)
		_, err := r.Wait(context.Background(), h)
		require.ErrorIs(t, err, engine.ErrNotFound)
	}
	for _, idx := range []int{-1, -1 << 62, 2, 3, 1 << 16, 1<<16 + 0, 1<<31 - 1, int(^uint(0) >> 1)} {
		_, ok := r.Result(id, idx)
		require.False(t, ok, "Result idx %d", idx)
		_, ok = r.ResultJSON(id, idx)
		require.False(t, ok, "ResultJSON idx %d", idx)
	}
	// A swept id.
	b.Clock.Advance(2 * time.Minute)
	id2, _, err := r.Submit(context.Background(), enginetest.Caller("bob"), "", []engine.Target{tgt("ok", 0)}) // sweeps
	require.NoError(t, err)
	waitJob(t, r, id2)
	_, ok := r.Job(id)
	require.False(t, ok)
	r.Touch(id)
	_, ok = r.Job(id)
	require.False(t, ok)
	_, ok = r.ResultJSON(id, 0)
	require.False(t, ok)
	require.False(t, r.Cancel(id))
	_, err = r.Wait(context.Background(), id)
	require.ErrorIs(t, err, engine.ErrNotFound)
}

// A durable runner shows a status change to readers only once it is on
// stable storage (README, "Durability": "each status change before a
// reader sees it"): once the job has been created (synced), the next sync
// is held in the store's sync fault hook; meanwhile nothing since the
// creation is durable, so Runner.Job must still read the job queued.
func TestRunner_DurableJobShowsRunningOnlyOnceSynced(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync})
	entered, release := make(chan struct{}), make(chan struct{})
	var syncs atomic.Int64
	store.SetSyncFault(func() error {
		if syncs.Add(1) == 2 { // the first is the job's creation
			close(entered)
			<-release
		}
		return nil
	})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	testkit.Recv(t, entered)
	j, ok := b.Runner.Job(id)
	close(release)
	require.True(t, ok)
	require.Equal(t, engine.StatusQueued, j.Status, "the job read %s while nothing since its creation was synced", j.Status)
	b.WaitStatus(t, id, "done")
}

// TestRunner_Timings: a job's started and ended times, each target's
// fetch time (by Config.Now), stored time and options, in Status and
// Targets, while live and once ended; a cancelled job ends when it is
// cancelled; a queued job has no start yet.
func TestRunner_Timings(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock()
	gate := testkit.NewGate()
	b := enginetest.Setup(t, func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch {
		case strings.Contains(tg.URL, "/held"):
			return enginetest.GatedFetch(gate)(ctx, c, tg)
		case strings.Contains(tg.URL, "/two"):
			clk.Advance(2 * time.Second)
		case strings.Contains(tg.URL, "/three"):
			clk.Advance(3 * time.Second)
			return engine.Result{}, &engine.TargetError{Msg: "gone", Hint: "check the URL"}
		}
		return engine.Result{Content: "x"}, nil
	}, engine.Config{Now: clk.Now, Workers: 1, JobsPerCaller: 8})
	t0 := clk.Now().Unix()
	yes := true
	targets := []engine.Target{
		{URL: "https://example.com/two", Options: engine.Options{Grep: "needle", JQ: ".a"}},
		{URL: "https://example.com/three", Options: engine.Options{Mode: "m", Context: &yes}},
	}
	id := b.Submit(t, "alice", targets)
	j := waitJob(t, b.Runner, id)
	require.Equal(t, t0, j.CreatedAt)
	require.Equal(t, t0, j.StartedAt)
	require.Equal(t, t0+5, j.EndedAt)
	require.Equal(t, 5*time.Second, j.Duration, "to the clock's precision")
	for _, read := range []func(string) (engine.Job, []engine.TargetStatus, bool){b.Runner.Status, b.Runner.Targets} {
		job, ts, ok := read(id)
		require.True(t, ok)
		require.Equal(t, j, job)
		require.Equal(t, 2*time.Second, ts[0].Duration)
		require.Equal(t, 3*time.Second, ts[1].Duration)
		require.Equal(t, t0+2, ts[0].StoredAt)
		require.Equal(t, t0+5, ts[1].StoredAt)
		require.Equal(t, targets[0].Options, ts[0].Options)
		require.Equal(t, targets[1].Options, ts[1].Options)
		require.Equal(t, "check the URL", ts[1].Hint)
	}
	listed, _, err := b.Runner.ListAll(engine.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, j, listed[0], "the list has the times too")

	// Live: started, not ended; the target at the worker has no time yet.
	clk.Advance(time.Minute)
	held := b.Submit(t, "alice", enginetest.Targets("held", 2))
	job, ts := b.WaitStatus(t, held, "running")
	require.Equal(t, t0+65, job.StartedAt)
	require.Zero(t, job.EndedAt)
	require.Zero(t, job.Duration, "live")
	require.Zero(t, ts[0].Duration)
	require.Zero(t, ts[0].StoredAt)
	// Queued behind it (one worker): not started.
	queued := b.Submit(t, "bob", enginetest.Targets("held", 1))
	job, ok := b.Runner.Job(queued)
	require.True(t, ok)
	require.Equal(t, engine.StatusQueued, job.Status)
	require.Zero(t, job.StartedAt)
	clk.Advance(time.Minute)
	require.True(t, b.Runner.Cancel(queued))
	job, ok = b.Runner.Job(queued)
	require.True(t, ok)
	require.Zero(t, job.StartedAt, "never started")
	require.Equal(t, t0+125, job.EndedAt, "ended when cancelled")
	require.Zero(t, job.Duration, "never started: unknown")
	gate.Open()
	job = waitJob(t, b.Runner, held)
	require.Equal(t, t0+65, job.StartedAt)
	require.Equal(t, t0+125, job.EndedAt)
	require.Equal(t, time.Minute, job.Duration)
}

// TestRunner_TimingsOfAReapedJob: a job a previous process left running
// (its row says so) is failed by the next runner, and ends then; its
// start is kept.
func TestRunner_TimingsOfAReapedJob(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	clk := testkit.NewClock()
	at := clk.Now().Add(-time.Minute).UnixNano()
	rec := persistence.JobRecord{ID: "0123456789abcdef0123456789abcdef", Caller: "alice", Status: persistence.StatusQueued, TargetsTotal: 2, Created: at, Lease: at}
	require.NoError(t, store.CreateJob(&rec, make([]persistence.TargetRecord, 2)))
	rec.Status, rec.Started = persistence.StatusRunning, at+int64(time.Second)
	require.NoError(t, store.SaveJob(&rec))
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{Now: clk.Now})
	j, ok := b.Runner.Job(rec.ID)
	require.True(t, ok)
	require.Equal(t, engine.StatusFailed, j.Status)
	require.Equal(t, "restart", j.Error)
	require.Equal(t, (at+int64(time.Second))/1e9, j.StartedAt)
	require.Equal(t, clk.Now().Unix(), j.EndedAt)
}

// TestRunner_ReadsAStoreOfAnOlderVersion: a store written before the
// timings and the index of every job (persistence/testdata/v2store: alice's
// partial job, bob's job left running) is listed by ListAll once opened;
// its times read as unknown (0), but the end of the job the restart fails.
func TestRunner_ReadsAStoreOfAnOlderVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join("..", "persistence", "testdata", "v2store"))))
	clk := testkit.NewClock()
	clk.Set(time.Unix(100, 0))
	b := enginetest.SetupOn(t, enginetest.OpenStore(t, dir), enginetest.OKFetch, engine.Config{Now: clk.Now, TTL: time.Hour})
	jobs, next, err := b.Runner.ListAll(engine.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, jobs, 2)
	bob, alice := jobs[0], jobs[1]
	require.Equal(t, "bob", bob.Caller)
	require.Equal(t, engine.StatusFailed, bob.Status, "left running: failed by the restart")
	require.Zero(t, bob.StartedAt, "unknown")
	require.Equal(t, int64(100), bob.EndedAt, "ended by the restart")
	require.Equal(t, "alice", alice.Caller)
	require.Equal(t, engine.StatusPartial, alice.Status)
	require.Zero(t, alice.StartedAt)
	require.Zero(t, alice.EndedAt)
	_, ts, ok := b.Runner.Status(alice.ID)
	require.True(t, ok)
	for _, tg := range ts {
		require.Zero(t, tg.Duration, "unknown")
	}
	require.Equal(t, engine.Options{Mode: "m"}, ts[0].Options)
	found, err := b.Runner.FindJobs("", engine.ShortID(alice.ID), 0) // 00000000: both
	require.NoError(t, err)
	require.Equal(t, []string{bob.ID, alice.ID}, jobIDs(found))
	found, err = b.Runner.FindJobs("alice", alice.ID, 0)
	require.NoError(t, err)
	require.Equal(t, []string{alice.ID}, jobIDs(found))
}

// TestRunner_TimingsOfAnInstantFetch: a target whose fetch took no time
// by the injected clock (Config.Now did not move while it ran) has a
// stored outcome, so its time is known: Duration is 0 only when unknown,
// never for a target whose outcome is stored.
func TestRunner_TimingsOfAnInstantFetch(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock()
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: "x"}, nil
	}, engine.Config{Now: clk.Now, Workers: 1})
	id := b.Submit(t, "alice", enginetest.Targets("instant", 2))
	waitJob(t, b.Runner, id)
	_, ts, ok := b.Runner.Targets(id)
	require.True(t, ok)
	for _, tg := range ts {
		require.NotZero(t, tg.StoredAt, "target %d is stored", tg.Idx)
		require.Positive(t, tg.Duration, "target %d is stored: its fetch time is known, so not 0", tg.Idx)
	}
}

// TestRunner_TimingsWhenTheClockGoesBack: an injected clock that steps
// back while a job runs (an NTP step, a test's clock) never makes a job
// end before it started, nor a target's time negative.
func TestRunner_TimingsWhenTheClockGoesBack(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock()
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		clk.Advance(-time.Hour)
		return engine.Result{Content: "x"}, nil
	}, engine.Config{Now: clk.Now, Workers: 1})
	id := b.Submit(t, "alice", enginetest.Targets("back", 1))
	j := waitJob(t, b.Runner, id)
	_, ts, ok := b.Runner.Targets(id)
	require.True(t, ok)
	require.GreaterOrEqual(t, ts[0].Duration, time.Duration(0))
	require.NotZero(t, j.StartedAt)
	require.GreaterOrEqual(t, j.EndedAt, j.StartedAt, "a job never ends before it started")
	require.GreaterOrEqual(t, ts[0].StoredAt, j.StartedAt, "a target is never stored before its job started")
}
