package fetcher_test

import (
	"bufio"
	"os"
	"strconv"
	"testing"

	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/fetcher"
)

// TestMain serves the filters when the test binary runs as a fetcher's
// filter process, and otherwise checks that no test leaves a goroutine
// behind: every fetcher is closed, every test server and runner stopped.
// No allow-list is needed.
func TestMain(m *testing.M) {
	if path := os.Getenv(garbageChildEnv); path != "" {
		garbageChild(path)
	}
	fetcher.RunFilterChild()
	enginetest.Main(m)
}

// garbageChildEnv, in a filter process's environment (SetFilterEnv), makes
// it a broken one: it writes its pid to the file the variable names, says
// it is ready, then acknowledges a request and answers it with a frame
// that claims 2 GiB of content, then waits for its input to close.
const garbageChildEnv = "SIFTBATCH_TEST_GARBAGE_CHILD"

func garbageChild(path string) {
	_ = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o600)
	os.Stdout.WriteString("SFC1")
	r := bufio.NewReader(os.Stdin)
	_, _ = r.Peek(1) // a request came
	os.Stdout.Write([]byte("ASFR1\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x01\x80\x00\x00\x00\x00\x00\x00\x00"))
	_, _ = r.ReadString(0) // until the fetcher kills it
	os.Exit(0)
}
