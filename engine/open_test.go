package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
