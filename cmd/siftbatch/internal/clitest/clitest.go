// Package clitest is the siftbatch command's test support: the command
// built once per test binary (with the race detector when the tests have
// it), and the environment its processes run in under test.
//
// Its functions are safe for concurrent use.
package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	once    sync.Once
	binDir  string
	binPath string
	binErr  error
)

// Binary builds the siftbatch command once per test binary, with -race if
// the test binary has it, and returns its path. Cleanup removes it: call it
// from TestMain after the tests.
func Binary(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		binDir, binErr = os.MkdirTemp("", "siftbatch-test-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "siftbatch")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "github.com/sift/batch/cmd/siftbatch")...)
		cmd.Dir = Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// Cleanup removes the binary Binary built, if any.
func Cleanup() {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// RaceSuppressions is the GORACE suppressions file of the data races inside
// protoactor-go (docs/RELIABILITY.md), relative to the repository's root.
const RaceSuppressions = "engine/cluster/testdata/race.supp"

// Env is the environment a serve --cluster process runs in under test:
// GORACE with protoactor-go's race suppressions added to the test's own.
func Env() []string {
	supp := filepath.Join(Root(), RaceSuppressions)
	return []string{"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" suppressions="+supp)}
}
