package engine_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// stepFetch is a FetchFunc that returns one target per receive on step, and a
// channel that Hooks.Target signals after each store attempt.
type stepper struct {
	onStart func() // nil: none; called as each fetch starts
	step    chan struct{}
	stored  chan error
	result  func(engine.Target) engine.Result // nil: "content of URL"
}

func newStepper() *stepper {
	return &stepper{step: make(chan struct{}), stored: make(chan error, 64)}
}

func (s *stepper) fetch(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
	if s.onStart != nil {
		s.onStart()
	}
	select {
	case <-s.step:
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), engine.ErrCancelled) {
			return engine.Result{}, ctx.Err()
		}
		<-s.step // its job was cancelled: this fetch finishes all the same, when stepped
	}
	if s.result != nil {
		return s.result(tg), nil
	}
	return engine.Result{Content: "content of " + tg.URL}, nil
}

// one lets one fetch return and waits until its outcome was stored (or the
// store failed).
func (s *stepper) one(t *testing.T) {
	t.Helper()
	select {
	case s.step <- struct{}{}:
	case <-time.After(testkit.Deadline): // a failure deadline, for a hung test
		t.Fatal("no fetch was waiting")
	}
	testkit.Recv(t, s.stored)
}

// setupDisk starts a runner on a store in dir ("" in memory) with a
// stepper; once the test has closed it, no line it logged may carry a
// secret.
func setupDisk(t *testing.T, dir string, cfg engine.Config) (*enginetest.Bundle, *stepper) {
	t.Helper()
	st := newStepper()
	var b *enginetest.Bundle
	t.Cleanup(func() { // runs after the runner's and the store's cleanups
		testkit.RequireNoneOf(t, b.Logs.String(), secrets...)
	})
	cfg.Hooks.Target = func(err error, _ time.Duration, _ int) { st.stored <- err }
	b = enginetest.SetupOn(t, enginetest.OpenStore(t, dir), st.fetch, cfg)
	return b, st
}

// requireWarn requires a Warn line about job id.
func requireWarn(t *testing.T, logs *testkit.SyncBuffer, id string) {
	t.Helper()
	for _, l := range logs.Lines() {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "job_id="+id) {
			return
		}
	}
	t.Fatalf("no Warn line with job_id=%s in:\n%s", id, logs.String())
}

// waitSettled waits until the store holds job id settled with status.
func waitSettled(t *testing.T, store *persistence.Store, id, status string) {
	t.Helper()
	testkit.WaitFor(t, "job "+id+" stored "+status+" and settled", func() bool {
		j, err := store.Job(id)
		return err == nil && j.Status == status && j.Settled
	})
	left, err := store.Unsettled()
	require.NoError(t, err)
	for _, j := range left {
		require.NotEqual(t, id, j.ID)
	}
}

// TestRunner_WriteFault injects failing writes at the persistence boundary
// while jobs run: the runner logs Warn with the job id, keeps answering
// Status, never panics, and recovers once writes work again.
func TestRunner_WriteFault(t *testing.T) {
	t.Parallel()
	b, st := setupDisk(t, t.TempDir(), engine.Config{JobsPerCaller: 4})
	var failing atomic.Bool
	b.Store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.ENOSPC
		}
		return nil
	})
	ctx := context.Background()

	a := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}, {URL: secretURL("a", 2)}})
	st.one(t) // a0 stored
	failing.Store(true)
	st.one(t) // a1: its store fails
	requireWarn(t, b.Logs, a)
	j, ts, ok := b.Runner.Status(a)
	require.True(t, ok, "Status keeps answering")
	require.Equal(t, "running", j.Status)
	require.Equal(t, "done", ts[0].Status)

	_, _, err := b.Runner.Submit(ctx, &engine.Caller{Name: "bob", KeySHA256: secretKey}, "", []engine.Target{{URL: secretURL("b", 0)}})
	require.ErrorIs(t, err, syscall.ENOSPC, "a Submit that cannot be stored fails")
	b.Runner.Touch(a)

	failing.Store(false)
	st.one(t) // a2 stored: writes work again
	j, ts = b.WaitStatus(t, a, "done")
	require.Equal(t, 3, j.TargetsDone)
	for i, tg := range ts {
		require.Equal(t, "done", tg.Status, "target %d: an outcome whose write failed is written once writes work", i)
		require.Equal(t, "content of "+secretURL("a", i), tg.Result.Content)
	}
	waitSettled(t, b.Store, a, "done")

	// New jobs run as before.
	c := b.Submit(t, "carol", []engine.Target{{URL: secretURL("c", 0)}})
	st.one(t)
	_, ts = b.WaitStatus(t, c, "done")
	require.Equal(t, "content of "+secretURL("c", 0), ts[0].Result.Content)
	require.Contains(t, b.Logs.String(), "level=WARN")
}

