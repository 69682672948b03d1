package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// openRunner opens a runner on its own store in dir with a fake clock's
// config, and closes it when the test ends (again: Close is idempotent).
func openRunner(t *testing.T, dir string, fetch engine.FetchFunc) *engine.Runner {
	t.Helper()
	r, err := engine.Open(dir, fetch, engine.Config{Now: testkit.NewClock().Now}, nil)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(r.Close)
	return r
}

// waitDone submits n targets for caller and waits until the job is done.
func waitDone(t *testing.T, r *engine.Runner, caller string, n int) string {
	t.Helper()
	ctx := context.Background()
	id, _, err := r.Submit(ctx, enginetest.Caller(caller), "", enginetest.Targets(caller, n))
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	j, err := r.Wait(ctx, id)
	if err != nil || j.Status != engine.StatusDone || j.TargetsDone != n {
		t.Fatalf("Wait = %+v, %v; want done with %d targets", j, err, n)
	}
	return id
}

func TestOpen_CloseClosesTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := openRunner(t, dir, enginetest.OKFetch)
	id := waitDone(t, r, "alice", 2)

	// While the runner runs, it holds dir: a second Open is refused with a
	// clear error, and leaves nothing open.
	if r2, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil); !errors.Is(err, engine.ErrStoreInUse) {
		if r2 != nil {
			r2.Close()
		}
		t.Fatalf("second Open while the first runs: %v; want ErrStoreInUse", err)
	}

	r.Close()
	if _, ok := r.Job(id); ok {
		t.Error("Job after Close found the job: the store is still open")
	}
	r.Close() // idempotent, and the store is closed once

	// Closed: dir opens again, with the job stored by the first runner.
	r2 := openRunner(t, dir, enginetest.OKFetch)
	j, ok := r2.Job(id)
	if !ok || j.Status != engine.StatusDone || j.TargetsDone != 2 {
		t.Fatalf("Job(%s) after reopening = %+v, %v; want done, 2 targets", id, j, ok)
	}
	waitDone(t, r2, "bob", 1)
}

func TestOpen_ShutdownClosesTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := openRunner(t, dir, enginetest.OKFetch)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	r2 := openRunner(t, dir, enginetest.OKFetch)
	waitDone(t, r2, "alice", 1)
}

func TestOpen_InMemory(t *testing.T) {
	t.Parallel()
	r := openRunner(t, "", enginetest.OKFetch)
	id := waitDone(t, r, "alice", 3)
	_, ts, ok := r.Status(id)
	if !ok || len(ts) != 3 || ts[2].Result == nil || ts[2].Result.Content != enginetest.Content(ts[2].URL) {
		t.Fatalf("Status(%s) = %+v, %v; want 3 targets with their results", id, ts, ok)
	}
	r.Close()
	if _, ok := r.Job(id); ok {
		t.Error("Job after Close found the job: the in-memory store is still open")
	}
}

func TestOpen_BadInputIsAClearError(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(file, "store")
	tests := []struct {
		name, dir string
		fetch     engine.FetchFunc
		cfg       engine.Config
		want      string // in the error
	}{
		{"dir under a file", notDir, enginetest.OKFetch, engine.Config{}, file + ": not a directory"},
		{"nil fetch", t.TempDir(), nil, engine.Config{}, "nil fetch func"},
		{"negative config", t.TempDir(), enginetest.OKFetch, engine.Config{Workers: -1}, "Workers must not be negative"},
	}
	for _, tt := range tests {
		r, err := engine.Open(tt.dir, tt.fetch, tt.cfg, nil)
		if err == nil || r != nil {
			if r != nil {
				r.Close()
			}
			t.Fatalf("%s: Open = %v, %v; want an error", tt.name, r, err)
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "open runner: ") && !strings.HasPrefix(err.Error(), "new runner: ") {
			t.Errorf("%s: error %q; want it to name %q", tt.name, err, tt.want)
		}
		// Nothing was left open: the directory opens again.
		if tt.dir != notDir {
			openRunner(t, tt.dir, enginetest.OKFetch).Close()
		}
	}
}

