package engine_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestRunner_Submit(t *testing.T) {
	t.Parallel()

	t.Run("StoresJobBeforeReturning", func(t *testing.T) {
		t.Parallel()
		gate := make(chan struct{})
		b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
			<-gate
			return engine.Result{Content: t.URL}, nil
		}, engine.Config{})
		defer close(gate)
		id := b.Submit(t, "alice", enginetest.Targets("a", 3))
		require.Len(t, id, 32)
		rec, ts, err := b.Store.JobWithTargets(id)
		require.NoError(t, err)
		require.Equal(t, "alice", rec.Caller)
		require.Len(t, ts, 3)
		for _, tr := range ts {
			require.Equal(t, persistence.TargetPending, tr.Status)
		}
		testkit.WaitFor(t, "the created hook", func() bool { return b.Hooks.Job("created") == 1 }) // hooks run in their own actor
		require.Equal(t, 1, b.Hooks.Job("created"))
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{TargetsPerJob: 2})
		ctx := context.Background()
		_, _, err := b.Runner.Submit(ctx, nil, "", enginetest.Targets("a", 1))
		require.ErrorIs(t, err, engine.ErrInvalid)
		_, _, err = b.Runner.Submit(ctx, enginetest.Caller(""), "", enginetest.Targets("a", 1))
		require.ErrorIs(t, err, engine.ErrInvalid)
		_, _, err = b.Runner.Submit(ctx, enginetest.Caller("alice"), "", []engine.Target{{URL: "http://h/a/0"}, {URL: ""}})
		require.ErrorIs(t, err, engine.ErrInvalid)
		_, _, err = b.Runner.Submit(ctx, enginetest.Caller("alice"), "", nil)
		require.ErrorIs(t, err, engine.ErrNoTargets)
		_, _, err = b.Runner.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 3))
		require.ErrorIs(t, err, engine.ErrTooManyTargets)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _, err = b.Runner.Submit(cctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 1))
		require.ErrorIs(t, err, context.Canceled)

		b.Runner.Close()
		_, _, err = b.Runner.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 1))
		require.ErrorIs(t, err, engine.ErrClosed)
		// Invalid input is still reported as invalid after Close.
		_, _, err = b.Runner.Submit(ctx, nil, "", enginetest.Targets("a", 1))
		require.ErrorIs(t, err, engine.ErrInvalid)
	})

	t.Run("Caps", func(t *testing.T) {
		t.Parallel()
		gate := make(chan struct{})
		b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			<-gate
			return engine.Result{}, nil
		}, engine.Config{JobsPerCaller: 1, JobsTotal: 2})
		defer close(gate)
		b.Submit(t, "alice", enginetest.Targets("a", 1))
		_, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a2", 1))
		require.ErrorIs(t, err, engine.ErrCallerBusy)
		b.Submit(t, "bob", enginetest.Targets("b", 1))
		_, _, err = b.Runner.Submit(context.Background(), enginetest.Caller("carol"), "", enginetest.Targets("c", 1))
		require.ErrorIs(t, err, engine.ErrBusy)
		_, _, err = b.Runner.Submit(context.Background(), enginetest.Caller("carol"), "", enginetest.Targets("c", 1))
		require.ErrorIs(t, err, engine.ErrBusy)
		_, _, err = b.Runner.Submit(context.Background(), enginetest.Caller("carol"), "", make([]engine.Target, 0))
		require.ErrorIs(t, err, engine.ErrNoTargets)
		require.Equal(t, engine.Refusals{CallerBusy: 1, Busy: 2}, b.Runner.Refusals(), "each cap's refusals, nothing else")
	})

	t.Run("ConcurrentSubmitsNeverPassACap", func(t *testing.T) {
		t.Parallel()
		gate := make(chan struct{})
		b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			<-gate
			return engine.Result{}, nil
		}, engine.Config{JobsPerCaller: 2, JobsTotal: 5, Workers: 2})
		defer close(gate)
		var accepted sync.Map // caller → count
		var total atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				name := fmt.Sprintf("caller-%d", i%4)
				_, _, err := b.Runner.Submit(context.Background(), enginetest.Caller(name), "", enginetest.Targets(fmt.Sprintf("j%d", i), 2))
				if err == nil {
					total.Add(1)
					n, _ := accepted.LoadOrStore(name, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
					return
				}
				if !errors.Is(err, engine.ErrBusy) && !errors.Is(err, engine.ErrCallerBusy) {
					t.Errorf("submit: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, int32(5), total.Load(), "exactly JobsTotal jobs are accepted")
		accepted.Range(func(k, v any) bool {
			require.LessOrEqual(t, v.(*atomic.Int32).Load(), int32(2), "caller %s", k)
			return true
		})
		require.LessOrEqual(t, b.Hooks.MaxDepth(), 5)
	})
}

