package engine_test

// Adversarial tests of issues 9 (reads apart from the work) and 10 (the
// runner's own failures), through the public API only. The tests that fail
// against the current code are in adversary_failing_test.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// advPanic is the unique panic value every misbehaving hook or fetch uses:
// it must never appear in a log line.
const advPanic = "ADV-PANIC-VALUE-5b1f7c"

// advDeadline bounds what must be prompt (Cancel, Close, Shutdown, Wait).
const advDeadline = 20 * time.Second

// advRig is a runner with its store, clock and captured logs.
type advRig struct {
	r     *engine.Runner
	store *persistence.Store
	clock *clock
	logs  *syncBuffer
}

// advStart starts a runner on a fresh in-memory store with cfg as given
// (its hooks kept); a nil cfg.Now takes a fake clock. Cleanup closes both.
func advStart(t *testing.T, fetch engine.FetchFunc, cfg engine.Config) *advRig {
	t.Helper()
	store, err := persistence.Open("")
	require.NoError(t, err)
	return advStartOn(t, store, fetch, cfg)
}

func advStartOn(t *testing.T, store *persistence.Store, fetch engine.FetchFunc, cfg engine.Config) *advRig {
	t.Helper()
	rig := &advRig{store: store, clock: newClock(), logs: &syncBuffer{}}
	if cfg.Now == nil {
		cfg.Now = rig.clock.Now
	}
	log := slog.New(slog.NewTextHandler(rig.logs, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
	r, err := engine.New(store, fetch, cfg, log)
	require.NoError(t, err)
	rig.r = r
	t.Cleanup(func() {
		r.Close()
		require.NoError(t, store.Close())
	})
	return rig
}

// within runs f and fails the test if it has not returned within d. f keeps
// running if it overruns (the test fails anyway).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// requireNoPanicValue checks that no log line carries the panic value.
func requireNoPanicValue(t *testing.T, logs string) {
	t.Helper()
	if i := strings.Index(logs, advPanic); i >= 0 {
		lo, hi := max(0, i-200), min(len(logs), i+200)
		t.Fatalf("a log line carries the panic value: …%s…", logs[lo:hi])
	}
}

// requireSettled checks a job after Close: every read agrees and none
// reads it live, and the store holds it terminal.
func requireSettled(t *testing.T, rig *advRig, id string) engine.Job {
	t.Helper()
	j, ok := rig.r.Job(id)
	require.True(t, ok, "job %s readable", id)
	require.False(t, engine.IsLive(j.Status), "job %s reads %s after Close", id, j.Status)
	js, ts, ok := rig.r.Status(id)
	require.True(t, ok)
	jt, tt, ok := rig.r.Targets(id)
	require.True(t, ok)
	require.Equal(t, j, js, "Job and Status agree")
	require.Equal(t, j, jt, "Job and Targets agree")
	require.Len(t, tt, len(ts))
	for i := range ts {
		require.Equal(t, ts[i].Status, tt[i].Status, "target %d", i)
		require.Equal(t, ts[i].Error, tt[i].Error, "target %d", i)
		require.NotEqual(t, engine.TargetRunning, ts[i].Status, "target %d reads running after Close", i)
	}
	rec, err := rig.store.Job(id)
	require.NoError(t, err)
	require.False(t, persistence.IsLive(rec.Status), "job %s is stored %s after Close", id, rec.Status)
	require.Equal(t, j.Status, rec.Status, "the store and the reads agree")
	return j
}

// ---------------------------------------------------------------------------
// Hooks that panic or end their goroutine, at every call and at each site.

type hookSite struct {
	name string // the hook's name, as logged
	hit  func(h *engine.Hooks, bad func())
}

// hookSites are the hooks' call sites: a hook that calls bad at that site
// only (and behaves at every other).
func hookSites() []hookSite {
	var sites []hookSite
	for _, o := range []string{"", "created", "reused", "done", "partial", "failed", "cancelled"} {
		sites = append(sites, hookSite{name: "Job/" + o, hit: func(h *engine.Hooks, bad func()) {
			h.Job = func(outcome string) {
				if o == "" || outcome == o {
					bad()
				}
			}
		}})
	}
	for _, which := range []string{"all", "ok", "err"} {
		sites = append(sites, hookSite{name: "Target/" + which, hit: func(h *engine.Hooks, bad func()) {
			h.Target = func(err error, _ time.Duration, _ int) {
				if which == "all" || (which == "ok") == (err == nil) {
					bad()
				}
			}
		}})
	}
	sites = append(sites, hookSite{name: "JobSeconds/all", hit: func(h *engine.Hooks, bad func()) {
		h.JobSeconds = func(time.Duration) { bad() }
	}})
	for _, hook := range []string{"Depth", "Inflight"} {
		for _, which := range []string{"all", "zero", "nonzero"} {
			sites = append(sites, hookSite{name: hook + "/" + which, hit: func(h *engine.Hooks, bad func()) {
				g := func(n int) {
					if which == "all" || (which == "zero") == (n == 0) {
						bad()
					}
				}
				if hook == "Depth" {
					h.Depth = g
				} else {
					h.Inflight = g
				}
			}})
		}
	}
	return sites
}

// hookScenarioFetch: "ok" succeeds, "fail" fails with a TargetError, "block"
// waits for release (or the context), "hang" waits for the context; each
// start is reported on started (by URL).
type hookScenarioFetch struct {
	release chan struct{}
	started chan string
}

func (f *hookScenarioFetch) fetch(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
	kind, _ := jobOf(tg.URL)
	select {
	case f.started <- tg.URL:
	default:
	}
	switch kind {
	case "fail":
		return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "look elsewhere"}
	case "block":
		select {
		case <-f.release:
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	case "hang":
		<-ctx.Done()
		return engine.Result{}, ctx.Err()
	}
	return engine.Result{Content: "page <b>" + tg.URL + "</b>"}, nil
}

func tgt(kind string, i int) engine.Target {
	return engine.Target{URL: fmt.Sprintf("http://h/%s/%d", kind, i)}
}

// runHookScenario runs jobs through every hook call site (created, reused,
// done, partial, failed, cancelled, shutdown; targets ok and failed; depth
// and inflight up and down) and checks the runner's promises.
func runHookScenario(t *testing.T, hooks engine.Hooks) *advRig {
	t.Helper()
	f := &hookScenarioFetch{release: make(chan struct{}), started: make(chan string, 64)}
	rig := advStart(t, f.fetch, engine.Config{JobsPerCaller: 1, Workers: 1, RetryWait: time.Millisecond, Hooks: hooks})
	r := rig.r
	ctx := context.Background()
	wait := func(id string) engine.Job {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, advDeadline)
		defer cancel()
		j, err := r.Wait(wctx, id)
		require.NoError(t, err, "Wait")
		return j
	}
	submit := func(c string, ts ...engine.Target) string {
		t.Helper()
		var id string
		within(t, advDeadline, "Submit", func() {
			var reused bool
			var err error
			id, reused, err = r.Submit(ctx, caller(c), "", ts)
			require.NoError(t, err)
			require.False(t, reused)
		})
		return id
	}

	a := submit("alice", tgt("ok", 0), tgt("fail", 1))
	require.Equal(t, engine.StatusPartial, wait(a).Status)
	id, reused, err := r.Submit(ctx, caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("fail", 1)})
	require.NoError(t, err)
	require.True(t, reused)
	require.Equal(t, a, id)

	b := submit("bob", tgt("ok", 0))
	require.Equal(t, engine.StatusDone, wait(b).Status)
	c := submit("carol", tgt("fail", 0))
	require.Equal(t, engine.StatusFailed, wait(c).Status)

	d := submit("dave", tgt("block", 0), tgt("ok", 1))
	waitFor(t, "dave's first target in flight", func() bool {
		_, ts, ok := r.Targets(d)
		return ok && ts[0].Status == engine.TargetRunning
	})
	var cancelled bool
	within(t, advDeadline, "Cancel", func() { cancelled = r.Cancel(d) })
	require.True(t, cancelled)
	require.False(t, r.Cancel(d), "a second Cancel")
	jd, ok := r.Job(d)
	require.True(t, ok)
	require.Equal(t, engine.StatusCancelled, jd.Status)
	close(f.release)
	require.Equal(t, engine.StatusCancelled, wait(d).Status)

	// Dave's job is cancelled: dave may submit again.
	d2 := submit("dave", tgt("ok", 3))
	require.Equal(t, engine.StatusDone, wait(d2).Status)
	// The caps: alice's first job has ended, so a second one is accepted;
	// a third, while the second lives, is refused.
	e := submit("alice", tgt("hang", 0), tgt("ok", 1))
	_, _, err = r.Submit(ctx, caller("alice"), "", []engine.Target{tgt("ok", 7)})
	require.ErrorIs(t, err, engine.ErrCallerBusy)
	waitFor(t, "alice's second job in flight", func() bool {
		_, ts, ok := r.Targets(e)
		return ok && ts[0].Status == engine.TargetRunning
	})

	within(t, advDeadline, "Close", r.Close)
	je := requireSettled(t, rig, e)
	require.Equal(t, engine.StatusFailed, je.Status)
	require.Equal(t, "shutdown", je.Error)
	for _, id := range []string{a, b, c, d, d2} {
		requireSettled(t, rig, id)
	}
	require.False(t, r.Cancel(e))
	_, _, err = r.Submit(ctx, caller("zed"), "", []engine.Target{tgt("ok", 0)})
	require.ErrorIs(t, err, engine.ErrClosed)
	requireNoPanicValue(t, rig.logs.String())
	return rig
}

