package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example as "go run ./examples/metrics" does: it must end
// by itself without an error, show the series it fed, and leave nothing
// running.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"jobs ended, by the program's own hook: 2",
		`siftbatch_jobs_total{outcome="created"} 2`,
		`siftbatch_targets_total{result="failed"} 1`,
		`siftbatch_http_requests_total{code="200",route="GET /hello/{name}"} 2`,
		"siftbatch_hook_panics_total 0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