// TestRunner_SubmitInvalidUTF8: a target whose URL or an option is not
// valid UTF-8 is invalid. Targets are stored and keyed by their JSON, and
// encoding/json writes every invalid UTF-8 byte as U+FFFD: such a target
// would be stored altered, and two different submissions ("http://h/\xff"
// and "http://h/\xfe") would share an idempotency key. Valid UTF-8 that JSON
// escapes is kept exactly.
func TestRunner_SubmitInvalidUTF8(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{JobsPerCaller: 8})
	ctx := context.Background()
	for _, tg := range []engine.Target{
		{URL: "http://h/\xff"},
		{URL: "http://h/ok", Options: engine.Options{Mode: "\xfe"}},
		{URL: "http://h/ok", Options: engine.Options{Question: "a\xc3"}},
		{URL: "http://h/ok", Options: engine.Options{Pages: "\xed\xa0\x80"}}, // a surrogate
		{URL: "http://h/ok", Options: engine.Options{Grep: "\x80"}},
		{URL: "http://h/ok", Options: engine.Options{JQ: "\xc0\xaf"}}, // overlong
	} {
		_, _, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "", []engine.Target{{URL: "http://h/first"}, tg})
		require.ErrorIs(t, err, engine.ErrInvalid, "%+q", tg)
	}
	require.Zero(t, b.Hooks.Job("created"))

	// Valid UTF-8 that JSON escapes is kept exactly, and keys apart.
	a := b.Submit(t, "alice", []engine.Target{{URL: "http://h/\u2028<>&", Options: engine.Options{Mode: "ü\u0000"}}})
	c := b.Submit(t, "alice", []engine.Target{{URL: "http://h/\u2029<>&", Options: engine.Options{Mode: "ü\u0000"}}})
	require.NotEqual(t, a, c)
	_, ts, ok := b.Runner.Status(a)
	require.True(t, ok)
	require.Equal(t, "http://h/\u2028<>&", ts[0].URL)
}

// TestRunner_JobIDs submits many jobs and checks their ids: 32 lowercase hex
// characters (128 bits), all different, and every one of the 128 bits set in
// about half of them (a counter or a clock in the id would show as bits
// that hardly change).
func TestRunner_JobIDs(t *testing.T) {
	t.Parallel()
	const n = 4000
	// No bundle: 4,000 jobs' log lines and hook calls would only cost time.
	r, err := engine.New(enginetest.OpenStore(t, ""), enginetest.OKFetch, engine.Config{JobsPerCaller: n, JobsTotal: n}, nil)
	require.NoError(t, err)
	t.Cleanup(r.Close) // before the store's cleanup
	seen := make(map[string]bool, n)
	var ones [128]int
	for i := range n {
		id, reused, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets(fmt.Sprintf("j%d", i), 1))
		require.NoError(t, err)
		require.False(t, reused)
		require.Regexp(t, `^[0-9a-f]{32}$`, id)
		require.False(t, seen[id], "id %s handed out twice", id)
		seen[id] = true
		raw, err := hex.DecodeString(id)
		require.NoError(t, err)
		for bit := range 128 {
			if raw[bit/8]&(1<<(bit%8)) != 0 {
				ones[bit]++
			}
		}
	}
	// Binomial(4000, 1/2): a standard deviation of ~32; 45%–55% is ±6σ.
	for bit, c := range ones {
		require.InDelta(t, n/2, c, n*0.05, "bit %d is set in %d of %d ids", bit, c, n)
	}
}

