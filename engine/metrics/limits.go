package metrics

import "github.com/prometheus/client_golang/prometheus"

// KeyCounters is what a guard of failed keys counts:
// github.com/sift/batch/engine/keyguard's Guard has them.
type KeyCounters interface {
	// Failures is how many unknown keys have been presented.
	Failures() int64
	// Throttled is how many requests were refused, their key unchecked.
	Throttled() int64
}

// Keys returns the collector of a key guard's counters, read at each
// scrape:
//
//	siftbatch_auth_failures_total   unknown keys presented (each answered 401)
//	siftbatch_auth_throttled_total  requests answered 429, their key unchecked: the address presented too many unknown keys
func Keys(k KeyCounters) prometheus.Collector {
	return multiCollector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_auth_failures_total",
			Help: "Unknown keys presented, on every route that checks one (each answered 401).",
		}, func() float64 { return float64(k.Failures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_auth_throttled_total",
			Help: "Requests answered 429 without their key being checked: their address had presented too many unknown keys.",
		}, func() float64 { return float64(k.Throttled()) }),
	}
}

// ConnCounters is what a connection limiter counts:
// github.com/sift/batch/engine/connlimit's Limiter has them.
type ConnCounters interface {
	// Refused is how many new connections were closed at once, past the
	// per-address cap and past the overall one.
	Refused() (perAddr, overall int64)
	// ClosedIdle is how many idle connections were closed to make room.
	ClosedIdle() int64
	// Open is how many connections are held now.
	Open() int
}

// Conns returns the collector of a connection limiter's counters, read at
// each scrape:
//
//	siftbatch_connections_refused_total{cap="per_addr"|"overall"}  new connections closed at once: a cap was reached and none was idle
//	siftbatch_connections_closed_idle_total                         idle connections closed to make room for a new one
//	siftbatch_connections_open                                      connections held now
func Conns(c ConnCounters) prometheus.Collector {
	refused := func(per bool) func() float64 {
		return func() float64 {
			p, o := c.Refused()
			if per {
				return float64(p)
			}
			return float64(o)
		}
	}
	const help = "New connections closed at once: a cap (per client address, or overall) was reached and no connection was idle."
	return multiCollector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_connections_refused_total", Help: help, ConstLabels: prometheus.Labels{"cap": "per_addr"},
		}, refused(true)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_connections_refused_total", Help: help, ConstLabels: prometheus.Labels{"cap": "overall"},
		}, refused(false)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_connections_closed_idle_total",
			Help: "Idle connections closed to make room for a new one (a cap was reached).",
		}, func() float64 { return float64(c.ClosedIdle()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_connections_open",
			Help: "Connections held now.",
		}, func() float64 { return float64(c.Open()) }),
	}
}

// ReadCounters is what the read scheduler counts:
// github.com/sift/batch/engine/httpapi's Handler has them.
type ReadCounters interface {
	// ReadCounts is how many reads waited for their turn and how many
	// were refused (their caller's queue full), and how many wait now.
	ReadCounts() (queued, refused int64, waiting int)
}

// Reads returns the collector of the read scheduler's counters, read at
// each scrape:
//
//	siftbatch_reads_queued_total   reads that waited for their turn (every place taken, or other reads waiting)
//	siftbatch_reads_refused_total  reads answered 429 "reads queued": their caller had its bound of reads waiting (--max-queued-reads)
//	siftbatch_reads_waiting        reads waiting for their turn now
func Reads(c ReadCounters) prometheus.Collector {
	return multiCollector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_reads_queued_total",
			Help: "Reads (API, MCP, dashboard) that waited for their turn: every place was taken, or other reads waited.",
		}, func() float64 { q, _, _ := c.ReadCounts(); return float64(q) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_reads_refused_total",
			Help: "Reads answered 429 \"reads queued\": their caller had its bound of reads waiting (--max-queued-reads).",
		}, func() float64 { _, r, _ := c.ReadCounts(); return float64(r) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_reads_waiting",
			Help: "Reads waiting for their turn now.",
		}, func() float64 { _, _, w := c.ReadCounts(); return float64(w) }),
	}
}
