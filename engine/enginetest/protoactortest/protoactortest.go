// Package protoactortest is the TestMain of the packages whose tests run
// protoactor-go's cluster: goleak, with the goroutines protoactor leaves
// ignored by name, and, under the race detector, the tests run again with
// GORACE's suppressions of protoactor's own data races
// (engine/cluster/testdata/race.supp; docs/CLUSTER.md, "protoactor bugs").
// Races in any other code are reported as always.
package protoactortest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Leaks are the goroutines protoactor-go leaves behind: its throttles'
// timers, which end by themselves after their period (up to a minute).
var Leaks = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
	goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
}

// Main runs m: under the race detector first again in a process of its
// own with GORACE's suppressions set to the file supp (a path relative to
// the package's directory) if they are not set yet; then the tests, and
// goleak's check with [Leaks] and more ignored. It does not return.
func Main(m *testing.M, supp string, more ...goleak.Option) {
	if raceEnabled && !strings.Contains(os.Getenv("GORACE"), "suppressions=") {
		os.Exit(rerun(supp))
	}
	goleak.VerifyTestMain(m, append(append([]goleak.Option{}, Leaks...), more...)...)
}

// rerun runs this test binary again, with its arguments and GORACE's
// suppressions added, and returns its exit code.
func rerun(supp string) int {
	abs, err := filepath.Abs(supp)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" suppressions="+abs))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}