func TestRunner_Idempotency(t *testing.T) {
	t.Parallel()
	var fetches atomic.Int32
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		fetches.Add(1)
		if name, _ := jobOf(tg.URL); name == "bad" {
			return engine.Result{}, errors.New("nope")
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{TTL: time.Hour, JobsPerCaller: 8})
	ctx := context.Background()

	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	b.WaitStatus(t, id, "done")
	n := fetches.Load()

	again, reused, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.True(t, reused)
	require.Equal(t, id, again)
	testkit.WaitFor(t, "the reused hook", func() bool { return b.Hooks.Job("reused") == 1 })
	require.Equal(t, 1, b.Hooks.Job("reused"))

	other, reused, err := b.Runner.Submit(ctx, enginetest.Caller("bob"), "", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused, "another caller gets a new job")
	require.NotEqual(t, id, other)

	diff, reused, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 3))
	require.NoError(t, err)
	require.False(t, reused, "other targets make a new job")
	require.NotEqual(t, id, diff)
	b.WaitStatus(t, other, "done")
	b.WaitStatus(t, diff, "done")
	require.Equal(t, n+2+3, fetches.Load(), "nothing was fetched twice for the reused job")

	// Options count: the same URL with other options is another job.
	yes := true
	withOpts := enginetest.Targets("a", 2)
	withOpts[0].Options.Context = &yes
	o, reused, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "", withOpts)
	require.NoError(t, err)
	require.False(t, reused)
	b.WaitStatus(t, o, "done")

	// After lease + TTL the job is not reused.
	b.Clock.Advance(time.Hour)
	fresh, reused, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, id, fresh)
	b.WaitStatus(t, fresh, "done")

	// A failed job is never reused.
	bad := b.Submit(t, "alice", enginetest.Targets("bad", 1))
	b.WaitStatus(t, bad, "failed")
	bad2, reused, err := b.Runner.Submit(ctx, enginetest.Caller("alice"), "", enginetest.Targets("bad", 1))
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, bad, bad2)
}

// A live job's lease moves with every stored target, though its stored row
// is rewritten only when its status changes: a job older than TTL whose
// last target was stored within TTL is still reused.
func TestRunner_IdempotencyLiveJobLease(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var b *enginetest.Bundle
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 0 {
			b.Clock.Advance(50 * time.Minute) // stored at created + 50 min
		} else {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b = enginetest.Setup(t, fetch, engine.Config{TTL: time.Hour})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	testkit.WaitFor(t, "the first target stored", func() bool {
		j, _, ok := b.Runner.Status(id)
		return ok && j.TargetsDone == 1
	})
	b.Clock.Advance(20 * time.Minute) // created + TTL has passed; lease + TTL has not
	again, reused, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.True(t, reused, "the lease is the first target's store time")
	require.Equal(t, id, again)
	close(gate)
	b.WaitStatus(t, id, "done")
}

func TestRunner_IdempotencyNeverReusesCancelled(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	b := enginetest.Setup(t, func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return engine.Result{}, nil
	}, engine.Config{JobsPerCaller: 2})
	defer close(gate)
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	require.True(t, b.Runner.Cancel(id))
	id2, reused, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a", 2))
	require.NoError(t, err, "a cancel frees the caller's slot at once")
	require.False(t, reused)
	require.NotEqual(t, id, id2)
}

