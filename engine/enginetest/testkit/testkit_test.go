package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTB is a testing.TB that records failures and skips instead of
// reporting them: Fatal and Skip end the calling goroutine as the real ones
// do. Run a check on it with run.
type fakeTB struct {
	testing.TB // the real test: for what fakeTB does not override
	mu         sync.Mutex
	failed     bool
	skipped    bool
	msgs       []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) record(failed, skipped bool, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = f.failed || failed
	f.skipped = f.skipped || skipped
	f.msgs = append(f.msgs, msg)
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.record(true, false, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Error(args ...any) { f.record(true, false, fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.record(true, false, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) { f.record(true, false, fmt.Sprint(args...)); runtime.Goexit() }
func (f *fakeTB) Skipf(format string, args ...any) {
	f.record(false, true, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeTB) Skip(args ...any) { f.record(false, true, fmt.Sprint(args...)); runtime.Goexit() }

// run runs check against a fakeTB on a goroutine of its own (Fatal ends
// it) and returns the fakeTB once check has ended.
func run(t *testing.T, check func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(f)
	}()
	<-done
	return f
}

// shortDeadline makes the waits give up after d for the rest of the test,
// so that a wait that must fail does not take 30 s. Tests that call it do
// not run in parallel.
func shortDeadline(t *testing.T, d time.Duration) {
	old := deadline
	deadline = d
	t.Cleanup(func() { deadline = old })
}

func requireFailed(t *testing.T, f *fakeTB, want string) {
	t.Helper()
	if !f.failed {
		t.Fatalf("the check passed, want it to fail with %q", want)
	}
	if got := strings.Join(f.msgs, "\n"); !strings.Contains(got, want) {
		t.Fatalf("the check failed with %q, want %q", got, want)
	}
}

func requirePassed(t *testing.T, f *fakeTB) {
	t.Helper()
	if f.failed || f.skipped {
		t.Fatalf("the check failed or skipped: %q", f.msgs)
	}
}

func TestClock_StartsAtStartAndAdvances(t *testing.T) {
	t.Parallel()
	c := NewClock()
	if got := c.Now(); !got.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("a new clock reads %v", got)
	}
	c.Advance(90 * time.Minute)
	if got, want := c.Now(), Start.Add(90*time.Minute); !got.Equal(want) {
		t.Fatalf("after Advance the clock reads %v, want %v", got, want)
	}
	c.Advance(-time.Hour)
	if got, want := c.Now(), Start.Add(30*time.Minute); !got.Equal(want) {
		t.Fatalf("after a negative Advance the clock reads %v, want %v", got, want)
	}
	at := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	c.Set(at)
	if got := c.Now(); !got.Equal(at) {
		t.Fatalf("after Set the clock reads %v, want %v", got, at)
	}
}

func TestClock_ConcurrentAdvancesAllCount(t *testing.T) {
	t.Parallel()
	c := NewClock()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), Start.Add(800*time.Second); !got.Equal(want) {
		t.Fatalf("the clock reads %v, want %v", got, want)
	}
}

func TestSyncBuffer_KeepsConcurrentWritesAsLines(t *testing.T) {
	t.Parallel()
	var b SyncBuffer
	if b.Lines() != nil {
		t.Fatalf("an empty buffer has lines %q", b.Lines())
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			for j := range 50 {
				fmt.Fprintf(&b, "writer %d line %d\n", i, j)
			}
		})
	}
	wg.Wait()
	lines := b.Lines()
	if len(lines) != 500 {
		t.Fatalf("got %d lines, want 500", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "writer ") || strings.Contains(l, "\n") {
			t.Fatalf("a line is torn: %q", l)
		}
	}
	fmt.Fprint(&b, "last without newline")
	if got := b.Lines(); got[len(got)-1] != "last without newline" || len(got) != 501 {
		t.Fatalf("the last line without a newline is %q of %d", got[len(got)-1], len(got))
	}
	if !strings.HasSuffix(b.String(), "line 49\nlast without newline") {
		t.Fatalf("String lost the end: %q", b.String())
	}
}