func TestAdversary_HookMisbehavesAtEverySite(t *testing.T) {
	t.Parallel()
	for _, site := range hookSites() {
		for _, how := range []string{"panic", "goexit"} {
			t.Run(site.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				var bad atomic.Int64
				hooks := engine.Hooks{
					Job:        func(string) {},
					Target:     func(error, time.Duration, int) {},
					JobSeconds: func(time.Duration) {},
					Depth:      func(int) {},
					Inflight:   func(int) {},
				}
				site.hit(&hooks, func() {
					bad.Add(1)
					if how == "panic" {
						panic(errors.New(advPanic))
					}
					runtime.Goexit()
				})
				rig := runHookScenario(t, hooks)
				require.Positive(t, bad.Load(), "the site was reached")
				require.Equal(t, uint64(bad.Load()), rig.r.HookPanics(), "every bad call counted")
				hook, _, _ := strings.Cut(site.name, "/")
				logs := rig.logs.String()
				require.Contains(t, logs, "hook="+hook, "the hook's name is logged")
				require.Contains(t, logs, "level=ERROR")
			})
		}
	}
}

// Every hook panics at every call, with a panic value of every kind.
func TestAdversary_AllHooksPanicAlways(t *testing.T) {
	t.Parallel()
	for _, v := range []func() any{
		func() any { return advPanic },
		func() any { return errors.New(advPanic) },
		func() any { return fmt.Stringer(stringerPanic{}) },
		func() any { return []string{advPanic} },
	} {
		t.Run(fmt.Sprintf("%T", v()), func(t *testing.T) {
			t.Parallel()
			var bad atomic.Int64
			p := func() { bad.Add(1); panic(v()) }
			rig := runHookScenario(t, engine.Hooks{
				Job:        func(string) { p() },
				Target:     func(error, time.Duration, int) { p() },
				JobSeconds: func(time.Duration) { p() },
				Depth:      func(int) { p() },
				Inflight:   func(int) { p() },
			})
			require.Equal(t, uint64(bad.Load()), rig.r.HookPanics())
		})
	}
}

