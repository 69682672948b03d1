package metrics_test

import (
	"testing"

	"github.com/sift/batch/engine/metrics"
)

type keyCounts struct{ failures, throttled int64 }

func (k *keyCounts) Failures() int64  { return k.failures }
func (k *keyCounts) Throttled() int64 { return k.throttled }

type connCounts struct {
	per, all, idle int64
	open           int
}

func (c *connCounts) Refused() (int64, int64) { return c.per, c.all }
func (c *connCounts) ClosedIdle() int64       { return c.idle }
func (c *connCounts) Open() int               { return c.open }

// TestMetrics_LimitsReadCounters: the key guard's and the connection
// limiter's collectors read their counters at each scrape.
func TestMetrics_LimitsReadCounters(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	k, c := &keyCounts{}, &connCounts{}
	if err := b.reg.Register(metrics.Keys(k)); err != nil {
		t.Fatal(err)
	}
	if err := b.reg.Register(metrics.Conns(c)); err != nil {
		t.Fatal(err)
	}
	k.failures, k.throttled = 20, 5
	c.per, c.all, c.idle, c.open = 3, 4, 9, 12
	wantValues(t, b.scrape(t), map[string]float64{
		"siftbatch_auth_failures_total":                       20,
		"siftbatch_auth_throttled_total":                      5,
		`siftbatch_connections_refused_total{cap="per_addr"}`: 3,
		`siftbatch_connections_refused_total{cap="overall"}`:  4,
		"siftbatch_connections_closed_idle_total":             9,
		"siftbatch_connections_open":                          12,
	})
}
