package powercuttest

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
)

func TestMain(m *testing.M) {
	// Every serve process, client, file system and store a test starts is
	// stopped by the end of the test.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		clitest.Cleanup()
		os.Exit(code)
	}))
}