// A job that has ended done but whose last write failed (it keeps its actor
// until the write goes through) is reused as a done job is; its stored row
// still says running.
func TestRunner_IdempotencyUnsavedJob(t *testing.T) {
	t.Parallel()
	var b *enginetest.Bundle
	disk := errors.New("no space left on device")
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		b.Store.SetWriteFault(func() error { return disk }) // its outcome write fails
		return engine.Result{Content: tg.URL}, nil
	}
	b = enginetest.Setup(t, fetch, engine.Config{RetryWait: time.Hour})
	id := b.Submit(t, "alice", enginetest.Targets("a", 1))
	require.Equal(t, "done", testkit.Recv(t, b.Hooks.Ended()))
	j, _, ok := b.Runner.Status(id)
	require.True(t, ok)
	require.Equal(t, "done", j.Status)

	again, reused, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a", 1))
	require.NoError(t, err)
	require.True(t, reused, "done, though not yet written")
	require.Equal(t, id, again)
	b.Store.SetWriteFault(nil)
}

func TestRunner_NewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	store, err := persistence.Open("")
	require.NoError(t, err)
	defer store.Close()
	_, err = engine.New(nil, enginetest.OKFetch, engine.Config{}, nil)
	require.Error(t, err)
	_, err = engine.New(store, nil, engine.Config{}, nil)
	require.Error(t, err)
	for _, cfg := range []engine.Config{
		{TTL: -1}, {TargetsPerJob: -1}, {JobsPerCaller: -1}, {JobsTotal: -1},
		{Workers: -1}, {MaxBytes: -1}, {RetryWait: -1}, {RetryFor: -1}, {TargetsPerJob: 1 << 20},
	} {
		_, err = engine.New(store, enginetest.OKFetch, cfg, nil)
		require.Error(t, err, "%+v", cfg)
	}
	r, err := engine.New(store, enginetest.OKFetch, engine.Config{Workers: 7}, nil)
	require.NoError(t, err, "Workers above 2 means 2")
	r.Close()
}

// A key of the caller's own replaces the derived key: it is bound to the
// targets it came with while its job is reusable, kept apart from derived
// keys and from other callers' keys, and freed once its job failed, was
// cancelled or expired.
func TestRunner_SubmitWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if name, _ := jobOf(tg.URL); name == "bad" {
			return engine.Result{}, errors.New("nope")
		}
		return engine.Result{Content: tg.URL}, nil
	}
	b := enginetest.Setup(t, fetch, engine.Config{TTL: time.Hour, JobsPerCaller: 16, JobsTotal: 64})
	ctx := context.Background()
	alice := enginetest.Caller("alice")
	with := func(c *engine.Caller, key string, ts []engine.Target) (string, bool, error) {
		return b.Runner.SubmitWith(ctx, c, "", ts, engine.SubmitOptions{IdempotencyKey: key})
	}

	id, reused, err := with(alice, "k1", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused)
	b.WaitStatus(t, id, "done")

	again, reused, err := with(alice, "k1", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.True(t, reused, "the same key and body: the same job")
	require.Equal(t, id, again)

	_, _, err = with(alice, "k1", enginetest.Targets("a", 3))
	require.ErrorIs(t, err, engine.ErrIdempotencyMismatch, "the same key with more targets")
	yes := true
	opts := enginetest.Targets("a", 2)
	opts[1].Options.Context = &yes
	_, _, err = with(alice, "k1", opts)
	require.ErrorIs(t, err, engine.ErrIdempotencyMismatch, "the same key with other options")

	fresh, reused, err := with(alice, "k2", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused, "a new key asks for a fresh job")
	require.NotEqual(t, id, fresh)

	derived, reused, err := b.Runner.Submit(ctx, alice, "", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused, "a derived key never matches a job made with a key of the caller's own")
	require.NotEqual(t, id, derived)
	require.NotEqual(t, fresh, derived)

	bobs, reused, err := with(enginetest.Caller("bob"), "k1", enginetest.Targets("a", 2))
	require.NoError(t, err)
	require.False(t, reused, "keys are each caller's own")
	require.NotEqual(t, id, bobs)

	// A failed job frees its key: the same key with another body makes a
	// new job.
	bad, _, err := with(alice, "k3", enginetest.Targets("bad", 1))
	require.NoError(t, err)
	b.WaitStatus(t, bad, "failed")
	after, reused, err := with(alice, "k3", enginetest.Targets("b", 1))
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, bad, after)

	// So does an expired one.
	b.Clock.Advance(time.Hour)
	expired, reused, err := with(alice, "k1", enginetest.Targets("c", 1))
	require.NoError(t, err)
	require.False(t, reused)
	require.NotEqual(t, id, expired)
}