type stringerPanic struct{}

func (stringerPanic) String() string { return advPanic }
func (stringerPanic) Error() string  { return advPanic }

// ---------------------------------------------------------------------------
// FetchFuncs that misbehave.

type panickyErr struct{}

func (panickyErr) Error() string { panic(advPanic) }

type goexitErr struct{}

func (goexitErr) Error() string { runtime.Goexit(); return "" }

type panickyMarshal struct{}

func (panickyMarshal) MarshalJSON() ([]byte, error) { panic(advPanic) }

func TestAdversary_FetchMisbehaves(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("é", 5<<20) // 10 MiB
	type want struct {
		status string
		err    string // exact, or "" for any
		maxErr int
		hint   bool // a hint is stored
	}
	cases := []struct {
		name  string
		fetch func(ctx context.Context) (engine.Result, error)
		want  want
	}{
		{"panic", func(context.Context) (engine.Result, error) { panic(advPanic) },
			want{engine.TargetFailed, "internal error", 0, false}},
		{"panicError", func(context.Context) (engine.Result, error) { panic(errors.New(advPanic)) },
			want{engine.TargetFailed, "internal error", 0, false}},
		{"goexit", func(context.Context) (engine.Result, error) { runtime.Goexit(); return engine.Result{}, nil },
			want{engine.TargetFailed, "internal error", 0, false}},
		{"typedNilTargetError", func(context.Context) (engine.Result, error) {
			var te *engine.TargetError
			return engine.Result{}, te
		}, want{engine.TargetFailed, "internal error", 0, false}},
		{"wrappedTypedNilTargetError", func(context.Context) (engine.Result, error) {
			var te *engine.TargetError
			return engine.Result{}, fmt.Errorf("wrapped: %w", te)
		}, want{engine.TargetFailed, "", engine.MaxErrorBytes, false}},
		{"errorMethodPanics", func(context.Context) (engine.Result, error) { return engine.Result{}, panickyErr{} },
			want{engine.TargetFailed, "internal error", 0, false}},
		{"errorMethodGoexits", func(context.Context) (engine.Result, error) { return engine.Result{}, goexitErr{} },
			want{engine.TargetFailed, "internal error", 0, false}},
		{"hugeErrorText", func(context.Context) (engine.Result, error) { return engine.Result{}, errors.New(huge) },
			want{engine.TargetFailed, "", engine.MaxErrorBytes, false}},
		{"hugeTargetError", func(context.Context) (engine.Result, error) {
			return engine.Result{}, &engine.TargetError{Status: 500, Msg: huge, Hint: huge}
		}, want{engine.TargetFailed, "", engine.MaxErrorBytes, true}},
		{"invalidUTF8Error", func(context.Context) (engine.Result, error) {
			return engine.Result{}, &engine.TargetError{Msg: strings.Repeat("\xff", 10<<10), Hint: strings.Repeat("\xfe", 10<<10)}
		}, want{engine.TargetFailed, "", engine.MaxErrorBytes, false}},
		{"hugeResult", func(context.Context) (engine.Result, error) {
			return engine.Result{Content: strings.Repeat("x", persistence.MaxResultSize+1)}, nil
		}, want{engine.TargetFailed, "", 200, false}},
		{"unencodableResult", func(context.Context) (engine.Result, error) {
			return engine.Result{Content: "x", Meta: map[string]any{"ch": make(chan int)}}, nil
		}, want{engine.TargetFailed, "", 200, false}},
		{"marshalPanics", func(context.Context) (engine.Result, error) {
			return engine.Result{Content: "x", Meta: map[string]any{"p": panickyMarshal{}}}, nil
		}, want{engine.TargetFailed, "", 200, false}},
		{"retryLaterForever", func(context.Context) (engine.Result, error) {
			return engine.Result{}, fmt.Errorf("%s: %w", huge, engine.ErrRetryLater)
		}, want{engine.TargetFailed, "", engine.MaxErrorBytes, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var targetErrs, targetOKs atomic.Int32
			clk := newClock()
			fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
				if kind, _ := jobOf(tg.URL); kind == "bad" {
					clk.Advance(time.Hour) // past RetryFor for a busy one
					return tc.fetch(ctx)
				}
				return engine.Result{Content: "fine"}, nil
			}
			rig := advStart(t, fetch, engine.Config{RetryWait: time.Millisecond, RetryFor: time.Minute, TTL: 1000 * time.Hour, Now: clk.Now,
				Hooks: engine.Hooks{Target: func(err error, _ time.Duration, _ int) {
					if err != nil {
						targetErrs.Add(1)
					} else {
						targetOKs.Add(1)
					}
				}}})
			id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("bad", 0), tgt("ok", 1), tgt("bad", 2)})
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
			defer cancel()
			j, err := rig.r.Wait(wctx, id)
			require.NoError(t, err)
			require.Equal(t, engine.StatusPartial, j.Status)
			require.Equal(t, 3, j.TargetsDone)
			require.Equal(t, 2, j.TargetsFailed)
			_, ts, ok := rig.r.Status(id)
			require.True(t, ok)
			for _, i := range []int{0, 2} {
				tt := ts[i]
				require.Equal(t, tc.want.status, tt.Status)
				if tc.want.err != "" {
					require.Equal(t, tc.want.err, tt.Error)
				} else {
					require.NotEmpty(t, tt.Error)
					require.LessOrEqual(t, len(tt.Error), tc.want.maxErr)
				}
				require.LessOrEqual(t, len(tt.Hint), engine.MaxHintBytes)
				if tc.want.hint {
					require.NotEmpty(t, tt.Hint)
				}
				require.NotContains(t, tt.Error, advPanic)
				require.Nil(t, tt.Result)
				_, ok := rig.r.Result(id, i)
				require.False(t, ok)
			}
			require.Equal(t, engine.TargetDone, ts[1].Status)
			within(t, advDeadline, "Close", rig.r.Close)
			require.EqualValues(t, 2, targetErrs.Load(), "Hooks.Target told an error for each failed target")
			require.EqualValues(t, 1, targetOKs.Load())
			requireSettled(t, rig, id)
			requireNoPanicValue(t, rig.logs.String())
		})
	}
}