func TestWaitFor_ReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	n := 0
	f := run(t, func(tb testing.TB) {
		WaitFor(tb, "n to reach 5", func() bool {
			mu.Lock()
			defer mu.Unlock()
			n++
			return n >= 5
		})
	})
	requirePassed(t, f)
	if n != 5 {
		t.Fatalf("cond ran %d times, want 5 (it stops once cond holds)", n)
	}
}

func TestWaitFor_FailsNamingWhatWhenTheConditionNeverHolds(t *testing.T) {
	shortDeadline(t, 50*time.Millisecond)
	f := run(t, func(tb testing.TB) { WaitFor(tb, "the moon", func() bool { return false }) })
	requireFailed(t, f, "waiting for the moon")
}

func TestRecv_ReturnsTheValueSent(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	var got int
	f := run(t, func(tb testing.TB) { got = Recv(tb, ch) })
	requirePassed(t, f)
	if got != 7 {
		t.Fatalf("Recv returned %d, want 7", got)
	}
}

func TestRecv_FailsWhenNothingComes(t *testing.T) {
	shortDeadline(t, 50*time.Millisecond)
	f := run(t, func(tb testing.TB) { Recv(tb, make(chan int)) })
	requireFailed(t, f, "waiting for a value")
}

func TestRequireClosed_PassesOnCloseAfterValues(t *testing.T) {
	t.Parallel()
	ch := make(chan int)
	go func() {
		ch <- 1
		ch <- 2
		close(ch)
	}()
	requirePassed(t, run(t, func(tb testing.TB) { RequireClosed(tb, ch) }))
}

func TestRequireClosed_FailsOnAnOpenChannel(t *testing.T) {
	shortDeadline(t, 50*time.Millisecond)
	ch := make(chan int, 1)
	ch <- 1 // a value is not a close
	f := run(t, func(tb testing.TB) { RequireClosed(tb, ch) })
	requireFailed(t, f, "waiting for a channel to close")
}

func TestSignal_WaitReturnsValuesInOrder(t *testing.T) {
	t.Parallel()
	var s Signal[string]
	s.Init(t)
	go func() {
		s.Signal("a")
		s.Signal("b")
	}()
	if got := s.Wait(t); got != "a" {
		t.Fatalf("first Wait got %q", got)
	}
	if got := s.Wait(t); got != "b" {
		t.Fatalf("second Wait got %q", got)
	}
	s.RequireEmpty(t)
}

func TestSignal_NeverSentFails(t *testing.T) {
	shortDeadline(t, 50*time.Millisecond)
	var s Signal[int]
	s.Init(t)
	f := run(t, func(tb testing.TB) { s.Wait(tb) })
	requireFailed(t, f, "waiting for a signal")
}

func TestSignal_RequireEmptyFailsOnAnUnreceivedValue(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	s.Init(t)
	s.Signal(42)
	requireFailed(t, run(t, func(tb testing.TB) { s.RequireEmpty(tb) }), "not waited for: 42")
}

func TestSignal_UninitializedIsInertAndWaitFails(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	s.Signal(1) // does nothing, does not block
	requireFailed(t, run(t, func(tb testing.TB) { s.Wait(tb) }), "before Init")
}

func TestSignal_OverflowFailsTheNextWait(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	s.Init(t)
	for i := range signalBuffer + 3 {
		s.Signal(i) // never blocks
	}
	requireFailed(t, run(t, func(tb testing.TB) { s.Wait(tb) }), "dropped 3 values")
}

func TestGate_WaitBlocksUntilOpen(t *testing.T) {
	t.Parallel()
	g := NewGate()
	released := make(chan error, 2)
	for range 2 {
		go func() { released <- g.Wait(context.Background()) }()
	}
	Recv(t, g.Entered())
	Recv(t, g.Entered())
	if g.Count() != 2 {
		t.Fatalf("Count is %d with two Waits begun", g.Count())
	}
	select {
	case err := <-released:
		t.Fatalf("a Wait returned (%v) before Open", err)
	default:
	}
	g.Open()
	g.Open() // twice is fine
	for range 2 {
		if err := Recv(t, released); err != nil {
			t.Fatalf("Wait after Open: %v", err)
		}
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatalf("Wait on an open gate: %v", err)
	}
	if g.Count() != 3 {
		t.Fatalf("Count is %d after three Waits", g.Count())
	}
}

