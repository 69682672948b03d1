package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// interrupted runs the built command with args in a temporary TMPDIR of its
// own, sends it SIGINT once its output shows a line holding ready, and
// returns its stdout and stderr once it has exited 0 (what make demo's
// Ctrl-C needs: make reports no error), having removed its temporary
// directory.
func interrupted(t *testing.T, ready string, args ...string) (stdout, stderr string) {
	t.Helper()
	tmp := t.TempDir()
	cmd := exec.Command(clitest.Binary(t), args...)
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), clitest.Env()...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut, all testkit.SyncBuffer
	cmd.Stderr = &errOut
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			_, _ = all.Write([]byte(sc.Text() + "\n"))
			if !signalled && strings.Contains(sc.Text(), ready) {
				close(seen)
				signalled = true
			}
		}
	}()
	testkit.RequireClosed(t, seen)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-read
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v, want 0 after a clean stop\nstdout:\n%s\nstderr:\n%s", err, all.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "interrupted; stopped cleanly") {
		t.Errorf("stderr does not say it stopped cleanly:\n%s", errOut.String())
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Errorf("the interrupted command left %v in its temporary directory (%v)", entries, err)
	}
	return all.String(), errOut.String()
}

// TestDemo_InterruptExitsZero stops the demo binary with SIGINT mid-run:
// it exits 0 once it has stopped cleanly and removed its temporary store.
func TestDemo_InterruptExitsZero(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	interrupted(t, "fetching", "demo", "--jobs", "6", "--targets", "30")
}

// requireGone fails the test if a process of text's "pid N" is still there
// (not reaped).
func requireGone(t *testing.T, text string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(text, -1) {
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d is still there (%v)", pid, err)
		}
	}
}

// TestDemo_KeptStoreReadByJobs runs the demo command to its end with
// --data: it returns no error, says where the store is kept, and jobs
// reads that store (a header and one line per job).
func TestDemo_KeptStoreReadByJobs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	out, _, err := run(t, "demo", "--jobs", "2", "--targets", "3", "--workers", "1", "--data", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "The store is kept in "+dir) {
		t.Fatalf("output:\n%s", out)
	}
	out, _, err = run(t, "jobs", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 {
		t.Fatalf("jobs, want a header and 2 jobs:\n%s", out)
	}
}
