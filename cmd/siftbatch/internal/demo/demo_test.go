package demo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/fixture"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

func TestMain(m *testing.M) { enginetest.Main(m) }

// TestRun_Summary runs the demo with every kind of page: it prints the
// header, a row per job, a few results and each failure (the fixture's
// doing), removes its temporary store, and logs no URL, host or panic
// value, nor its own panics as errors.
func TestRun_Summary(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var stdout, stderr testkit.SyncBuffer
	if err := Run(context.Background(), Options{Jobs: 3, Targets: 5, Workers: 2}, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "JOB   CALLER  STATUS   DONE/TOTAL  FAILED  MS") {
		t.Fatalf("no summary table:\n%s", out)
	}
	for _, want := range []string{"job1  alice", "job2  bob", "job3  carol",
		"First bytes of a few results:", "internal error", "HTTP 404 Not Found", "HTTP 500 Internal Server Error",
		"siftbatch demo: 3 jobs × 5 targets from 3 callers, 2 workers", "each on purpose",
		"The panic page made 1 fetch panic on purpose", "The temporary store is removed."} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Fatalf("the demo left %v in its temporary directory (%v)", entries, err)
	}
	testkit.RequireNoneOf(t, stderr.String(), "127.0.0.1", "http://", fixture.ErrPanic.Error(), "level=ERROR")
}

// TestRun_NoFailureNoHeading: a run whose jobs meet no failing page (one
// job of 2 targets: a fast page and a slow one) prints no heading of
// failed targets with nothing under it, but says that none failed.
func TestRun_NoFailureNoHeading(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var stdout, stderr testkit.SyncBuffer
	if err := Run(context.Background(), Options{Jobs: 1, Targets: 2, Workers: 1}, &stdout, &stderr); err != nil {
		t.Fatalf("demo: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, "Failed targets") || !strings.Contains(out, "No target failed") || !strings.Contains(out, "First bytes of a few results:") {
		t.Errorf("a run without failures:\n%s", out)
	}
}

// lineSignal is a SyncBuffer that closes seen the first time what has been
// written to it.
type lineSignal struct {
	testkit.SyncBuffer
	what string
	seen chan struct{}
	once sync.Once
}

func (w *lineSignal) Write(p []byte) (int, error) {
	n, err := w.SyncBuffer.Write(p)
	if strings.Contains(w.String(), w.what) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

// TestRun_Interrupt cancels the demo once a fetch shows: it returns
// context.Canceled, having closed everything and removed its temporary
// store.
func TestRun_Interrupt(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineSignal{what: "fetching", seen: make(chan struct{})}
	ended := make(chan error, 1)
	go func() { ended <- Run(ctx, Options{Jobs: 6, Targets: 30, Workers: 2}, out, &testkit.SyncBuffer{}) }()
	select {
	case <-out.seen:
	case err := <-ended:
		t.Fatalf("the demo ended before a fetch showed: %v\n%s", err, out.String())
	}
	cancel()
	if err := testkit.Recv(t, ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Fatalf("the interrupted demo left %v (%v)", entries, err)
	}
}

// TestRun_KeepsStore: with Data, the store is kept there and holds every
// job, finished.
func TestRun_KeepsStore(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	var out testkit.SyncBuffer
	if err := Run(context.Background(), Options{Jobs: 2, Targets: 3, Workers: 1, Data: dir}, &out, &testkit.SyncBuffer{}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "The store is kept in "+dir) {
		t.Fatalf("output:\n%s", out.String())
	}
	s, err := persistence.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	if err := s.Jobs(func(j persistence.JobRecord) bool {
		n++
		if j.Status == "queued" || j.Status == "running" {
			t.Errorf("job %s kept %s", j.ID, j.Status)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("the kept store holds %d jobs, want 2", n)
	}
}

// TestFirstBytes cuts at a rune boundary.
func TestFirstBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{{"abc", "abc"}, {"abcdef", "abc…"}, {"ab€def", "ab…"}} {
		if got := firstBytes(c.in, 3); got != c.want {
			t.Errorf("firstBytes(%q, 3) = %q, want %q", c.in, got, c.want)
		}
	}
}