// logTo returns a logger that writes every level, as text, to buf.
func logTo(buf *testkit.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestOpen_DirThatIsAFileIsAClearErrorAndKeepsTheFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := engine.Open(file, enginetest.OKFetch, engine.Config{}, nil)
	if err == nil {
		r.Close()
		t.Fatal("Open on a regular file succeeded")
	}
	if !strings.HasPrefix(err.Error(), "open runner: ") || !strings.Contains(err.Error(), file) {
		t.Errorf("error %q; want it to start \"open runner: \" and name %s", err, file)
	}
	if b, rerr := os.ReadFile(file); rerr != nil || string(b) != "not a store" {
		t.Errorf("the file after a refused Open: %q, %v; want it untouched", b, rerr)
	}
}

func TestOpen_GarbageManifestIsCorruptAndKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	manifest := filepath.Join(dir, "MANIFEST")
	garbage := []byte("this is no badger manifest, but someone's file\n")
	if err := os.WriteFile(manifest, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil)
	if !errors.Is(err, engine.ErrStoreCorrupt) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("Open on a garbage MANIFEST: %v; want ErrStoreCorrupt", err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name %s", err, dir)
	}
	if b, _ := os.ReadFile(manifest); string(b) != string(garbage) {
		t.Errorf("MANIFEST after a refused Open: %q; want it untouched", b)
	}
}

// A directory that holds someone else's files is not a store: Open
// refuses it with ErrStoreCorrupt, naming it, and deletes, changes or
// adds no file in it (Badger's lock file neither).
func TestOpen_ForeignDirLosesNoFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{"notes.txt": "keep me", "empty.mem": "", "empty.vlog": ""}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil)
	if !errors.Is(err, engine.ErrStoreCorrupt) || !strings.Contains(err.Error(), dir) {
		if r != nil {
			r.Close()
		}
		t.Errorf("Open on a directory of other files: %v; want ErrStoreCorrupt naming %s", err, dir)
	}
	for name, content := range files {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != content {
			t.Errorf("%s after Open: %q, %v; want it kept with %q", name, b, err, content)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != len(files) {
		t.Errorf("the directory after Open holds %d entries, %v; want the %d it had", len(entries), err, len(files))
	}
}

func TestOpen_ReadOnlyDirIsAClearError(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory: run as another user")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil)
	if err == nil {
		r.Close()
		t.Fatal("Open on a read-only directory succeeded")
	}
	if !errors.Is(err, os.ErrPermission) || errors.Is(err, engine.ErrStoreCorrupt) || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q; want a permission error naming %s, not ErrStoreCorrupt", err, dir)
	}
}

// Opens of one directory at once: exactly one wins, every other is refused
// ErrStoreInUse, and the winner's store works and keeps its jobs.
func TestOpen_AtOnceOnOneDirOneWins(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const n = 8
	type opened struct {
		r   *engine.Runner
		err error
	}
	start := make(chan struct{})
	out := make(chan opened, n)
	for range n {
		go func() {
			<-start
			r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil)
			out <- opened{r, err}
		}()
	}
	close(start)
	var winner *engine.Runner
	for range n {
		o := testkit.Recv(t, out)
		switch {
		case o.err == nil && winner == nil:
			winner = o.r
			t.Cleanup(winner.Close)
		case o.err == nil:
			o.r.Close()
			t.Error("two Opens of one directory succeeded at once")
		case !errors.Is(o.err, engine.ErrStoreInUse):
			t.Errorf("a losing Open: %v; want ErrStoreInUse", o.err)
		}
	}
	if winner == nil {
		t.Fatal("no Open of the directory succeeded")
	}
	id := waitDone(t, winner, "alice", 2)
	winner.Close()
	r := openRunner(t, dir, enginetest.OKFetch)
	if j, ok := r.Job(id); !ok || j.Status != engine.StatusDone {
		t.Fatalf("Job(%s) after reopening = %+v, %v; want done", id, j, ok)
	}
}

