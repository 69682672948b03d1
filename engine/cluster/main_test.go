package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every node,
// runner, store and server a test starts is stopped by its end; but the
// goroutines protoactor-go leaves (docs/CLUSTER.md, "protoactor bugs"):
// its throttles' timers, which end by themselves after their period, and
// the test provider's TTL loop, which never ends.
//
// Under the race detector, it runs the tests again in a process of their
// own with GORACE's suppressions set to testdata/race.supp: two data races
// inside protoactor-go's remote would fail every test with more than one
// node. Races in any other code are reported as always.
func TestMain(m *testing.M) {
	if raceEnabled && !strings.Contains(os.Getenv("GORACE"), "suppressions=") {
		os.Exit(rerunWithSuppressions())
	}
	goleak.VerifyTestMain(m,
		// Throttles' timers: each ends after its period (up to a minute).
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		// The test provider's TTL loop ranges over a ticker it stops, but a
		// stopped ticker's channel is never closed.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster/clusterproviders/test.(*Provider).startTtlReport.func1"),
		// gRPC client connections protoactor's remote dials to a peer and
		// never closes once the peer has gone: gRPC retries them for good
		// (docs/CLUSTER.md, "protoactor bugs", 7).
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransport"),
	)
}

// rerunWithSuppressions runs this test binary again, with its arguments,
// GORACE's suppressions added, and returns its exit code.
func rerunWithSuppressions() int {
	supp, err := filepath.Abs(filepath.Join("testdata", "race.supp"))
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
