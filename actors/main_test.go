package actors

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests. Every test stops the
// actors it spawns and closes its store.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