func TestRunner_SubmitWithIdempotencyKeyCancelled(t *testing.T) {
	t.Parallel()
	gate := testkit.NewGate()
	b := enginetest.Setup(t, enginetest.GatedFetch(gate), engine.Config{JobsPerCaller: 2})
	defer gate.Open()
	ctx := context.Background()
	opt := engine.SubmitOptions{IdempotencyKey: "one"}
	id, _, err := b.Runner.SubmitWith(ctx, enginetest.Caller("alice"), "", enginetest.Targets("a", 2), opt)
	require.NoError(t, err)
	_, _, err = b.Runner.SubmitWith(ctx, enginetest.Caller("alice"), "", enginetest.Targets("b", 2), opt)
	require.ErrorIs(t, err, engine.ErrIdempotencyMismatch, "bound while its job is queued or running")
	require.True(t, b.Runner.Cancel(id))
	id2, reused, err := b.Runner.SubmitWith(ctx, enginetest.Caller("alice"), "", enginetest.Targets("b", 2), opt)
	require.NoError(t, err, "a cancelled job frees its key")
	require.False(t, reused)
	require.NotEqual(t, id, id2)
}

func TestRunner_SubmitWithBadIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{JobsPerCaller: 4})
	for _, tc := range []struct {
		name, key string
		ok        bool
	}{
		{"Longest", strings.Repeat("k", engine.MaxIdempotencyKey), true},
		{"Spaces", "agent 7: run 2026-01-02", true},
		{"Unicode", "clé-été", true},
		{"TooLong", strings.Repeat("k", engine.MaxIdempotencyKey+1), false},
		{"Newline", "a\nb", false},
		{"Tab", "a\tb", false},
		{"NUL", "a\x00b", false},
		{"NotUTF8", "a\xffb", false},
		{"LeadingSpace", " run 8", false},
		{"TrailingSpace", "run 8 ", false},
		{"SpacesAlone", "   ", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ok, engine.CheckIdempotencyKey(tc.key) == nil)
			_, _, err := b.Runner.SubmitWith(context.Background(), enginetest.Caller("alice"), "",
				enginetest.Targets(tc.name, 1), engine.SubmitOptions{IdempotencyKey: tc.key})
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, engine.ErrInvalid)
			require.NotContains(t, err.Error(), tc.key, "the error never holds the key")
		})
	}
	require.ErrorIs(t, engine.CheckIdempotencyKey(""), engine.ErrInvalid)
}

// BenchmarkRunner_Submit is a submit that creates a job of 1 target,
// from one of 100 callers in turn: its time and allocations, the job's
// rows and index entries written in its one transaction. The one worker
// is held by the first job, so the jobs submitted wait, queued, and none
// runs while the submits are timed. Issue 26 compares it with and without
// the index of every job (docs/PERFORMANCE.md).
func BenchmarkRunner_Submit(b *testing.B) {
	gate := testkit.NewGate()
	defer gate.Open()
	bundle := enginetest.Setup(b, enginetest.GatedFetch(gate), engine.Config{Workers: 1, JobsPerCaller: 1 << 20, JobsTotal: 1 << 20, Now: time.Now})
	ctx := context.Background()
	callers := make([]*engine.Caller, 100)
	for i := range callers {
		callers[i] = enginetest.Caller(fmt.Sprintf("caller-%d", i))
	}
	ts := enginetest.Targets("submit", 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ts[0].URL = "https://example.com/submit/" + strconv.Itoa(i) // a new job each time
		if _, reused, err := bundle.Runner.Submit(ctx, callers[i%len(callers)], "", ts); err != nil || reused {
			b.Fatal(reused, err)
		}
		i++
	}
	b.StopTimer()
	gate.Open()
	bundle.Runner.Close() // the queued jobs fail as the benchmark ends, untimed
}

