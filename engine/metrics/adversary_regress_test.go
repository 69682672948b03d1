package metrics_test

// Adversarial tests that FAIL against the current metrics. Each names the
// rule it breaks.

import (
	"testing"
	"time"
)

// TestAdversary_TargetHookNegativeBytes: rule 10 ("No input makes library
// code panic"). The Target hook that Metrics.Hooks returns is a public
// function; a negative byte count (an embedder's own accounting, or a
// wrapper that passes a difference) makes prometheus' Counter.Add panic
// ("counter cannot decrease in value"). Low severity: the runner itself
// never passes a negative count, and it counts a hook's panic and goes on.
func TestAdversary_TargetHookNegativeBytes(t *testing.T) {
	m, scrape := setup(t)
	var v any
	func() {
		defer func() { v = recover() }()
		m.Hooks().Target(nil, time.Millisecond, -1)
	}()
	if v != nil {
		t.Fatalf("Target hook with -1 bytes panicked: %v", v)
	}
	if got := value(t, scrape(), "siftbatch_result_bytes_total"); got < 0 {
		t.Fatalf("result bytes went negative: %v", got)
	}
}