// TestRunner_WriteFaultAtTheEnd: a job whose last writes fail (its last
// target's, or its cancel's) reads its true status meanwhile, and its
// actor keeps what it could not write and writes it once writes work
// again: the job settles (never left running and unsettled until a
// restart), frees its caps and is swept in time.
func TestRunner_WriteFaultAtTheEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status string
		run    func(t *testing.T, b *enginetest.Bundle, st *stepper, id string)
	}{
		{"LastTarget", "done", func(t *testing.T, b *enginetest.Bundle, st *stepper, id string) {
			st.one(t)
		}},
		{"Cancel", "cancelled", func(t *testing.T, b *enginetest.Bundle, st *stepper, id string) {
			require.True(t, b.Runner.Cancel(id))
			st.one(t) // the target in flight is stored after the cancel
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, st := setupDisk(t, t.TempDir(), engine.Config{RetryWait: 5 * time.Millisecond})
			var failing atomic.Bool
			b.Store.SetWriteFault(func() error {
				if failing.Load() {
					return syscall.EROFS
				}
				return nil
			})
			id := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
			if tc.status == "done" {
				st.one(t)
			}
			testkit.WaitFor(t, "a target in flight", func() bool {
				_, ts, _ := b.Runner.Status(id)
				return ts[len(ts)-1].Status == "running" || ts[0].Status == "running"
			})
			failing.Store(true)
			tc.run(t, b, st, id)
			requireWarn(t, b.Logs, id)
			j, _, ok := b.Runner.Status(id)
			require.True(t, ok)
			require.Equal(t, tc.status, j.Status, "Status answers with the job's truth")

			failing.Store(false)
			waitSettled(t, b.Store, id, tc.status)
			j, ts, ok := b.Runner.Status(id)
			require.True(t, ok)
			require.Equal(t, tc.status, j.Status)
			if tc.status == "done" {
				require.Equal(t, "done", ts[1].Status)
				require.Equal(t, "content of "+secretURL("a", 1), ts[1].Result.Content)
			} else {
				require.Equal(t, "done", ts[0].Status, "the target in flight at the cancel")
				require.Equal(t, 1, j.TargetsDone)
			}
			// The job settled: the caps are free, and it is swept in time.
			b.Clock.Advance(engine.DefaultTTL + time.Second)
			c := b.Submit(t, "alice", []engine.Target{{URL: secretURL("c", 0)}})
			_, _, ok = b.Runner.Status(id)
			require.False(t, ok, "swept")
			st.one(t)
			b.WaitStatus(t, c, "done")
		})
	}
}

