package testkit

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TierEnv is the environment variable that names the test tiers to run: a
// comma-separated list such as "browser,faults".
const TierEnv = "SIFTBATCH_TIER"

// RequireTier skips the test, with one line that says how to run it,
// unless the environment variable [TierEnv] lists tier. A tier is a kind
// of test that needs more than Go (a browser, strace, network
// namespaces); each has its make target (make test/browser, …) that CI
// runs once.
func RequireTier(t testing.TB, tier string) {
	t.Helper()
	if !slices.Contains(strings.Split(os.Getenv(TierEnv), ","), tier) {
		t.Skipf("tier %s: set %s=%s (make test/%s)", tier, TierEnv, tier, tier)
	}
}

// Long skips the test under go test -short, with one line. A long test is
// one that takes seconds: a multi-process run, a cluster of several nodes,
// a soak or load test. make test/short skips them; make test runs them.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: multi-process; run without -short")
	}
}
