package engine_test

// The helpers every test file of package engine shares; the setup is
// enginetest.Setup.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// jobOf returns the job name and the target index of a URL that
// enginetest.Targets or tgt made.
func jobOf(u string) (string, int) {
	parts := strings.Split(strings.TrimPrefix(u, "http://h/"), "/")
	var idx int
	fmt.Sscan(parts[1], &idx)
	return parts[0], idx
}

// tgt returns target i of a job named kind: http://h/kind/i, the URL
// enginetest.Targets gives it, for fetches that act by kind (jobOf).
func tgt(kind string, i int) engine.Target {
	return engine.Target{URL: fmt.Sprintf("http://h/%s/%d", kind, i)}
}

// requireSettled checks a job after Close: every read agrees and none
// reads it live, and the store holds it terminal.
func requireSettled(t *testing.T, b *enginetest.Bundle, id string) engine.Job {
	t.Helper()
	j, ok := b.Runner.Job(id)
	require.True(t, ok, "job %s readable", id)
	require.False(t, engine.IsLive(j.Status), "job %s reads %s after Close", id, j.Status)
	js, ts, ok := b.Runner.Status(id)
	require.True(t, ok)
	jt, tt, ok := b.Runner.Targets(id)
	require.True(t, ok)
	require.Equal(t, j, js, "Job and Status agree")
	require.Equal(t, j, jt, "Job and Targets agree")
	require.Len(t, tt, len(ts))
	for i := range ts {
		require.Equal(t, ts[i].Status, tt[i].Status, "target %d", i)
		require.Equal(t, ts[i].Error, tt[i].Error, "target %d", i)
		require.NotEqual(t, engine.TargetRunning, ts[i].Status, "target %d reads running after Close", i)
	}
	rec, err := b.Store.Job(id)
	require.NoError(t, err)
	require.False(t, persistence.IsLive(rec.Status), "job %s is stored %s after Close", id, rec.Status)
	require.Equal(t, j.Status, rec.Status, "the store and the reads agree")
	return j
}

// requireReadsAgree checks that Job, Targets and Status give the same job
// (a read in between may see a later state: retried until they agree).
func requireReadsAgree(t *testing.T, r *engine.Runner, id string) {
	t.Helper()
	testkit.WaitFor(t, "Job, Targets and Status to agree", func() bool {
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

// jobIDs returns the ids of jobs, in order.
func jobIDs(jobs []engine.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// waitJob waits until job id has ended (Runner.Wait, failing the test
// after testkit.Deadline) and returns it.
func waitJob(t *testing.T, r *engine.Runner, id string) engine.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	j, err := r.Wait(ctx, id)
	require.NoError(t, err, "Wait for job %s", id)
	return j
}

// waitJobs waits until each of ids has ended.
func waitJobs(t *testing.T, r *engine.Runner, ids ...string) {
	t.Helper()
	for _, id := range ids {
		waitJob(t, r, id)
	}
}

// returns runs f on a goroutine of its own and fails the test, naming
// what, if f has not returned within testkit.Deadline: a call that hangs
// fails its own test, named, rather than the whole package at go test's
// -timeout. f keeps running if it overruns (the test fails anyway); f must
// not call t.FailNow itself.
func returns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	testkit.WaitFor(t, what+" to return", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}

// waitRunning waits until target idx of job id reads running: its fetch
// has begun.
func waitRunning(t *testing.T, r *engine.Runner, id string, idx int) {
	t.Helper()
	testkit.WaitFor(t, fmt.Sprintf("job %s's target %d running", id, idx), func() bool {
		_, ts, ok := r.Targets(id)
		return ok && len(ts) > idx && ts[idx].Status == engine.TargetRunning
	})
}