// A FetchFunc that ignores its context: Shutdown(ctx) gives up on it when
// ctx is done, fails the job "shutdown", and its late outcome is never
// written.
func TestAdversary_ShutdownGivesUpOnStubbornFetch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	returned := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if kind, _ := jobOf(tg.URL); kind == "stubborn" {
			started <- struct{}{}
			<-release // ignores ctx
			defer close(returned)
			return engine.Result{Content: "late <result>"}, nil
		}
		return engine.Result{Content: "ok"}, nil
	}
	var hooksAfter atomic.Int32
	var shutdownDone atomic.Bool
	rig := advStart(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 4, Hooks: engine.Hooks{
		Target: func(error, time.Duration, int) {
			if shutdownDone.Load() {
				hooksAfter.Add(1)
			}
		},
		Job: func(string) {
			if shutdownDone.Load() {
				hooksAfter.Add(1)
			}
		},
	}})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	ok := rig.store
	_ = ok
	done := rig.r
	id, _, err := done.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("stubborn", 0), tgt("ok", 1)})
	require.NoError(t, err)
	other, _, err := done.Submit(context.Background(), caller("bob"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	recv(t, started)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var serr error
	start := time.Now()
	within(t, advDeadline, "Shutdown", func() { serr = rig.r.Shutdown(ctx) })
	shutdownDone.Store(true)
	require.ErrorIs(t, serr, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, rig.r.Shutdown(context.Background()), "a second Shutdown")

	j := requireSettled(t, rig, id)
	require.Equal(t, engine.StatusFailed, j.Status)
	require.Equal(t, "shutdown", j.Error)
	requireSettled(t, rig, other)
	before, beforeTs, err := rig.store.JobWithTargets(id)
	require.NoError(t, err)
	require.Equal(t, persistence.TargetPending, beforeTs[0].Status)

	close(release)
	recv(t, returned)
	waitFor(t, "the late outcome dropped and logged", func() bool {
		return strings.Contains(rig.logs.String(), "dropped")
	})
	after, afterTs, err := rig.store.JobWithTargets(id)
	require.NoError(t, err)
	require.Equal(t, before, after, "the job's row after Shutdown returned")
	require.Equal(t, beforeTs, afterTs, "the targets after Shutdown returned")
	j2, ts, ok2 := rig.r.Status(id)
	require.True(t, ok2)
	require.Equal(t, j, j2)
	require.Equal(t, engine.TargetPending, ts[0].Status)
	require.Zero(t, hooksAfter.Load(), "a hook ran after Shutdown returned")
}

// ---------------------------------------------------------------------------
// Transient store write faults, at every write of a scenario.

// oneFault fails the n-th write (1-based) once, and counts every write.
type oneFault struct {
	n     int64
	calls atomic.Int64
}

func (f *oneFault) fault() error {
	if f.calls.Add(1) == f.n {
		return errors.New("ADV-FAULT")
	}
	return nil
}

// faultScenario runs a scenario with fault installed from the start:
// a job that ends partial (then Touched), one cancelled with a target in
// flight, one live at Close. It returns the writes it made.
func faultScenario(t *testing.T, f *oneFault) int64 {
	t.Helper()
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch kind, _ := jobOf(tg.URL); kind {
		case "fail":
			return engine.Result{}, &engine.TargetError{Msg: "nope", Hint: "h"}
		case "block":
			select {
			case <-release:
			case <-ctx.Done():
			}
		case "hang":
			<-ctx.Done()
			return engine.Result{}, ctx.Err()
		}
		return engine.Result{Content: "<p>" + tg.URL + "</p>"}, nil
	}
	store, err := persistence.Open("")
	require.NoError(t, err)
	store.SetWriteFault(f.fault)
	rig := advStartOn(t, store, fetch, engine.Config{Workers: 1, JobsPerCaller: 2, RetryWait: time.Millisecond, TTL: 10 * time.Second})
	r := rig.r
	ctx := context.Background()
	var ids []string
	submit := func(c string, ts ...engine.Target) (string, bool) {
		t.Helper()
		id, _, err := r.Submit(ctx, caller(c), "", ts)
		if err != nil {
			require.NotErrorIs(t, err, engine.ErrCallerBusy)
			require.Contains(t, err.Error(), "ADV-FAULT")
			return "", false
		}
		ids = append(ids, id)
		return id, true
	}
	wait := func(id string) engine.Job {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, advDeadline)
		defer cancel()
		j, err := r.Wait(wctx, id)
		require.NoError(t, err)
		return j
	}
	if a, ok := submit("alice", tgt("ok", 0), tgt("fail", 1), tgt("ok", 2)); ok {
		require.Equal(t, engine.StatusPartial, wait(a).Status)
		requireReadsAgree(t, r, a)
		rig.clock.Advance(3 * time.Second)
		r.Touch(a)
		rig.clock.Advance(5 * time.Second) // the Touch's effect: see TestAdversary_TouchAfterEndKept
		j, ok := r.Job(a)
		require.True(t, ok)
		require.Equal(t, engine.StatusPartial, j.Status)
	}
	if b, ok := submit("bob", tgt("block", 0), tgt("ok", 1)); ok {
		waitFor(t, "bob in flight", func() bool {
			_, ts, ok := r.Targets(b)
			return ok && ts[0].Status == engine.TargetRunning
		})
		var c bool
		within(t, advDeadline, "Cancel", func() { c = r.Cancel(b) })
		require.True(t, c)
		close(release)
		require.Equal(t, engine.StatusCancelled, wait(b).Status)
		requireReadsAgree(t, r, b)
	} else {
		close(release)
	}
	if c, ok := submit("carol", tgt("ok", 0), tgt("hang", 1)); ok {
		waitFor(t, "carol in flight", func() bool {
			_, ts, ok := r.Targets(c)
			return ok && ts[1].Status == engine.TargetRunning
		})
		requireReadsAgree(t, r, c)
	}
	within(t, advDeadline, "Close", r.Close)
	for _, id := range ids {
		requireSettled(t, rig, id)
	}
	return f.calls.Load()
}