// TestRunner_WriteFaultTooLarge: a result too large to store whose first
// write failed for another reason (the disk) is stored failed, "result too
// large to store", as when the first write says so, and the job settles
// (it is not kept to be written again, failing as too large on every try).
func TestRunner_WriteFaultTooLarge(t *testing.T) {
	t.Parallel()
	b, st := setupDisk(t, "", engine.Config{RetryWait: 5 * time.Millisecond})
	big := strings.Repeat("x", persistence.MaxResultSize) // its JSON is over the store's cap
	st.result = func(tg engine.Target) engine.Result {
		if strings.HasSuffix(tg.URL, "/0?token=s3cr3t") {
			return engine.Result{Content: big}
		}
		return engine.Result{Content: "small"}
	}
	var failing atomic.Bool
	b.Store.SetWriteFault(func() error {
		if failing.Load() {
			return syscall.ENOSPC
		}
		return nil
	})
	id := b.Submit(t, "alice", []engine.Target{{URL: secretURL("a", 0)}, {URL: secretURL("a", 1)}})
	waitRunning(t, b.Runner, id, 0)
	failing.Store(true)
	st.one(t) // the large result: its write fails (the disk)
	requireWarn(t, b.Logs, id)
	failing.Store(false)
	st.one(t)
	waitSettled(t, b.Store, id, "partial")
	_, ts := b.WaitStatus(t, id, "partial")
	require.Equal(t, "failed", ts[0].Status)
	require.Equal(t, "result too large to store", ts[0].Error)
	require.Equal(t, "small", ts[1].Result.Content)
}

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
	store := enginetest.OpenStore(t, "")
	store.SetWriteFault(f.fault)
	rig := enginetest.SetupOn(t, store, fetch, engine.Config{Workers: 1, JobsPerCaller: 2, RetryWait: time.Millisecond, TTL: 10 * time.Second})
	r := rig.Runner
	ctx := context.Background()
	var ids []string
	submit := func(c string, ts ...engine.Target) (string, bool) {
		t.Helper()
		id, _, err := r.Submit(ctx, enginetest.Caller(c), "", ts)
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
		j := waitJob(t, r, id)
		return j
	}
	if a, ok := submit("alice", tgt("ok", 0), tgt("fail", 1), tgt("ok", 2)); ok {
		require.Equal(t, engine.StatusPartial, wait(a).Status)
		requireReadsAgree(t, r, a)
		rig.Clock.Advance(3 * time.Second)
		r.Touch(a)
		rig.Clock.Advance(5 * time.Second) // the Touch's effect: see TestRunner_TouchAfterEndKeepsJob
		j, ok := r.Job(a)
		require.True(t, ok)
		require.Equal(t, engine.StatusPartial, j.Status)
	}
	if b, ok := submit("bob", tgt("block", 0), tgt("ok", 1)); ok {
		waitRunning(t, r, b, 0)
		var cancelled bool
		returns(t, "Cancel", func() { cancelled = r.Cancel(b) })
		require.True(t, cancelled)
		close(release)
		require.Equal(t, engine.StatusCancelled, wait(b).Status)
		requireReadsAgree(t, r, b)
	} else {
		close(release)
	}
	if c, ok := submit("carol", tgt("ok", 0), tgt("hang", 1)); ok {
		waitRunning(t, r, c, 1)
		requireReadsAgree(t, r, c)
	}
	returns(t, "Close", r.Close)
	for _, id := range ids {
		requireSettled(t, rig, id)
	}
	return f.calls.Load()
}

func TestRunner_WriteFaultAtEveryWrite(t *testing.T) {
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

// TestRunner_DiskFull fills a real disk: a small tmpfs, mounted for the
// test (root only; skipped where mounting is not allowed). A child process
// runs jobs with large results on it until the free space is below the
// runner's reserve (engine.DefaultDiskReserve): there the child holds its
// jobs and answers ErrDiskFull to its submits, and must still be alive
// fillGrace later (it used to die of SIGBUS: Badger writes through mmap,
// its files are now preallocated), when the test kills it. Then the disk
// is made read-only: opening the store is a clear error. Then it is grown:
// the store opens, New reaps, every target the child reported stored is
// there with its exact result, and a new job runs to its end.
func TestRunner_DiskFull(t *testing.T) {
	if os.Getenv(envCrashDir) != "" {
		t.Skip("in a crash child")
	}
	testkit.Long(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	t.Parallel()
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			t.Parallel()
			diskFull(t, durable)
		})
	}
}