// BenchmarkRunner_SubmitReused is a submit answered by a reused job: with
// the derived key (the targets' hash) and with a key of the caller's own,
// whose reuse also reads the job's stored targets to compare them with the
// submitted ones (SubmitWith's binding of a key to its body), for jobs of
// 1 and 100 targets.
func BenchmarkRunner_SubmitReused(b *testing.B) {
	bundle := enginetest.Setup(b, enginetest.OKFetch, engine.Config{TargetsPerJob: 100, JobsPerCaller: 8})
	ctx := context.Background()
	alice := enginetest.Caller("alice")
	for _, n := range []int{1, 100} {
		ts := enginetest.Targets(fmt.Sprintf("reused%d", n), n)
		opt := engine.SubmitOptions{IdempotencyKey: fmt.Sprintf("bench-%d", n)}
		derived := bundle.Submit(b, "alice", ts)
		own, _, err := bundle.Runner.SubmitWith(ctx, alice, "", ts, opt)
		require.NoError(b, err)
		bundle.WaitStatus(b, derived, "done")
		bundle.WaitStatus(b, own, "done")
		for _, key := range []string{"derived", "own"} {
			b.Run(fmt.Sprintf("targets=%d/key=%s", n, key), func(b *testing.B) {
				for b.Loop() {
					var id string
					var reused bool
					var err error
					if key == "own" {
						id, reused, err = bundle.Runner.SubmitWith(ctx, alice, "", ts, opt)
					} else {
						id, reused, err = bundle.Runner.Submit(ctx, alice, "", ts)
					}
					if err != nil || !reused || (id != own && id != derived) {
						b.Fatalf("%s %v %v", id, reused, err)
					}
				}
			})
		}
	}
}

// A durable runner whose sync of a new job fails answers Submit an error
// (wrapping persistence.ErrNotSynced) and nothing is created: the store
// takes the job back (the answer says nothing was created, so the job
// must not show, even failed, nor run, nor be reused by the same targets
// submitted again, which make a new job that runs).
func TestSubmit_DurableSyncFailureCreatesNothing(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync, Now: func() time.Time { return at }})
	var fail atomic.Bool
	fail.Store(true)
	store.SetSyncFault(func() error {
		if fail.CompareAndSwap(true, false) {
			return errors.New("input/output error")
		}
		return nil
	})
	ts := enginetest.Targets("alice", 2)
	failed, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", ts)
	require.ErrorIs(t, err, persistence.ErrNotSynced)
	var jobs []persistence.JobRecord
	require.NoError(t, store.Jobs(func(j persistence.JobRecord) bool { jobs = append(jobs, j); return true }))
	require.Empty(t, jobs, "a job whose creation was not synced is taken back")
	left, err := store.Unsettled()
	require.NoError(t, err)
	require.Empty(t, left)
	counted, err := store.CountBytes()
	require.NoError(t, err)
	require.Equal(t, counted, store.Bytes(), "its bytes taken back too")

	id := b.Submit(t, "alice", ts)
	require.NotEqual(t, failed, id, "the failed job is not reused")
	b.WaitStatus(t, id, "done")
	require.EqualValues(t, 1, store.Reopens(), "Badger reopened once, after the failed sync")
}