// requireReadsAgree checks that Job, Targets and Status give the same job
// (a read in between may see a later state: retried until they agree).
func requireReadsAgree(t *testing.T, r *engine.Runner, id string) {
	t.Helper()
	waitFor(t, "Job, Targets and Status to agree", func() bool {
		j1, ok1 := r.Job(id)
		j2, t2, ok2 := r.Targets(id)
		j3, t3, ok3 := r.Status(id)
		j4, ok4 := r.Job(id)
		if !ok1 || !ok2 || !ok3 || !ok4 || j1 != j4 {
			return false // moved on meanwhile
		}
		if j1 != j2 || j1 != j3 || len(t2) != len(t3) {
			return false
		}
		done, failed := 0, 0
		for i := range t2 {
			if t2[i].Status != t3[i].Status || t2[i].Error != t3[i].Error {
				return false
			}
			switch t2[i].Status {
			case engine.TargetDone:
				done++
			case engine.TargetFailed:
				failed++
				done++
			}
		}
		return done == j1.TargetsDone && failed == j1.TargetsFailed
	})
}

func TestAdversary_WriteFaultAtEveryWrite(t *testing.T) {
	t.Parallel()
	total := faultScenario(t, &oneFault{n: -1})
	require.Positive(t, total)
	for n := int64(1); n <= total+2; n++ {
		t.Run(fmt.Sprint("write", n), func(t *testing.T) {
			t.Parallel()
			faultScenario(t, &oneFault{n: n})
		})
	}
}

