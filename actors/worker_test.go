package actors

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

func TestWorker_Fetch(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.Fetch = func(_ context.Context, payload any, idx int) Outcome {
		return Outcome{Result: []byte(payload.(string))}
	}
	job, jobPID := ts.spawnProbe(t)
	w := ts.sys.Root.Spawn(props(newWorker(ts.cfg), nil))
	defer ts.stop(t, w)

	ts.sys.Root.Send(w, &fetch{job: jobPID, jobID: "j", idx: 3, payload: `{"content":"x"}`})
	got := next[*fetched](t, job)
	require.Equal(t, 3, got.idx)
	require.Equal(t, w, got.worker)
	require.Equal(t, `{"content":"x"}`, string(got.outcome.Result))
	require.NoError(t, got.outcome.Err)
}

// TestWorker_PanicRestartedBySupervision drives a worker under a probe
// parent that uses the supervisor's strategy: the worker does not recover
// the panic; the strategy restarts it and answers the job.
func TestWorker_PanicRestartedBySupervision(t *testing.T) {
	ts := newTestSystem(t)
	ts.cfg.Fetch = func(_ context.Context, payload any, _ int) Outcome {
		if payload == "panic" {
			panic("boom")
		}
		return Outcome{Result: []byte("ok")}
	}
	var made atomic.Int32
	producer := func() actor.Actor { made.Add(1); return newWorker(ts.cfg)() }
	job, jobPID := ts.spawnProbe(t)
	workers := make(chan *actor.PID, 1)
	parent := ts.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			workers <- ctx.Spawn(props(producer, nil))
		}
	}, actor.WithSupervisor(&supervisionStrategy{cfg: ts.cfg})))
	defer ts.stop(t, parent)
	w := <-workers

	ts.sys.Root.Send(w, &fetch{job: jobPID, jobID: "j", idx: 1, payload: "panic"})
	got := next[*fetched](t, job)
	require.Equal(t, 1, got.idx)
	require.Equal(t, internalError, got.outcome.Msg)
	require.ErrorIs(t, got.outcome.Err, errInternal)

	ts.sys.Root.Send(w, &fetch{job: jobPID, jobID: "j", idx: 2, payload: "fine"})
	got = next[*fetched](t, job)
	require.Equal(t, "ok", string(got.outcome.Result), "the same worker serves again")
	require.Equal(t, int32(2), made.Load(), "the strategy restarted the worker: a new instance")
}