// A durable runner whose disk fails a new job's sync and then the write
// that takes it back leaves the job queued in the store, with no actor. The same targets submitted again must not be answered with that
// job (its creation was never synced, and it never runs): they make a new
// job, which runs.
func TestSubmit_DurableUnsyncedJobNotReused(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{Durability: engine.DurabilitySync})
	var syncFail, writeFail atomic.Bool
	syncFail.Store(true)
	store.SetWriteFault(func() error {
		if writeFail.CompareAndSwap(true, false) {
			return errors.New("input/output error")
		}
		return nil
	})
	store.SetSyncFault(func() error {
		if syncFail.CompareAndSwap(true, false) {
			writeFail.Store(true) // the disk is going: the next write fails too
			return errors.New("input/output error")
		}
		return nil
	})
	ts := enginetest.Targets("alice", 2)
	_, _, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", ts)
	require.ErrorIs(t, err, persistence.ErrNotSynced)
	var first []persistence.JobRecord
	require.NoError(t, store.Jobs(func(j persistence.JobRecord) bool { first = append(first, j); return true }))
	require.Len(t, first, 1)

	id, reused, err := b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", ts)
	require.NoError(t, err)
	require.False(t, reused, "the resubmit reused job %s (stored %s, its creation never synced)", first[0].ID, first[0].Status)
	require.NotEqual(t, first[0].ID, id)
	b.WaitStatus(t, id, "done")
}

// A crowd of submitters on a durable runner: every id Submit answers
// (new or reused) was in the store when one of the store's syncs
// completed, and each target is fetched only once a completed sync saw the
// outcome of the job's target before it. Right after each sync (its sync
// fault hook, under the store's write lock, so nothing commits meanwhile),
// the store's rows are read: what they hold is what that sync made durable.
func TestSubmit_DurableCrowdEachAnswerFollowsASync(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	var mu sync.Mutex
	synced := map[string]int{} // caller → targets stored, as a completed sync saw them
	ids := map[string]string{} // caller → its job id, as a completed sync saw it
	var scanErr error
	store.SetSyncFault(func() error {
		err := store.Jobs(func(j persistence.JobRecord) bool {
			mu.Lock()
			synced[j.Caller] = max(synced[j.Caller], j.TargetsDone)
			ids[j.Caller] = j.ID
			mu.Unlock()
			return true
		})
		if err != nil {
			mu.Lock()
			scanErr = err
			mu.Unlock()
		}
		return nil
	})
	var early atomic.Int64
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		_, idx := jobOf(tg.URL)
		mu.Lock()
		if synced[c.Name] < idx {
			early.Add(1)
		}
		mu.Unlock()
		return enginetest.OKFetch(ctx, c, tg)
	}
	b := enginetest.SetupOn(t, store, fetch, engine.Config{Durability: engine.DurabilitySync, Workers: 2, JobsTotal: 256})
	const submitters, each = 16, 6
	errs := make(chan error, submitters)
	for g := range submitters {
		go func() {
			for i := range each {
				caller := fmt.Sprintf("c%d-%d", g, i)
				ts := enginetest.Targets(caller, 3)
				for range 2 { // the second is reused
					id, _, err := b.Runner.Submit(context.Background(), enginetest.Caller(caller), "", ts)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					seen := ids[caller]
					mu.Unlock()
					if seen != id {
						errs <- fmt.Errorf("job %s of %s answered before a sync saw it", id, caller)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range submitters {
		require.NoError(t, <-errs)
	}
	// A reader of the store may see a group's rows before its sync ends
	// (the writer holds the rows' answers, not the rows): the last syncs
	// are waited for.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, done := range synced {
			if done == 3 {
				n++
			}
		}
		return n == submitters*each
	}, time.Minute, 5*time.Millisecond, "every job's last outcome synced")
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, scanErr)
	require.Zero(t, early.Load(), "targets fetched before the outcome of the one before was synced")
	for _, id := range ids {
		j, err := store.Job(id)
		require.NoError(t, err)
		require.Equal(t, persistence.StatusDone, j.Status)
	}
}
