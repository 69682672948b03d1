package metrics_test

import (
	"testing"

	"github.com/sift/batch/engine/metrics"
)

type keyCounts struct{ failures, throttled int64 }

func (k *keyCounts) Failures() int64  { return k.failures }
func (k *keyCounts) Throttled() int64 { return k.throttled }

type readCounts struct {
	queued, refused int64
	waiting         int
}

func (r *readCounts) ReadCounts() (int64, int64, int) { return r.queued, r.refused, r.waiting }

type connCounts struct {
	per, all, idle int64
	open           int
}

func (c *connCounts) Refused() (int64, int64) { return c.per, c.all }
func (c *connCounts) ClosedIdle() int64       { return c.idle }
func (c *connCounts) Open() int               { return c.open }

// TestMetrics_LimitsReadCounters: the key guard's, the connection
// limiter's and the read scheduler's collectors read their counters at
// each scrape.
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
	rc := &readCounts{}
	if err := b.reg.Register(metrics.Reads(rc)); err != nil {
		t.Fatal(err)
	}
	rc.queued, rc.refused, rc.waiting = 70, 6, 64
	k.failures, k.throttled = 20, 5
	c.per, c.all, c.idle, c.open = 3, 4, 9, 12
	wantValues(t, b.scrape(t), map[string]float64{
		"siftbatch_auth_failures_total":                       20,
		"siftbatch_auth_throttled_total":                      5,
		`siftbatch_connections_refused_total{cap="per_addr"}`: 3,
		`siftbatch_connections_refused_total{cap="overall"}`:  4,
		"siftbatch_connections_closed_idle_total":             9,
		"siftbatch_connections_open":                          12,
		"siftbatch_reads_queued_total":                        70,
		"siftbatch_reads_refused_total":                       6,
		"siftbatch_reads_waiting":                             64,
	})
}
