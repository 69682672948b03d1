package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

func TestRunner_FetchPanicRestartsWorker(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if name, idx := jobOf(tg.URL); name == "a" && idx == 1 {
			panic("secret panic value " + tg.URL)
		}
		return engine.Result{Content: tg.URL}, nil
	}, engine.Config{Workers: 1})
	id := b.Submit(t, "alice", enginetest.Targets("a", 3))
	_, ts := b.WaitStatus(t, id, "partial")
	require.Equal(t, "done", ts[0].Status)
	require.Equal(t, "failed", ts[1].Status)
	require.Equal(t, "internal error", ts[1].Error)
	require.Equal(t, "done", ts[2].Status, "the job goes on after the panic")

	later := b.Submit(t, "bob", enginetest.Targets("b", 2))
	b.WaitStatus(t, later, "done")

	logs := b.Logs.String()
	require.Contains(t, logs, "worker restarted after a panic", "the supervision strategy restarted the worker")
	require.Contains(t, logs, "runtime/debug.Stack", "the panic is logged with a stack trace")
	require.NotContains(t, logs, "secret panic value")
}

// TestRunner_FetchGoexit: a FetchFunc that ends its goroutine (t.FailNow
// does) is a failed target, "internal error", like a panic; the job goes
// on and the hook is told an error with the time the fetch took.
func TestRunner_FetchGoexit(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/0") {
			time.Sleep(time.Millisecond) // a measurable duration, not a wait
			runtime.Goexit()
		}
		return engine.Result{Content: "ok"}, nil
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	_, ts := b.WaitStatus(t, id, "partial")
	require.Equal(t, "failed", ts[0].Status)
	require.Equal(t, "internal error", ts[0].Error)
	require.Equal(t, "done", ts[1].Status)
	require.Contains(t, b.Logs.String(), "fetch ended its goroutine")
}

// TestRunner_TypedNilTargetError: a nil *TargetError returned as an error
// is a failed target, never a panic of the runner's.
func TestRunner_TypedNilTargetError(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		var te *engine.TargetError
		return engine.Result{}, te
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 1))
	_, ts := b.WaitStatus(t, id, "failed")
	require.Equal(t, "internal error", ts[0].Error)
	require.Equal(t, "", (*engine.TargetError)(nil).Error())
}

// TestRunner_LongErrorsAreCut: an error text or a hint too long to store is
// cut, and the target is stored failed as usual.
func TestRunner_LongErrorsAreCut(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, &engine.TargetError{Msg: strings.Repeat("é", 3<<20), Hint: strings.Repeat("h", 3<<20)}
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	_, ts := b.WaitStatus(t, id, "failed")
	for _, tr := range ts {
		require.LessOrEqual(t, len(tr.Error), engine.MaxErrorBytes)
		require.LessOrEqual(t, len(tr.Hint), engine.MaxHintBytes)
		require.True(t, strings.HasSuffix(tr.Error, "…"))
		require.True(t, strings.HasPrefix(tr.Error, "éé"))
	}
}

type panickyErr struct{}

func (panickyErr) Error() string { panic(enginetest.PanicValue) }

type goexitErr struct{}

func (goexitErr) Error() string { runtime.Goexit(); return "" }

type panickyMarshal struct{}

func (panickyMarshal) MarshalJSON() ([]byte, error) { panic(enginetest.PanicValue) }

func TestRunner_FetchMisbehaving(t *testing.T) {
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
		{"panic", func(context.Context) (engine.Result, error) { panic(enginetest.PanicValue) },
			want{engine.TargetFailed, "internal error", 0, false}},
		{"panicError", func(context.Context) (engine.Result, error) { panic(errors.New(enginetest.PanicValue)) },
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
			clk := testkit.NewClock()
			fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
				if kind, _ := jobOf(tg.URL); kind == "bad" {
					clk.Advance(time.Hour) // past RetryFor for a busy one
					return tc.fetch(ctx)
				}
				return engine.Result{Content: "fine"}, nil
			}
			b := enginetest.Setup(t, fetch, engine.Config{RetryWait: time.Millisecond, RetryFor: time.Minute, TTL: 1000 * time.Hour, Now: clk.Now,
				Hooks: engine.Hooks{Target: func(err error, _ time.Duration, _ int) {
					if err != nil {
						targetErrs.Add(1)
					} else {
						targetOKs.Add(1)
					}
				}}})
			id := b.Submit(t, "alice", []engine.Target{tgt("bad", 0), tgt("ok", 1), tgt("bad", 2)})
			j := waitJob(t, b.Runner, id)
			require.Equal(t, engine.StatusPartial, j.Status)
			require.Equal(t, 3, j.TargetsDone)
			require.Equal(t, 2, j.TargetsFailed)
			_, ts, ok := b.Runner.Status(id)
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
				testkit.RequireNoneOf(t, tt.Error, enginetest.PanicValue)
				require.Nil(t, tt.Result)
				_, ok := b.Runner.Result(id, i)
				require.False(t, ok)
			}
			require.Equal(t, engine.TargetDone, ts[1].Status)
			returns(t, "Close", b.Runner.Close)
			require.EqualValues(t, 2, targetErrs.Load(), "Hooks.Target told an error for each failed target")
			require.EqualValues(t, 1, targetOKs.Load())
			requireSettled(t, b, id)
			testkit.RequireNoneOf(t, b.Logs.String(), enginetest.PanicValue)
		})
	}
}

func TestRunner_ResultTooLargeToStore(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if _, idx := jobOf(tg.URL); idx == 0 {
			return engine.Result{Content: strings.Repeat("x", persistence.MaxResultSize)}, nil // its JSON is over the cap
		}
		return engine.Result{Content: "small"}, nil
	}, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 2))
	_, ts := b.WaitStatus(t, id, "partial")
	require.Equal(t, "failed", ts[0].Status)
	require.Equal(t, "result too large to store", ts[0].Error)
	require.Equal(t, "small", ts[1].Result.Content, "the job goes on")
}

// TestRunner_LargeResultStored: the in-memory store takes results up to
// 16 MiB, as the directory store does: a 2 MiB and a 15 MiB result are
// stored done and read back byte for byte.
func TestRunner_LargeResultStored(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"memory", "dir"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := ""
			if mode == "dir" {
				dir = t.TempDir()
			}
			store := enginetest.OpenStore(t, dir)
			sizes := []int{2 << 20, 15 << 20}
			fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
				_, idx := jobOf(tg.URL)
				return engine.Result{Content: strings.Repeat("<", sizes[idx])}, nil
			}
			rig := enginetest.SetupOn(t, store, fetch, engine.Config{MaxBytes: 1 << 30})
			id := rig.Submit(t, "alice", []engine.Target{tgt("big", 0), tgt("big", 1)})
			j := waitJob(t, rig.Runner, id)
			_, ts, _ := rig.Runner.Targets(id)
			require.Equal(t, engine.StatusDone, j.Status, "targets: %+v / %+v", ts[0].Error, ts[1].Error)
			for i, n := range sizes {
				b, ok := rig.Runner.ResultJSON(id, i)
				require.True(t, ok)
				require.Equal(t, `{"content":"`+strings.Repeat("<", n)+`"}`, string(b))
			}
		})
	}
}
