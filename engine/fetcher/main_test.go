package fetcher_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/fetcher"
)

// TestMain serves the filters when the test binary runs as a fetcher's
// filter process, and otherwise checks that no test leaves a goroutine
// behind: every fetcher is closed, every test server and runner stopped.
// No allow-list is needed.
func TestMain(m *testing.M) {
	fetcher.RunFilterChild()
	goleak.VerifyTestMain(m)
}

// waitFor checks cond every few milliseconds until it holds, failing the
// test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		case <-tick.C:
		}
	}
}
