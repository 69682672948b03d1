package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/stretchr/testify/require"
)

// TestRunner_LogsCarryNoURL runs failures, panics, retries and cancels with
// every log line of the runner, Badger and protoactor captured at the lowest
// level, and checks that no URL, host, path or panic value appears.
func TestRunner_LogsCarryNoURL(t *testing.T) {
	t.Parallel()
	const host = "secret-host.example"
	var busy atomic.Int32
	release := make(chan struct{})
	fetch := func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch {
		case strings.Contains(tg.URL, "panic"):
			panic("panic value " + tg.URL)
		case strings.Contains(tg.URL, "fail"):
			return engine.Result{}, fmt.Errorf("get %s: connection refused", tg.URL)
		case strings.Contains(tg.URL, "notfound"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "404 at " + tg.URL, Hint: "hint " + tg.URL}
		case strings.Contains(tg.URL, "busy") && busy.Add(1) <= 2:
			return engine.Result{}, fmt.Errorf("%s answered 429: %w", tg.URL, engine.ErrRetryLater)
		case strings.Contains(tg.URL, "hang"):
			<-ctx.Done()
			return engine.Result{}, ctx.Err()
		case strings.Contains(tg.URL, "slow"):
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return engine.Result{Content: "page " + tg.URL, Meta: map[string]any{"url": tg.URL}}, nil
	}
	b := setup(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 8, RetryWait: time.Millisecond, MaxBytes: 400})
	url := func(kind string, i int) engine.Target {
		return engine.Target{URL: fmt.Sprintf("https://%s/%s/path-%d?token=s3cr3t", host, kind, i)}
	}
	mixed := b.submit(t, "alice", []engine.Target{url("ok", 0), url("panic", 1), url("fail", 2), url("notfound", 3), url("busy", 4)})
	slow := b.submit(t, "alice", []engine.Target{url("slow", 0), url("ok", 1)})
	// Its rows are past MaxBytes: it may be evicted as soon as it ends (the
	// eviction's lines are logged too), so wait for the hook.
	waitFor(t, "the mixed job to end partial", func() bool { return b.hooks.job("partial") == 1 })
	waitFor(t, "slow in flight", func() bool {
		_, ts, _ := b.r.Status(slow)
		return ts[0].Status == "running"
	})
	require.True(t, b.r.Cancel(slow))
	close(release)
	_, _, _ = b.r.Submit(context.Background(), caller("alice"), "", []engine.Target{url("ok", 0), url("panic", 1), url("fail", 2), url("notfound", 3), url("busy", 4)})
	b.r.Status("no-such-job")
	b.r.Touch(mixed)
	queued := b.submit(t, "bob", []engine.Target{url("hang", 9), url("ok", 10)})
	b.r.Close()
	j, _, _ := b.r.Status(queued)
	require.Equal(t, "shutdown", j.Error)

	logs := b.logs.String()
	require.NotEmpty(t, logs)
	require.Contains(t, logs, "lib=protoactor", "protoactor's lines are captured")
	require.Contains(t, logs, "lib=badger", "Badger's lines are captured")
	for _, secret := range []string{host, "secret-host", "path-", "s3cr3t", "https://", "panic value", "connection refused"} {
		require.NotContains(t, logs, secret)
	}
}