// diskFull is TestRunner_DiskFull with the child's runner durable or not.
func diskFull(t *testing.T, durable bool) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	dir := filepath.Join(mnt, "store")
	logFile := filepath.Join(t.TempDir(), "child.log")
	lines, ended := runFillChild(t, dir, mnt, durable, logFile)
	logs, err := os.ReadFile(logFile)
	require.NoError(t, err)
	require.Equal(t, endedKilled, ended, "the child lives on a disk at its reserve; its log ends:\n%s", tail(string(logs), 600))
	require.Contains(t, string(logs), "disk below its reserve", "and says so")
	scanLogText(t, string(logs))
	warns := 0 // Warn lines about store writes (the others are the fetches' panics)
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, `msg="store`) {
			warns++
		}
	}

	// Read-only: a clear error, no panic.
	remount := func(opts string) {
		t.Helper()
		out, err := exec.Command("mount", "-o", "remount,"+opts, mnt).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	remount("ro")
	_, err = persistence.Open(dir)
	require.Error(t, err, "a store on a read-only disk does not open")
	require.ErrorIs(t, err, syscall.EROFS, "and says why")
	roErr := err.Error()

	// Grown: everything reported stored is there; jobs run again.
	remount("rw,size=512m")
	store, err := persistence.Open(dir)
	require.NoError(t, err, "the store opens once the disk has room")
	reported := map[string][]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		idx, err := strconv.Atoi(f[2])
		require.NoError(t, err)
		reported[f[1]] = append(reported[f[1]], idx)
	}
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{MaxBytes: 1 << 40})
	lost := checkCrashStore(t, b.Runner, store, 0, reported)
	require.Zero(t, lost)
	left, err := store.Unsettled()
	require.NoError(t, err)
	require.Empty(t, left)
	id := b.Submit(t, "after", []engine.Target{{URL: secretURL("after", 0)}})
	b.WaitStatus(t, id, "done")
	t.Logf("disk full: the child %s after %d targets reported stored (%d Warn lines about failed store writes before); read-only: %q; grown: 0 of %d targets lost, a new job done",
		ended, len(lines), warns, roErr, len(lines))
}

// endedKilled is how a fill child that outlived its disk's filling ended.
const endedKilled = "ran on past its disk's reserve and was killed"

// runFillChild runs the crash child with large results on dir until it
// dies, or until it has outlived a full disk by fillGrace; it returns the
// "stored" lines and how the child ended.
func runFillChild(t *testing.T, dir, mnt string, durable bool, logFile string) ([]string, string) {
	t.Helper()
	const fillGrace = 3 * time.Second
	logOut, err := os.Create(logFile)
	require.NoError(t, err)
	defer logOut.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunner_CrashAtRandomPoints$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashSeed+"=1", envCrashRound+"=0", envCrashFill+"=1")
	if durable {
		cmd.Env = append(cmd.Env, envCrashDurable+"=1")
	}
	cmd.Stderr = logOut
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var stored []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		rd := bufio.NewReader(stdout)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(l, "stored ") {
				stored = append(stored, strings.TrimSuffix(l, "\n"))
			}
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	var full time.Time
	killed := false
	for !killed {
		select {
		case <-done:
			killed = true // it ended by itself; Wait below says how
			continue
		case <-deadline.C:
			_ = cmd.Process.Kill()
			t.Fatal("the disk never filled")
		case <-tick.C:
		}
		var st syscall.Statfs_t
		require.NoError(t, syscall.Statfs(mnt, &st))
		if full.IsZero() && st.Bavail*uint64(st.Bsize) < engine.DefaultDiskReserve {
			full = time.Now()
		}
		if !full.IsZero() && time.Since(full) > fillGrace {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			<-done
			killed = true
		}
	}
	<-done
	err = cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the child ended: %v", err)
	ws := exit.Sys().(syscall.WaitStatus)
	logs, _ := os.ReadFile(logFile)
	switch {
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		return stored, endedKilled
	case strings.Contains(string(logs), "SIGBUS"):
		return stored, "died of SIGBUS (Badger writes through mmap)"
	}
	return stored, fmt.Sprintf("exited (%v): %s", err, tail(string(logs), 300))
}

// New refuses a DiskReserve as large as the store's whole file system
// (it could never be kept: every submit would be ErrDiskFull for ever).
func TestRunner_DiskReserveBeyondTheDisk(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, t.TempDir())
	r, err := engine.New(store, enginetest.OKFetch, engine.Config{DiskReserve: 1 << 62}, nil)
	require.ErrorIs(t, err, engine.ErrDiskReserve)
	require.Nil(t, r)
}
