// Package clitest is the siftbatch command's test support: the command
// built once per test binary (as people run it, and with the race detector
// when the tests have it), and the environment its processes run in under
// test.
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

	"github.com/sift/batch/engine/enginetest/testkit"
)

// build is one build of the command, made once per test binary.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	dirOnce sync.Once
	binDir  string
	dirErr  error
	plain   build
	raced   build
)

// Binary builds the siftbatch command as a person runs it (no race
// detector: figures of memory and of the filters' time budget stay
// true), once per test binary, and returns its path. Cleanup removes it:
// call it from TestMain after the tests.
func Binary(t testing.TB) string {
	t.Helper()
	return plain.get(t, "siftbatch")
}

// RaceBinary is Binary built with -race when the test binary has the race
// detector (then a data race in the command's processes shows in their
// output), and Binary's build otherwise.
func RaceBinary(t testing.TB) string {
	t.Helper()
	if !raceEnabled {
		return Binary(t)
	}
	return raced.get(t, "siftbatch-race", "-race")
}

func (b *build) get(t testing.TB, name string, flags ...string) string {
	t.Helper()
	dirOnce.Do(func() { binDir, dirErr = testkit.RunDir("siftbatch-test-bin") }) // a killed run's is removed by the next
	if dirErr != nil {
		t.Fatal(dirErr)
	}
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		args := append([]string{"build", "-o", b.path}, flags...)
		cmd := exec.Command("go", append(args, "github.com/sift/batch/cmd/siftbatch")...)
		cmd.Dir = Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %v: %v\n%s", flags, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes the binaries Binary and RaceBinary built, if any.
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
