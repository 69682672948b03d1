package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// RunDir makes a directory of this test run (this process) under the
// temporary directory, for what a test binary's tests share and
// t.TempDir cannot hold (it outlives one test): named
// PREFIX-PID-RANDOM, so that two runs at once never share it. The caller
// removes it when its tests end (TestMain). A run killed before that (its
// -timeout, a SIGKILL) leaves its directory behind: RunDir first removes
// the directories of prefix whose process is gone ([ReapRunDirs]).
func RunDir(prefix string) (string, error) {
	ReapRunDirs(prefix)
	dir, err := os.MkdirTemp("", prefix+"-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("run directory: %w", err)
	}
	return dir, nil
}

// ReapRunDirs removes the directories PREFIX-PID-RANDOM under the
// temporary directory whose process PID no longer runs: those of runs
// killed before they removed them. A name without both parts (PREFIX-N,
// which os.MkdirTemp makes with a random N, not a PID) is not a run
// directory and is left alone. A directory whose PID runs (this process's, another
// run's, or a process that took a dead run's PID) is left alone.
func ReapRunDirs(prefix string) {
	paths, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*"))
	for _, p := range paths {
		rest := strings.TrimPrefix(filepath.Base(p), prefix+"-")
		pid, random, ok := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		if !ok || random == "" || err != nil || n <= 0 || n == os.Getpid() {
			continue
		}
		if err := syscall.Kill(n, 0); err == syscall.ESRCH {
			_ = os.RemoveAll(p)
		}
	}
}
