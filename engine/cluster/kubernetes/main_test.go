package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind; but those
// protoactor-go leaves (as engine/cluster's TestMain): its throttles'
// timers, which end by themselves after their period.
//
// Under the race detector, it runs the tests again in a process of their
// own with GORACE's suppressions set to engine/cluster's
// testdata/race.supp: the data races inside protoactor-go
// (docs/CLUSTER.md, "protoactor bugs"), its Kubernetes provider's member
// list updates among them. Races in any other code are reported as always.
func TestMain(m *testing.M) {
	if raceEnabled && !strings.Contains(os.Getenv("GORACE"), "suppressions=") {
		os.Exit(rerunWithSuppressions())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	)
}

// rerunWithSuppressions runs this test binary again, with its arguments,
// GORACE's suppressions added, and returns its exit code.
func rerunWithSuppressions() int {
	supp, err := filepath.Abs(filepath.Join("..", "testdata", "race.supp"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" suppressions="+supp))
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