// ---------------------------------------------------------------------------
// Touch, leases and expiry (by the injected clock).

// TestAdversary_PolledJobNeverExpires polls a settled job with Touch at
// odd sub-second instants: after each Touch at t it must read at
// t + TTL - 1ns, whatever the coalescing, for TTLs on both sides of 2s.
func TestAdversary_PolledJobNeverExpires(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, 2*time.Second - 1, 2 * time.Second, 2*time.Second + 1, 3 * time.Second, time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			rig := advStart(t, okFetch, engine.Config{TTL: ttl})
			id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
			defer cancel()
			_, err = rig.r.Wait(wctx, id)
			require.NoError(t, err)
			// The actor gone: the store's path, where Touch coalesces. (A
			// finished job whose actor still runs: see
			// TestAdversary_TouchAfterEndKept.)
			within(t, advDeadline, "Close", rig.r.Close)
			steps := []time.Duration{1, 999 * time.Millisecond, 1, 123456789, time.Second, 500 * time.Millisecond, 1, 999999999, 7, ttl / 3, ttl / 2}
			for i, d := range steps {
				rig.clock.Advance(min(d, ttl-1))
				rig.r.Touch(id)
				rig.r.Touch(id)
				rig.clock.Advance(ttl - 1)
				_, ok := rig.r.Job(id)
				require.True(t, ok, "step %d: Touched at t, gone at t+TTL-1ns", i)
				_, _, ok = rig.r.Targets(id)
				require.True(t, ok, "step %d: Targets", i)
				rig.clock.Advance(-(ttl - 1))
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Wait.

func TestAdversary_WaitAnswers(t *testing.T) {
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
	rig := advStart(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 4})
	r := rig.r
	bg := context.Background()
	for _, id := range []string{"", "x", strings.Repeat("a", 32), strings.Repeat("A", 32), strings.Repeat("0", 1<<16)} {
		var err error
		within(t, advDeadline, "Wait on an unknown id", func() { _, err = r.Wait(bg, id) })
		require.ErrorIs(t, err, engine.ErrNotFound)
	}
	id, _, err := r.Submit(bg, caller("alice"), "", []engine.Target{tgt("hang", 0)})
	require.NoError(t, err)
	recv(t, started)

	// ctx: returns ctx.Err() with the job as it stands.
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	var j engine.Job
	within(t, advDeadline, "Wait on ctx", func() { j, err = r.Wait(ctx, id) })
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
	within(t, advDeadline, "Wait on an uppercase id", func() { _, err = r.Wait(uctx, strings.ToUpper(id)) })
	require.Error(t, err)

	within(t, advDeadline, "Close", r.Close)
	j, err = r.Wait(bg, id)
	if err != nil { // the doc allows either for a job that ended
		require.ErrorIs(t, err, engine.ErrClosed)
	}
	require.Equal(t, engine.StatusFailed, j.Status) // its only target failed at the cancel
}

// ---------------------------------------------------------------------------
// Results: not HTML-escaped; every read agrees.

func TestAdversary_ResultsNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	content := `<script>alert("x&y")</script> > < & ` + "\u00e9"
	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: content, Meta: map[string]any{"<k>": "<v>&"}}, nil
	}
	rig := advStart(t, fetch, engine.Config{})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0)})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	_, err = rig.r.Wait(wctx, id)
	require.NoError(t, err)
	check := func() {
		b, ok := rig.r.ResultJSON(id, 0)
		require.True(t, ok)
		require.Contains(t, string(b), `<script>`)
		require.Contains(t, string(b), `"<k>":"<v>&"`)
		require.NotContains(t, string(b), `\u003c`)
		require.NotContains(t, string(b), `\u0026`)
		b[0] = 'X' // the bytes are the caller's
		res, ok := rig.r.Result(id, 0)
		require.True(t, ok)
		require.Equal(t, content, res.Content)
		_, ts, ok := rig.r.Status(id)
		require.True(t, ok)
		require.Equal(t, res, ts[0].Result)
		b2, ok := rig.r.ResultJSON(id, 0)
		require.True(t, ok)
		require.Equal(t, byte('{'), b2[0])
	}
	check()
	rig.r.Close()
	check()
}

