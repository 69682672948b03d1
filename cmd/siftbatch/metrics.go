package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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
