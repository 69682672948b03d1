package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/fetcher"
)

func TestMain(m *testing.M) {
	fetcher.RunFilterChild()
	goleak.VerifyTestMain(m)
}

// TestRun runs the example as "go run ./examples/embedapi" does: it must
// end by itself, with the job done through the mounted API, and leave
// nothing running.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"POST /v1/batch → 202", `"content":"<h1>a page</h1>"`, `"targets_done":2`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestWiring counts the lines of the block marked "wiring" in main.go:
// mounting the whole API takes at most 15.
func TestWiring(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "// wiring:")
	block, _, ok2 := strings.Cut(rest, "// end of wiring")
	if !ok || !ok2 {
		t.Fatal("no wiring block in main.go")
	}
	lines := strings.Count(strings.TrimSpace(block), "\n") // the first line is the marker's own
	t.Logf("%d lines of wiring", lines)
	if lines > 15 {
		t.Errorf("%d lines of wiring, want at most 15:%s", lines, block)
	}
}