func TestGate_WaitEndsWithItsContext(t *testing.T) {
	t.Parallel()
	g := NewGate()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Wait(ctx) }()
	Recv(t, g.Entered())
	cancel()
	if err := Recv(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait returned %v, want context.Canceled", err)
	}
}

func TestRequireTier_SkipsUnlessListed(t *testing.T) {
	t.Setenv(TierEnv, "faults, x")
	f := run(t, func(tb testing.TB) { RequireTier(tb, "browser") })
	if !f.skipped || f.failed {
		t.Fatalf("an unlisted tier did not skip: %q", f.msgs)
	}
	if want := "tier browser: set SIFTBATCH_TIER=browser (make test/browser)"; f.msgs[0] != want {
		t.Fatalf("skip line %q, want %q", f.msgs[0], want)
	}
	t.Setenv(TierEnv, "faults,browser")
	requirePassed(t, run(t, func(tb testing.TB) { RequireTier(tb, "browser") }))
}

func TestLong_SkipsOnlyUnderShort(t *testing.T) {
	t.Parallel()
	f := run(t, func(tb testing.TB) { Long(tb) })
	if f.skipped != testing.Short() || f.failed {
		t.Fatalf("Long skipped=%v under -short=%v: %q", f.skipped, testing.Short(), f.msgs)
	}
	if testing.Short() && f.msgs[0] != "long: multi-process; run without -short" {
		t.Fatalf("skip line %q", f.msgs[0])
	}
}

func TestRequireNoneOf_NamesTheSecretFound(t *testing.T) {
	t.Parallel()
	logs := "level=INFO msg=stored job=abc\nlevel=ERROR msg=fetch url=http://secret.example/x\n"
	requirePassed(t, run(t, func(tb testing.TB) { RequireNoneOf(tb, logs, "", "alice-key") }))
	f := run(t, func(tb testing.TB) { RequireNoneOf(tb, logs, "alice-key", "secret.example") })
	requireFailed(t, f, `"secret.example"`)
}

// DiskSyncRate measures a positive rate and leaves nothing in the
// directory; a directory it cannot write is an error.
func TestDiskSyncRate_MeasuresAndCleansUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rate, err := DiskSyncRate(dir, 0)
	if err != nil || rate <= 0 {
		t.Fatalf("DiskSyncRate = %v, %v; want a positive rate", rate, err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left %d files in the directory", len(left))
	}
	if _, err := DiskSyncRate(filepath.Join(dir, "missing"), 0); err == nil {
		t.Fatal("DiskSyncRate in a missing directory: no error")
	}
}

// TestRefusedAddr_RefusesAndCannotBeTaken: a connection is refused, and a
// listener cannot bind the port while the test runs.
func TestRefusedAddr_RefusesAndCannotBeTaken(t *testing.T) {
	t.Parallel()
	addr := RefusedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatalf("dial %s: connected, want refused", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		_ = l.Close()
		t.Errorf("listen on %s: bound, want address in use", addr)
	}
}

// TestRunDir: each call makes a directory of its own, named after this
// process; a directory of the prefix left by a process that is gone is
// removed, one of a process that runs (this one) is kept, and so is one
// named PREFIX-N without a random part (os.MkdirTemp's shape, whose N is
// random, not a PID: another run's live directory of an older layout).
func TestRunDir(t *testing.T) {
	prefix := "siftbatch-testkit-rundir-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		paths, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*"))
		for _, p := range paths {
			_ = os.RemoveAll(p)
		}
	})
	// A dead process: a child that has exited and been reaped.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(os.TempDir(), prefix+"-"+strconv.Itoa(cmd.Process.Pid)+"-1")
	if err := os.MkdirAll(filepath.Join(stale, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	notRun := filepath.Join(os.TempDir(), prefix+"-"+strconv.Itoa(cmd.Process.Pid))
	if err := os.MkdirAll(notRun, 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := RunDir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunDir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !strings.HasPrefix(filepath.Base(a), prefix+"-"+strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("run directories %s and %s: want two, named after pid %d", a, b, os.Getpid())
	}
	for _, d := range []string{a, b} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead run's directory %s is still there (%v)", stale, err)
	}
	if _, err := os.Stat(notRun); err != nil {
		t.Errorf("%s, not a run directory, was removed (%v)", notRun, err)
	}
}
