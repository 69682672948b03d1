package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/metrics"
)

// newMetrics returns serve's metrics, on a registry of their own with the
// Go and process collectors (which the dashboard's charts read too), and
// the handler of GET /metrics.
func newMetrics() (*metrics.Metrics, *prometheus.Registry, http.Handler) {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// peerPanicsMetric is siftbatch_cluster_peer_panics_total, node's
// [cluster.Node.PeerPanics]: calls of peers that panicked in its gRPC
// server, each ended with the node going on. Registered with --cluster only.
func peerPanicsMetric(node *cluster.Node) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "siftbatch_cluster_peer_panics_total",
		Help: "Calls of cluster peers that panicked in this node's gRPC server (each ended that call; the node went on).",
	}, func() float64 { return float64(node.PeerPanics()) })
}
