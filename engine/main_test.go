package engine_test

import (
	"testing"

	"github.com/sift/batch/engine/enginetest"
)

// TestMain checks that no test leaves a goroutine behind: a closed runner and
// a closed store stop everything they started. No allow-list is needed.
func TestMain(m *testing.M) {
	enginetest.Main(m)
}