// ---------------------------------------------------------------------------
// Hostile ids and indexes.

func TestAdversary_HostileIDs(t *testing.T) {
	t.Parallel()
	rig := advStart(t, okFetch, engine.Config{TTL: time.Minute})
	r := rig.r
	id, _, err := r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("ok", 1)})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	_, err = r.Wait(wctx, id)
	require.NoError(t, err)
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
		_, err := r.Wait(wctx, h)
		require.ErrorIs(t, err, engine.ErrNotFound)
	}
	for _, idx := range []int{-1, -1 << 62, 2, 3, 1 << 16, 1<<16 + 0, 1<<31 - 1, int(^uint(0) >> 1)} {
		_, ok := r.Result(id, idx)
		require.False(t, ok, "Result idx %d", idx)
		_, ok = r.ResultJSON(id, idx)
		require.False(t, ok, "ResultJSON idx %d", idx)
	}
	// A swept id.
	rig.clock.Advance(2 * time.Minute)
	id2, _, err := r.Submit(context.Background(), caller("bob"), "", []engine.Target{tgt("ok", 0)}) // sweeps
	require.NoError(t, err)
	_, err = r.Wait(wctx, id2)
	require.NoError(t, err)
	_, ok := r.Job(id)
	require.False(t, ok)
	r.Touch(id)
	_, ok = r.Job(id)
	require.False(t, ok)
	_, ok = r.ResultJSON(id, 0)
	require.False(t, ok)
	require.False(t, r.Cancel(id))
	_, err = r.Wait(wctx, id)
	require.ErrorIs(t, err, engine.ErrNotFound)
}

// ---------------------------------------------------------------------------
// Reads agree while a write is held at the store, while a failed write
// waits for its retry, and while Close waits for a fetch.