// Opens refused while a runner writes never disturb it, and are refused as
// in use, never as a damaged store (Open reads the MANIFEST before it
// takes the directory's lock).
func TestOpen_RefusedWhileAnotherWritesDisturbsNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const jobs = 20
	r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{JobsTotal: jobs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	ids := make([]string, 0, jobs)
	for i := range jobs {
		caller := "c" + string(rune('a'+i))
		id, _, err := r.Submit(context.Background(), enginetest.Caller(caller), "", enginetest.Targets(caller, 8))
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, id)
		r2, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil)
		if !errors.Is(err, engine.ErrStoreInUse) || errors.Is(err, engine.ErrStoreCorrupt) {
			if r2 != nil {
				r2.Close()
			}
			t.Fatalf("Open %d while the first runner writes: %v; want ErrStoreInUse alone", i, err)
		}
	}
	for _, id := range ids {
		if j, err := r.Wait(context.Background(), id); err != nil || j.Status != engine.StatusDone || j.TargetsDone != 8 {
			t.Fatalf("Wait(%s) = %+v, %v; want done, 8 targets", id, j, err)
		}
	}
	r.Close()
	r = openRunner(t, dir, enginetest.OKFetch)
	for _, id := range ids {
		if j, ok := r.Job(id); !ok || j.Status != engine.StatusDone {
			t.Fatalf("Job(%s) after reopening = %+v, %v; want done", id, j, ok)
		}
	}
}

// Close from many goroutines at once: none panics, each returns only once
// the store is closed (its reads find nothing), and dir opens again.
func TestOpen_CloseFromManyGoroutines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g := testkit.NewGate()
	r, err := engine.Open(dir, gatedFor("bob", g), engine.Config{Now: testkit.NewClock().Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := waitDone(t, r, "alice", 1)
	id, _, err := r.Submit(context.Background(), enginetest.Caller("bob"), "", enginetest.Targets("bob", 2))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, g.Entered()) // a fetch is in flight as the Closes start
	const n = 16
	start := make(chan struct{})
	found := make(chan bool, n)
	for range n {
		go func() {
			<-start
			r.Close()
			_, ok := r.Job(done)
			found <- ok
		}()
	}
	close(start)
	for range n {
		if testkit.Recv(t, found) {
			t.Error("a Close returned while the store was still open")
		}
	}
	if !errors.Is(r.Err(), engine.ErrClosed) {
		t.Errorf("Err after Close = %v; want ErrClosed", r.Err())
	}
	r2 := openRunner(t, dir, enginetest.OKFetch)
	j, ok := r2.Job(id)
	if !ok || j.Status != engine.StatusFailed || j.Error != "shutdown" {
		t.Fatalf("Job(%s) after reopening = %+v, %v; want failed \"shutdown\"", id, j, ok)
	}
	if j, ok := r2.Job(done); !ok || j.Status != engine.StatusDone {
		t.Fatalf("Job(%s) after reopening = %+v, %v; want done", done, j, ok)
	}
}

// gatedFor returns a fetch that waits at g for the targets of caller's
// jobs (enginetest.Targets names them by caller) and fetches the others at
// once, as enginetest.OKFetch.
func gatedFor(caller string, g *testkit.Gate) engine.FetchFunc {
	gated := enginetest.GatedFetch(g)
	return func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "/"+caller+"/") {
			return gated(ctx, c, tg)
		}
		return enginetest.OKFetch(ctx, c, tg)
	}
}

