package connlimit_test

import (
	"testing"

	"github.com/sift/batch/engine/enginetest"
)

// TestMain checks that no test leaves a goroutine behind: every server
// and connection is closed. No allow-list is needed.
func TestMain(m *testing.M) {
	enginetest.Main(m)
}
