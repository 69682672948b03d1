package engine_test

import (
	"bytes"
	"context"
	"fmt"
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

// The reliability tests (crash, disk trouble, load) put these in every URL,
// caller key and panic value they make, and scan every log line for them:
// log lines carry job ids, counts and statuses, never a URL, a host, a key or
// a panic value.
const (
	secretHost  = "secret-host.example"
	secretKey   = "KEY-5ecret-sha256-0f0f"
	secretPanic = "panic value 5ecret"
)

// secretURL is a URL full of secrets: host, path and query.
func secretURL(job string, idx int) string {
	return fmt.Sprintf("https://%s/path-%s/%d?token=s3cr3t", secretHost, job, idx)
}

// secrets are the strings no log line may contain.
var secrets = []string{secretHost, "secret-host", "path-", "s3cr3t", "https://", secretKey, "5ecret"}

// logScanner is a log sink that keeps no lines (for runs that log too much
// to keep): it counts them and records the first few that carry a secret.
// Safe for concurrent writes (a slog handler writes one record per Write).
type logScanner struct {
	mu    sync.Mutex
	lines int
	leaks []string
}

func (s *logScanner) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines += bytes.Count(p, []byte{'\n'})
	if len(s.leaks) < 5 {
		for _, sec := range secrets {
			if bytes.Contains(p, []byte(sec)) {
				s.leaks = append(s.leaks, string(p))
				break
			}
		}
	}
	return len(p), nil
}

// check fails t if a line carried a secret, and returns the lines scanned.
func (s *logScanner) check(t *testing.T) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leaks) > 0 {
		t.Fatalf("%d+ log lines carry a secret, the first:\n%s", len(s.leaks), strings.Join(s.leaks, ""))
	}
	return s.lines
}

// scanLogText checks a whole log (a child process's stderr) for secrets and
// returns its lines.
func scanLogText(t *testing.T, logs string) int {
	t.Helper()
	testkit.RequireNoneOf(t, logs, secrets...)
	return strings.Count(logs, "\n")
}

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
	b := enginetest.Setup(t, fetch, engine.Config{Workers: 2, JobsPerCaller: 8, RetryWait: time.Millisecond, MaxBytes: 400})
	url := func(kind string, i int) engine.Target {
		return engine.Target{URL: fmt.Sprintf("https://%s/%s/path-%d?token=s3cr3t", host, kind, i)}
	}
	mixed := b.Submit(t, "alice", []engine.Target{url("ok", 0), url("panic", 1), url("fail", 2), url("notfound", 3), url("busy", 4)})
	slow := b.Submit(t, "alice", []engine.Target{url("slow", 0), url("ok", 1)})
	// Its rows are past MaxBytes: it may be evicted as soon as it ends (the
	// eviction's lines are logged too), so wait for the hook.
	testkit.WaitFor(t, "the mixed job to end partial", func() bool { return b.Hooks.Job("partial") == 1 })
	waitRunning(t, b.Runner, slow, 0)
	require.True(t, b.Runner.Cancel(slow))
	close(release)
	_, _, _ = b.Runner.Submit(context.Background(), enginetest.Caller("alice"), "", []engine.Target{url("ok", 0), url("panic", 1), url("fail", 2), url("notfound", 3), url("busy", 4)})
	b.Runner.Status("no-such-job")
	b.Runner.Touch(mixed)
	queued := b.Submit(t, "bob", []engine.Target{url("hang", 9), url("ok", 10)})
	b.Runner.Close()
	j, _, _ := b.Runner.Status(queued)
	require.Equal(t, "shutdown", j.Error)

	logs := b.Logs.String()
	require.NotEmpty(t, logs)
	require.Contains(t, logs, "lib=protoactor", "protoactor's lines are captured")
	require.Contains(t, logs, "lib=badger", "Badger's lines are captured")
	for _, secret := range []string{host, "secret-host", "path-", "s3cr3t", "https://", "panic value", "connection refused"} {
		require.NotContains(t, logs, secret)
	}
}

// TestRunner_ReadsOfAClosedStoreWarnOnlyWhileRunning: a store closed
// under a running runner is a failure, and each read says so at Warn;
// once the runner is closed too, reads of its closed store are normal use
// (a dashboard still polling) and log nothing.
func TestRunner_ReadsOfAClosedStoreWarnOnlyWhileRunning(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("alice", 1))
	b.WaitSettled(t, id)
	require.NoError(t, b.Store.Close())
	_, ok := b.Runner.Job(id)
	require.False(t, ok)
	require.Contains(t, b.Logs.String(), `level=WARN msg="read job" job_id=`+id+` err="store closed"`)

	b.Runner.Close()
	before := len(b.Logs.Lines())
	b.Runner.Job(id)
	b.Runner.Status(id)
	b.Runner.Targets(id)
	b.Runner.ResultJSON(id, 0)
	b.Runner.Touch(id)
	for _, l := range b.Logs.Lines()[before:] {
		require.NotContains(t, l, "level=WARN")
		require.NotContains(t, l, "level=ERROR")
	}
}