// Shutdown with a cancelled context gives up on a fetch that ignores its
// context, and closes the store all the same; a Close after it does
// nothing; the fetch's late outcome is dropped, never written (the store
// is closed), and nothing panics. Reopened, the job reads failed
// "shutdown" with its target pending.
func TestOpen_ShutdownGivingUpThenClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs testkit.SyncBuffer
	entered, release, returned := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	stubborn := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		entered <- struct{}{}
		<-release // ignores its context
		defer close(returned)
		return engine.Result{Content: "late"}, nil
	}
	r, err := engine.Open(dir, stubborn, engine.Config{Now: testkit.NewClock().Now}, logTo(&logs))
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("alice", 1))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, entered)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with a cancelled context and a stubborn fetch = %v; want context.Canceled", err)
	}
	r.Close()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after Shutdown = %v; want nil", err)
	}
	if _, ok := r.Job(id); ok {
		t.Error("Job after Shutdown found the job: the store is still open")
	}
	close(release)
	testkit.RequireClosed(t, returned)
	testkit.WaitFor(t, "the late outcome's log line", func() bool {
		return strings.Contains(logs.String(), "its outcome is dropped")
	})

	r2 := openRunner(t, dir, enginetest.OKFetch)
	j, ts, ok := r2.Status(id)
	if !ok || j.Status != engine.StatusFailed || j.Error != "shutdown" || j.TargetsDone != 0 {
		t.Fatalf("Job(%s) after reopening = %+v, %v; want failed \"shutdown\" with no target stored", id, j, ok)
	}
	if len(ts) != 1 || ts[0].Status != engine.TargetPending || ts[0].Result != nil {
		t.Fatalf("targets after reopening = %+v; want one pending, with no result (the late one is dropped)", ts)
	}
}

// Every method of a runner made by Open, after Close: no panic, reads
// find nothing, writes are refused with ErrClosed.
func TestOpen_EveryMethodAfterClose(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), enginetest.OKFetch)
	id := waitDone(t, r, "alice", 2)
	r.Close()

	if _, ok := r.Job(id); ok {
		t.Error("Job after Close: found")
	}
	if _, _, ok := r.Status(id); ok {
		t.Error("Status after Close: found")
	}
	if _, _, ok := r.Targets(id); ok {
		t.Error("Targets after Close: found")
	}
	if _, ok := r.Result(id, 0); ok {
		t.Error("Result after Close: found")
	}
	if _, ok := r.ResultJSON(id, 0); ok {
		t.Error("ResultJSON after Close: found")
	}
	r.Touch(id)
	if live := r.Live(); len(live) != 0 {
		t.Errorf("Live after Close = %+v; want none", live)
	}
	if jobs, _, err := r.List("alice", engine.ListOptions{}); len(jobs) != 0 && err == nil {
		t.Errorf("List after Close = %+v, %v; want nothing", jobs, err)
	}
	if _, _, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("alice", 1)); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Submit after Close = %v; want ErrClosed", err)
	}
	if r.Cancel(id) {
		t.Error("Cancel after Close = true")
	}
	if !errors.Is(r.Err(), engine.ErrClosed) {
		t.Errorf("Err after Close = %v; want ErrClosed", r.Err())
	}
	if err := engine.PeerOf(r).RememberNodeTag([engine.NodeTagLen]byte{1, 2, 3, 4}, "node"); err == nil {
		t.Error("RememberNodeTag after Close = nil; want an error (the store is closed)")
	}
	if _, err := engine.PeerOf(r).NodeTags(); err == nil {
		t.Error("NodeTags after Close = nil error; want an error (the store is closed)")
	}
	_, _ = engine.PeerOf(r).Admitted("alice")
	_ = engine.PeerOf(r).Reusable("alice", "k", id)
}

// Wait after Close answers ErrClosed, as its doc says ("even for a job
// that had ended before"), on a runner made by Open as on one made by New.
func TestOpen_WaitAfterCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	r := openRunner(t, "", enginetest.OKFetch)
	id := waitDone(t, r, "alice", 1)
	r.Close()
	if _, err := r.Wait(context.Background(), id); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Wait after Close = %v; want ErrClosed", err)
	}
}

