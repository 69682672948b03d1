package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestRunner_RestartOnFullDiskLeftLive: a runner restarted on a full disk
// after a crash that left a job running (the store's files as the crash
// left them, copied while its runner ran). The store opens read-only, so
// New cannot fail that job "restart" in the store: New still starts, every
// read answers the job failed "restart" (Wait does not wait for it), its
// stored target reads, Submit answers ErrDiskFull. Once there is room the
// next Submit fails the job in the store first, then runs. Root only (a
// tmpfs).
func TestRunner_RestartOnFullDiskLeftLive(t *testing.T) {
	testkit.Long(t)
	mnt := testkit.MountTmpfs(t, 128<<20)
	ctx := context.Background()
	src := t.TempDir()
	b, st := setupDisk(t, src, engine.Config{})
	id := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	st.one(t) // target 0 stored; target 1's fetch waits: the job is running
	testkit.WaitFor(t, "target 1's fetch to start", func() bool {
		_, ts, ok := b.Runner.Status(id)
		return ok && ts[1].Status == "running"
	})
	dir := filepath.Join(mnt, "store")
	copyStoreFiles(t, src, dir) // the crash: Badger has the store open
	filler := testkit.FillDisk(t, mnt, 0)

	store, err := persistence.Open(dir)
	require.NoError(t, err)
	require.True(t, store.OpenedFull())
	r2 := enginetest.SetupOn(t, store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: "room again"}, nil
	}, engine.Config{DiskReserve: 1})
	r := r2.Runner

	j, err := r.Lookup(id)
	require.NoError(t, err)
	require.Equal(t, "failed", j.Status, "a job no actor will ever run reads as the reap will leave it")
	require.Equal(t, "restart", j.Error)
	wctx, cancel := context.WithTimeout(ctx, testkit.Deadline) // a failure deadline: Wait must not wait
	defer cancel()
	j, err = r.Wait(wctx, id)
	require.NoError(t, err)
	require.Equal(t, "failed", j.Status)
	_, ts, ok := r.Status(id)
	require.True(t, ok)
	require.Equal(t, "done", ts[0].Status)
	require.Equal(t, "content of "+secretURL("a", 0), ts[0].Result.Content)
	jobs, _, err := r.List("alice", engine.ListOptions{Status: "failed"})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	stored, err := store.Job(id)
	require.NoError(t, err)
	require.Equal(t, "running", stored.Status, "not written: the disk is full")
	_, _, err = r.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.ErrorIs(t, err, engine.ErrDiskFull)

	require.NoError(t, os.Remove(filler))
	_, err = store.MeasureDisk()
	require.NoError(t, err)
	nid, _, err := r.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.NoError(t, err, "room again: the submit fails the left job in the store, then runs")
	stored, err = store.Job(id)
	require.NoError(t, err)
	require.Equal(t, "failed", stored.Status)
	require.Equal(t, "restart", stored.Error)
	require.True(t, stored.Settled)
	j, err = r.Wait(wctx, nid)
	require.NoError(t, err)
	require.Equal(t, "done", j.Status)
	require.Contains(t, r2.Logs.String(), "the jobs a previous run left live are failed once the disk has room")
}

// copyStoreFiles copies the files of the store in src to dst, as a crash of
// the process that has it open would leave them (its writes are in the
// page cache, so in what a read sees).
func copyStoreFiles(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	es, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range es {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644))
	}
}

// TestRunner_DiskFillsAfterOpenLeftLive: a durable runner restarted after
// a crash that left a job running, whose disk another process fills after
// the store opened for writing and before New fails that job "restart":
// New does not wait for room (a race TestAdv36d_DiskFillsDuringRestart
// plays over a real serve, which once, under a CPU hog, did not listen
// within 30 s; this is not that cause: it passes). It starts;
// the job reads failed "restart"; once there is room a submit fails the
// job in the store, then runs. Root only (a tmpfs).
func TestRunner_DiskFillsAfterOpenLeftLive(t *testing.T) {
	testkit.Long(t)
	mnt := testkit.MountTmpfs(t, 128<<20)
	ctx := context.Background()
	src := t.TempDir()
	b, st := setupDisk(t, src, engine.Config{})
	id := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	st.one(t)
	testkit.WaitFor(t, "target 1's fetch to start", func() bool {
		_, ts, ok := b.Runner.Status(id)
		return ok && ts[1].Status == "running"
	})
	dir := filepath.Join(mnt, "store")
	copyStoreFiles(t, src, dir) // the crash

	store, err := persistence.OpenWith(dir, persistence.Options{Durable: true})
	require.NoError(t, err)
	require.False(t, store.OpenedFull(), "open for writing: the disk had room")
	t.Cleanup(func() { _ = store.Close() })
	filler := testkit.FillDisk(t, mnt, 0) // another process fills it now
	_, err = store.MeasureDisk()
	require.NoError(t, err)

	started := make(chan *enginetest.Bundle, 1)
	go func() {
		started <- enginetest.SetupOn(t, store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			return engine.Result{Content: "room again"}, nil
		}, engine.Config{DiskReserve: 1, Durability: engine.DurabilitySync})
	}()
	r := testkit.Recv(t, started).Runner // New returns: it does not wait for room
	j, err := r.Lookup(id)
	require.NoError(t, err)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "restart", j.Error)
	_, _, err = r.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.ErrorIs(t, err, engine.ErrDiskFull)

	require.NoError(t, os.Remove(filler))
	_, err = store.MeasureDisk()
	require.NoError(t, err)
	_, _, err = r.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.NoError(t, err, "room again: the submit fails the left job in the store, then runs")
	stored, err := store.Job(id)
	require.NoError(t, err)
	require.Equal(t, "failed", stored.Status)
	require.Equal(t, "restart", stored.Error)
}
