package metrics_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every runner,
// store and test server is stopped. No allow-list is needed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
