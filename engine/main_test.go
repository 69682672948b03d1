package engine_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a closed runner and
// a closed store stop everything they started. No allow-list is needed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
