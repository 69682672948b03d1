package engine_test

import (
	"context"
	"fmt"
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

// TestRunner_DiskReserve: below the disk's reserve (a statfs that says so)
// Submit returns ErrDiskFull (an idempotent resubmit of a job that exists
// is answered with it; a job of too many targets is ErrTooManyTargets),
// the running job's target in flight is stored
// and no next target starts (the job stays running, the target pending,
// nothing failed), reads and Cancel work; once there is room the held job
// goes on by itself, and Submit works again.
func TestRunner_DiskReserve(t *testing.T) {
	t.Parallel()
	b, st := setupDisk(t, t.TempDir(), engine.Config{DiskReserve: 1 << 20, RetryWait: 5 * time.Millisecond, JobsPerCaller: 2})
	var free atomic.Int64
	free.Store(1 << 30)
	b.Store.SetDiskStatfs(func(string) (int64, error) { return free.Load(), nil })
	_, err := b.Store.MeasureDisk()
	require.NoError(t, err)
	var startedFull atomic.Int64 // fetches that started below the reserve
	started := make(chan struct{}, 8)
	st.onStart = func() {
		if b.Store.DiskFull() {
			startedFull.Add(1)
		}
		started <- struct{}{}
	}
	ctx := context.Background()

	a := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	testkit.Recv(t, started) // a0's fetch has started, with room
	free.Store(1 << 10)
	d, err := b.Store.MeasureDisk()
	require.NoError(t, err)
	require.True(t, d.Full)
	require.Equal(t, d, b.Runner.Disk())

	_, _, err = b.Runner.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.ErrorIs(t, err, engine.ErrDiskFull)
	id, reused, err := b.Runner.Submit(ctx, &engine.Caller{Name: "alice", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	require.NoError(t, err, "a resubmit of a job that exists writes nothing: answered below the reserve")
	require.True(t, reused)
	require.Equal(t, a, id)
	_, _, err = b.Runner.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", enginetest.Targets("many", engine.DefaultTargetsPerJob+1))
	require.ErrorIs(t, err, engine.ErrTooManyTargets, "a job that can never be is refused as such, whatever the disk")
	st.one(t) // a0, in flight when the disk went below its reserve: stored
	testkit.WaitFor(t, "the supervisor to hold the jobs", func() bool {
		return strings.Contains(b.Logs.String(), "targets held: the store's disk is below its reserve")
	})
	j, ts, ok := b.Runner.Status(a)
	require.True(t, ok)
	require.Equal(t, "running", j.Status)
	require.Equal(t, "done", ts[0].Status)
	require.Equal(t, "pending", ts[1].Status, "held, not failed")
	jobs, _, err := b.Runner.List("alice", engine.ListOptions{})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "lists work")

	free.Store(1 << 30)
	_, err = b.Store.MeasureDisk()
	require.NoError(t, err)
	st.one(t) // a1 starts by itself once there is room
	b.WaitStatus(t, a, "done")
	c := b.Submit(t, "carol", []engine.Target{{URL: secretURL("c", 0)}})
	st.one(t)
	b.WaitStatus(t, c, "done")
	require.Zero(t, startedFull.Load(), "no target started below the reserve")
}

// TestRunner_DurableCancelOnFullDisk: on a durable runner whose disk has
// no room for a write (a statfs below the floor: the store sends Badger
// nothing), a cancel is answered at once, refused with ErrDiskFull, and
// nothing changes: for a job whose target write the store holds (it waits
// for it, storing) and for a job waiting its turn. Once there is room the
// held write lands and a cancel goes through.
func TestRunner_DurableCancelOnFullDisk(t *testing.T) {
	t.Parallel()
	b, st := setupDisk(t, t.TempDir(), engine.Config{DiskReserve: 1 << 20, RetryWait: 5 * time.Millisecond,
		JobsPerCaller: 2, Durability: engine.DurabilitySync})
	var free atomic.Int64
	free.Store(1 << 30)
	b.Store.SetDiskStatfs(func(string) (int64, error) { return free.Load(), nil })
	_, err := b.Store.MeasureDisk()
	require.NoError(t, err)
	started := make(chan struct{}, 8)
	st.onStart = func() { started <- struct{}{} }

	a := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	testkit.Recv(t, started)
	st.one(t)                                                            // a0 stored
	testkit.Recv(t, started)                                             // a1 is being fetched
	q := b.Submit(t, "alice", []engine.Target{{URL: secretURL("q", 0)}}) // waits for the worker
	free.Store(1 << 10)
	_, err = b.Store.MeasureDisk()
	require.NoError(t, err)
	retries := b.Store.WriteRetries()
	stepOnce(t, st) // a1's outcome meets the full disk: held, the job waits for it
	testkit.WaitFor(t, "a1's write held", func() bool { return b.Store.WriteRetries() > retries })

	for _, id := range []string{a, q} {
		ok, err := b.Runner.TryCancel(id)
		require.False(t, ok)
		require.ErrorIs(t, err, engine.ErrDiskFull, "job %s: refused at once, naming the full disk", id)
		require.False(t, b.Runner.Cancel(id))
		j, ok := b.Runner.Job(id)
		require.True(t, ok)
		require.True(t, engine.IsLive(j.Status), "job %s: nothing changed (%s)", id, j.Status)
		stored, err := b.Store.Job(id)
		require.NoError(t, err)
		require.True(t, engine.IsLive(stored.Status), "job %s: not stored cancelled", id)
	}

	free.Store(1 << 30)
	_, err = b.Store.MeasureDisk()
	require.NoError(t, err)
	require.NoError(t, testkit.Recv(t, st.stored), "a1 stored once there is room")
	b.WaitStatus(t, a, "done")
	testkit.Recv(t, started) // q0 is being fetched
	ok, err := b.Runner.TryCancel(q)
	require.NoError(t, err)
	require.True(t, ok, "room again: the cancel goes through")
	stored, err := b.Store.Job(q)
	require.NoError(t, err)
	require.Equal(t, "cancelled", stored.Status, "acknowledged: stored (and synced) before the answer")
	stepOnce(t, st) // q0 finishes; its outcome settles the cancelled job
	waitSettled(t, b.Store, q, "cancelled")
}

// stepOnce lets one fetch return, without waiting for its outcome.
func stepOnce(t *testing.T, st *stepper) {
	t.Helper()
	select {
	case st.step <- struct{}{}:
	case <-time.After(testkit.Deadline): // a failure deadline, for a hung test
		t.Fatal("no fetch was waiting")
	}
}

// TestRunner_DurableCancelWhileItsWriteIsHeld: a durable job's target
// write fails for want of room though no measure said the disk is full
// (another process filled it since: a write fault here), so the store
// holds it and the job waits for it. A cancel is refused at once, whether
// it comes before the job hears that its write is held or after, and
// nothing changes; once writes work the write lands and a cancel goes
// through.
func TestRunner_DurableCancelWhileItsWriteIsHeld(t *testing.T) {
	t.Parallel()
	b, st := setupDisk(t, t.TempDir(), engine.Config{RetryWait: 5 * time.Millisecond, Durability: engine.DurabilitySync})
	started := make(chan struct{}, 8)
	st.onStart = func() { started <- struct{}{} }
	a := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	testkit.Recv(t, started)
	var full atomic.Bool
	full.Store(true)
	b.Store.SetWriteFault(func() error {
		if full.Load() {
			return fmt.Errorf("%w: filled by another process", persistence.ErrDiskFull)
		}
		return nil
	})
	retries := b.Store.WriteRetries()
	stepOnce(t, st) // a0's outcome meets the full disk: held, the job waits for it
	testkit.WaitFor(t, "a0's write held", func() bool { return b.Store.WriteRetries() > retries })
	for range 2 {
		ok, err := b.Runner.TryCancel(a)
		require.False(t, ok)
		require.ErrorIs(t, err, engine.ErrDiskFull, "refused at once")
	}
	j, ok := b.Runner.Job(a)
	require.True(t, ok)
	require.Equal(t, "running", j.Status, "nothing changed")

	full.Store(false)
	require.NoError(t, testkit.Recv(t, st.stored), "a0 stored once writes work")
	testkit.Recv(t, started) // a1 is being fetched
	ok, err := b.Runner.TryCancel(a)
	require.NoError(t, err)
	require.True(t, ok)
	stepOnce(t, st)
	waitSettled(t, b.Store, a, "cancelled")
}

// TestRunner_DurableStartNotStoredAnswersCancel: when a durable job's turn
// comes its running row cannot be stored (the disk filled since the last
// measure: a write fault here). The job is not started: it stays queued,
// out of the rotation for RetryWait, answers a Cancel at once (refused
// with ErrDiskFull, nothing changed), and starts by itself once writes
// work. Before, its actor waited inside the held write for the disk, and
// a cancel got no answer until the runner's request timeout
// (TestServe_DiskFull, durable, the disk filled by another process: a
// DELETE answered 503 after a minute).
func TestRunner_DurableStartNotStoredAnswersCancel(t *testing.T) {
	t.Parallel()
	b, st := setupDisk(t, t.TempDir(), engine.Config{RetryWait: 5 * time.Millisecond, Durability: engine.DurabilitySync, Workers: 1})
	started := make(chan struct{}, 8)
	st.onStart = func() { started <- struct{}{} }
	a := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}})
	testkit.Recv(t, started) // a0 holds the only worker
	c := b.Submit(t, "bob", []engine.Target{{URL: secretURL("c", 0)}})
	var full atomic.Bool
	full.Store(true)
	b.Store.SetWriteFault(func() error {
		if full.Load() {
			return fmt.Errorf("%w: filled by another process", persistence.ErrDiskFull)
		}
		return nil
	})
	stepOnce(t, st) // a0's outcome meets the full disk: held; the worker goes to c
	testkit.WaitFor(t, "c's turn came and it was not started", func() bool {
		for _, l := range b.Logs.Lines() {
			if strings.Contains(l, "job not started") && strings.Contains(l, "job_id="+c) {
				return true
			}
		}
		return false
	})
	for range 2 {
		ok, err := b.Runner.TryCancel(c)
		require.False(t, ok)
		require.ErrorIs(t, err, engine.ErrDiskFull, "refused at once")
	}
	j, ok := b.Runner.Job(c)
	require.True(t, ok)
	require.Equal(t, "queued", j.Status, "nothing changed")

	full.Store(false)
	require.NoError(t, testkit.Recv(t, st.stored), "a0 stored once writes work")
	testkit.Recv(t, started) // c0 is fetched: c started by itself
	stepOnce(t, st)
	waitSettled(t, b.Store, a, "done")
	waitSettled(t, b.Store, c, "done")
}