// A Wait blocked on a live job when Close comes answers ErrClosed with the
// job as the close left it (failed "shutdown": its first target's fetch
// is cancelled, its second stays pending), never ErrNotFound nor an empty
// job, though the store closes as soon as the runner has stopped.
func TestOpen_WaiterDuringCloseGetsTheJob(t *testing.T) {
	t.Parallel()
	const rounds = 30
	bad := 0
	for i := range rounds {
		g := testkit.NewGate()
		r, err := engine.Open("", enginetest.GatedFetch(g), engine.Config{Now: testkit.NewClock().Now}, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _, err := r.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("alice", 2))
		if err != nil {
			t.Fatal(err)
		}
		testkit.Recv(t, g.Entered())
		type waited struct {
			j   engine.Job
			err error
		}
		out := make(chan waited, 1)
		go func() {
			j, err := r.Wait(context.Background(), id)
			out <- waited{j, err}
		}()
		testkit.WaitFor(t, "the Wait to begin", func() bool { return engine.Waiting(r, id) == 1 })
		r.Close()
		w := testkit.Recv(t, out)
		if !errors.Is(w.err, engine.ErrClosed) || w.j.ID != id || w.j.Status != engine.StatusFailed || w.j.Error != "shutdown" {
			bad++
			t.Logf("round %d: Wait = %+v, %v; want the job failed \"shutdown\", ErrClosed", i, w.j, w.err)
		}
	}
	if bad != 0 {
		t.Errorf("%d of %d waiters did not get the job as the close left it", bad, rounds)
	}
}

// Reads after Close are normal use (a dashboard polls a job after the
// runner stopped): they find nothing, quietly, never a warning per read.
func TestOpen_ReadsAfterCloseLogNoWarning(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	r, err := engine.Open("", enginetest.OKFetch, engine.Config{Now: testkit.NewClock().Now}, logTo(&logs))
	if err != nil {
		t.Fatal(err)
	}
	id := waitDone(t, r, "alice", 1)
	r.Close()
	before := len(logs.Lines())
	for range 10 {
		r.Job(id)
		r.Status(id)
		r.Touch(id)
	}
	after := logs.Lines()[before:]
	warns := 0
	for _, l := range after {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			warns++
		}
	}
	if warns != 0 {
		t.Errorf("30 reads after Close logged %d warnings; want none. First: %s", warns, after[0])
	}
}

// The exported status words are the ones a runner gives its jobs and
// targets, and its rules agree with them: each way a job ends is
// terminal, and TerminalStatus computes it from the job's counts.
func TestOpen_JobsEndInTheExportedStatuses(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/1") || strings.Contains(tg.URL, "/failer/") {
			return engine.Result{}, boom
		}
		return enginetest.OKFetch(ctx, c, tg)
	}
	r := openRunner(t, "", fetch)
	ctx := context.Background()
	want := map[string]string{"done": engine.StatusDone, "partial": engine.StatusPartial, "failer": engine.StatusFailed}
	n := map[string]int{"done": 1, "partial": 2, "failer": 2}
	for caller, status := range want {
		id, _, err := r.Submit(ctx, enginetest.Caller(caller), "", enginetest.Targets(caller, n[caller]))
		if err != nil {
			t.Fatal(err)
		}
		j, err := r.Wait(ctx, id)
		if err != nil || j.Status != status {
			t.Fatalf("%s: Wait = %+v, %v; want %s", caller, j, err, status)
		}
		if !engine.IsTerminal(j.Status) || engine.IsLive(j.Status) {
			t.Errorf("%s: status %q is not terminal alone", caller, j.Status)
		}
		if got := engine.TerminalStatus(j.TargetsTotal, j.TargetsDone, j.TargetsFailed); got != j.Status {
			t.Errorf("%s: TerminalStatus(%d, %d, %d) = %q; the runner says %q", caller, j.TargetsTotal, j.TargetsDone, j.TargetsFailed, got, j.Status)
		}
		_, ts, _ := r.Status(id)
		for _, tg := range ts {
			if !engine.HasOutcome(tg.Status) || !slices.Contains(engine.TargetStates(), tg.Status) {
				t.Errorf("%s: target %d status %q is not an exported outcome", caller, tg.Idx, tg.Status)
			}
		}
	}
	// cancelled and live, with a gate.
	g := testkit.NewGate()
	r2 := openRunner(t, "", enginetest.GatedFetch(g))
	id, _, err := r2.Submit(ctx, enginetest.Caller("c"), "", enginetest.Targets("c", 2))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, g.Entered())
	if j, _ := r2.Job(id); !engine.IsLive(j.Status) || engine.IsTerminal(j.Status) || j.Status != engine.StatusRunning {
		t.Errorf("a job in flight reads %q; want running, live", j.Status)
	}
	if _, ts, _ := r2.Status(id); len(ts) != 2 || ts[0].Status != engine.TargetRunning || ts[1].Status != engine.TargetPending || engine.HasOutcome(ts[0].Status) {
		t.Errorf("targets in flight = %+v; want running, pending", ts)
	}
	if !r2.Cancel(id) {
		t.Fatal("Cancel = false")
	}
	g.Open()
	j, err := r2.Wait(ctx, id)
	if err != nil || j.Status != engine.StatusCancelled || !engine.IsTerminal(j.Status) {
		t.Fatalf("Wait after Cancel = %+v, %v; want cancelled, terminal", j, err)
	}
	for _, s := range engine.JobStatuses() {
		if engine.IsLive(s) == engine.IsTerminal(s) {
			t.Errorf("exported status %q: live %v, terminal %v", s, engine.IsLive(s), engine.IsTerminal(s))
		}
	}
}

