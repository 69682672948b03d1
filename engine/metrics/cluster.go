package metrics

import "github.com/prometheus/client_golang/prometheus"

// PeerCounters is what a cluster node counts of its peers' calls and
// messages: github.com/sift/batch/engine/cluster's Node has them.
type PeerCounters interface {
	// PeerPanics is how many calls of peers panicked (each ended that
	// call; the node went on).
	PeerPanics() int64
	// PeerRefusals is how many messages of peers were refused.
	PeerRefusals() int64
}

// Cluster returns the collector of a cluster node's peer counters, read
// from n at each scrape. Register it beside a [Metrics] when the process
// is a cluster node (a single node has none of these series):
//
//	siftbatch_cluster_peer_panics_total    peers' calls that panicked on this node (each ended; the node went on)
//	siftbatch_cluster_peer_refusals_total  peers' messages refused (malformed, system messages, not from a member)
func Cluster(n PeerCounters) prometheus.Collector {
	return multiCollector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_cluster_peer_panics_total",
			Help: "Calls of cluster peers that panicked on this node (each ended that call; the node went on).",
		}, func() float64 { return float64(n.PeerPanics()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_cluster_peer_refusals_total",
			Help: "Messages of cluster peers refused: malformed, stopping or watching an actor, or not from a member.",
		}, func() float64 { return float64(n.PeerRefusals()) }),
	}
}

// multiCollector is several collectors as one.
type multiCollector []prometheus.Collector

func (c multiCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c {
		x.Describe(ch)
	}
}

func (c multiCollector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c {
		x.Collect(ch)
	}
}