func TestAdversary_ReadsAgreeWhileWriteHeld(t *testing.T) {
	t.Parallel()
	go1 := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 1 {
			<-go1
		}
		return engine.Result{Content: "<" + tg.URL + ">"}, nil
	}
	store, err := persistence.Open("")
	require.NoError(t, err)
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
	rig := advStartOn(t, store, fetch, engine.Config{RetryWait: time.Millisecond})
	r := rig.r
	id, _, err := r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("ok", 1), tgt("ok", 2)})
	require.NoError(t, err)
	waitFor(t, "target 1 in flight", func() bool {
		_, ts, ok := r.Targets(id)
		return ok && ts[1].Status == engine.TargetRunning
	})
	hold.Store(true)
	close(go1)
	recv(t, held) // target 1's outcome is at the store, held
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
	waitFor(t, "target 2 fetched and its write failed, the job done as its actor holds it", func() bool {
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
	wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	_, err = r.Wait(wctx, id)
	require.NoError(t, err)
	waitFor(t, "the retry written", func() bool {
		rec, err := store.Job(id)
		return err == nil && rec.Status == engine.StatusDone && rec.Settled
	})
	requireReadsAgree(t, r, id)
	within(t, advDeadline, "Close", r.Close)
	requireSettled(t, rig, id)
}

// While Close waits for a fetch in flight, that target reads running
// (issue 10 item 6), and every read agrees.
func TestAdversary_ReadsDuringClose(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 0 {
			return engine.Result{Content: "first"}, nil
		}
		<-ctx.Done()
		close(cancelled)
		<-release
		return engine.Result{}, &engine.TargetError{Msg: "cancelled"}
	}
	rig := advStart(t, fetch, engine.Config{})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("ok", 0), tgt("ok", 1), tgt("ok", 2)})
	require.NoError(t, err)
	waitFor(t, "target 1 in flight", func() bool {
		_, ts, ok := rig.r.Targets(id)
		return ok && ts[1].Status == engine.TargetRunning
	})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		rig.r.Close()
	}()
	recv(t, cancelled)
	for range 50 {
		j, ts, ok := rig.r.Status(id)
		require.True(t, ok)
		require.Equal(t, engine.TargetDone, ts[0].Status)
		require.Equal(t, engine.TargetRunning, ts[1].Status, "the fetch Close waits for reads running")
		require.Equal(t, engine.TargetPending, ts[2].Status)
		require.Equal(t, 1, j.TargetsDone)
		jj, ok := rig.r.Job(id)
		require.True(t, ok)
		require.Equal(t, j, jj)
		_, ok = rig.r.ResultJSON(id, 1)
		require.False(t, ok)
		require.False(t, rig.r.Cancel(id), "Cancel after Close began")
	}
	close(release)
	recv(t, closed)
	j := requireSettled(t, rig, id)
	require.Equal(t, engine.StatusFailed, j.Status)
	require.Equal(t, "shutdown", j.Error)
	_, ts, _ := rig.r.Status(id)
	require.Equal(t, engine.TargetFailed, ts[1].Status, "the outcome Close waited for is stored")
	require.Equal(t, engine.TargetPending, ts[2].Status)
}

// ---------------------------------------------------------------------------
// A crowd of readers while jobs run, get cancelled, and the runner closes.

func TestAdversary_ReaderCrowd(t *testing.T) {
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
			panic(advPanic)
		}
		return engine.Result{Content: "<" + tg.URL + ">", Meta: map[string]any{"i": 1}}, nil
	}
	rig := advStart(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 3, JobsTotal: 12, RetryWait: time.Millisecond, MaxBytes: 64 << 10})
	r := rig.r
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
			id, _, err := r.Submit(context.Background(), caller(fmt.Sprint("c", c)), "", ts)
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
			wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
			_, err := r.Wait(wctx, last[len(last)-1])
			cancel()
			require.True(t, err == nil || errors.Is(err, engine.ErrNotFound), "%v", err)
		}
	}
	within(t, advDeadline, "Close among readers", r.Close)
	close(stop)
	within(t, advDeadline, "the readers", readers.Wait)
	require.Positive(t, reads.Load())
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if j, ok := r.Job(id); ok {
			require.False(t, engine.IsLive(j.Status))
			requireSettled(t, rig, id)
		}
	}
	requireNoPanicValue(t, rig.logs.String())
}

// Hooks.Target after a panicked or Goexit-ed fetch gets the fetch's
// duration (issue 10 item 7), and an error.
func TestAdversary_TargetHookAfterPanicHasDuration(t *testing.T) {
	t.Parallel()
	type call struct {
		err error
		d   time.Duration
	}
	calls := make(chan call, 8)
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		start := time.Now()
		for time.Since(start) < time.Millisecond { // spend a measurable moment
			runtime.Gosched()
		}
		switch kind, _ := jobOf(tg.URL); kind {
		case "panic":
			panic(advPanic)
		case "goexit":
			runtime.Goexit()
		}
		return engine.Result{}, nil
	}
	rig := advStart(t, fetch, engine.Config{Hooks: engine.Hooks{Target: func(err error, d time.Duration, _ int) { calls <- call{err, d} }}})
	id, _, err := rig.r.Submit(context.Background(), caller("alice"), "", []engine.Target{tgt("panic", 0), tgt("goexit", 1)})
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	j, err := rig.r.Wait(wctx, id)
	require.NoError(t, err)
	require.Equal(t, engine.StatusFailed, j.Status)
	for range 2 {
		c := recv(t, calls)
		require.Error(t, c.err)
		require.GreaterOrEqual(t, c.d, time.Millisecond)
	}
	requireNoPanicValue(t, rig.logs.String())
}