// A hook that closes the runner (an embedder that stops on the first job
// that fails, say) gets its Close back, and the runner stops: Close must
// not wait for the very hook that calls it. Its store is closed.
func TestOpen_CloseFromAHookReturns(t *testing.T) {
	t.Parallel()
	var r *engine.Runner
	ready, closed := make(chan struct{}), make(chan struct{})
	hooks := engine.Hooks{Job: func(outcome string) {
		if outcome == engine.StatusDone {
			<-ready
			r.Close()
			close(closed)
		}
	}}
	dir := t.TempDir()
	r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{Hooks: hooks}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	waitDone(t, r, "alice", 1)
	close(ready) // the hook closes the runner once the job is waited for
	testkit.RequireClosed(t, closed)
	r.Close()
	openRunner(t, dir, enginetest.OKFetch) // the store was closed
}

// Shutdown gives up on a hook that blocks for good, as on a stubborn
// fetch, once its ctx is done (Close's ends after CloseTimeout; here a
// short one stands in for it): it returns ctx.Err(), the hook's goroutine
// is left to the hook, and the store is closed. The stop waits for the
// hooks' actor to say it has stopped, with no timeout of its own that
// could end first and be taken for that.
func TestOpen_CloseGivesUpOnABlockedHook(t *testing.T) {
	t.Parallel()
	release, blocked := make(chan struct{}), make(chan struct{})
	defer close(release)
	var once sync.Once
	hooks := engine.Hooks{Job: func(string) {
		once.Do(func() { close(blocked) })
		<-release
	}}
	dir := t.TempDir()
	var logs testkit.SyncBuffer
	r, err := engine.Open(dir, enginetest.OKFetch, engine.Config{Hooks: hooks}, logTo(&logs))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, r, "alice", 1)
	testkit.RequireClosed(t, blocked)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- r.Shutdown(ctx) }()
	if err := testkit.Recv(t, shut); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a hook blocked = %v; want context.DeadlineExceeded", err)
	}
	if !strings.Contains(logs.String(), "shutdown gave up on the hooks") {
		t.Errorf("no log line says Shutdown gave up on the hooks:\n%s", logs.String())
	}
	r.Close() // closed: returns at once
	if r2, err := engine.Open(dir, enginetest.OKFetch, engine.Config{}, nil); err != nil {
		t.Errorf("Open after Close: %v; want the store closed", err)
	} else {
		r2.Close()
	}
}
