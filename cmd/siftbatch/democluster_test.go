package main

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestDemoCluster_Flags: its --help lists its flags; a bad --targets is a
// usage error naming it, before anything starts.
func TestDemoCluster_Flags(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "demo-cluster", "--help")
	if !errors.Is(err, cli.ErrHelpShown) {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage: siftbatch demo-cluster", "  -once\n", "  -targets int\n", "(2 to 32)", "Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"--targets", "1"}, {"--targets", "33"}, {"extra"}} {
		_, _, err := run(t, append([]string{"demo-cluster"}, args...)...)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(ue.Hint(), "siftbatch demo-cluster --help") {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestDemoCluster_InterruptExitsZero stops the demo-cluster binary with
// SIGINT once its cluster has formed: every node stops on SIGTERM (none is
// killed), each has exited, and the command exits 0, its temporary
// directory removed.
func TestDemoCluster_InterruptExitsZero(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	out, _ := interrupted(t, "the cluster has formed", "demo-cluster")
	stopped := regexp.MustCompile(`Stopped every node process: (.*)\.`).FindStringSubmatch(out)
	if stopped == nil || len(regexp.MustCompile(`pid \d+`).FindAllString(stopped[1], -1)) != 3 {
		t.Fatalf("want a line of the 3 node processes stopped:\n%s", out)
	}
	requireGone(t, stopped[1])
	if strings.Contains(out, "Killed (SIGKILL)") {
		t.Errorf("a node did not stop on SIGTERM:\n%s", out)
	}
}
