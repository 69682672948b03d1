package main

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
)

// Target results, the values of the result label.
const (
	resultDone   = "done"
	resultFailed = "failed"
	resultBusy   = "busy" // came back busy for longer than RetryFor
)

// Metrics are the runner's and the HTTP API's Prometheus metrics, on a
// registry of their own. Its methods are safe for concurrent use.
type Metrics struct {
	reg            *prometheus.Registry
	jobs           *prometheus.CounterVec
	targets        *prometheus.CounterVec
	targetSeconds  prometheus.Histogram
	resultBytes    prometheus.Counter
	jobSeconds     prometheus.Histogram
	liveJobs       prometheus.Gauge
	inflight       prometheus.Gauge
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
}

// NewMetrics returns the metrics, registered with the Go and process
// collectors on a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siftbatch_jobs_total",
			Help: "Jobs by outcome: created, reused, done, partial, failed, cancelled.",
		}, []string{"outcome"}),
		targets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siftbatch_targets_total",
			Help: "Stored targets by result: done, failed, busy (busy for longer than the retry window).",
		}, []string{"result"}),
		targetSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "siftbatch_target_seconds",
			Help:    "Time to fetch and store one target.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 210},
		}),
		resultBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "siftbatch_result_bytes_total",
			Help: "Bytes of result JSON stored.",
		}),
		jobSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "siftbatch_job_seconds",
			Help:    "Time from a job's submit to its terminal status.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}),
		liveJobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "siftbatch_live_jobs",
			Help: "Jobs queued or running.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "siftbatch_inflight_targets",
			Help: "Targets being fetched.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "siftbatch_http_requests_total",
			Help: "HTTP API requests by route (a fixed pattern, never an id) and status code.",
		}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "siftbatch_http_request_seconds",
			Help:    "HTTP API request latency by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
	}
	m.reg.MustRegister(m.jobs, m.targets, m.targetSeconds, m.resultBytes, m.jobSeconds,
		m.liveJobs, m.inflight, m.requests, m.requestSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every series from the start, so that a scrape shows zeros, not gaps.
	for _, o := range []string{"created", "reused", "done", "partial", "failed", "cancelled"} {
		m.jobs.WithLabelValues(o)
	}
	for _, r := range []string{resultDone, resultFailed, resultBusy} {
		m.targets.WithLabelValues(r)
	}
	return m
}

// Hooks returns the engine hooks that feed the metrics.
func (m *Metrics) Hooks() engine.Hooks {
	return engine.Hooks{
		Job: func(outcome string) { m.jobs.WithLabelValues(outcome).Inc() },
		Target: func(err error, d time.Duration, resultBytes int) {
			m.targets.WithLabelValues(targetResult(err)).Inc()
			m.targetSeconds.Observe(d.Seconds())
			m.resultBytes.Add(float64(resultBytes))
		},
		JobSeconds: func(d time.Duration) { m.jobSeconds.Observe(d.Seconds()) },
		Depth:      func(live int) { m.liveJobs.Set(float64(live)) },
		Inflight:   func(n int) { m.inflight.Set(float64(n)) },
	}
}

// targetResult is the result label of a stored target's error.
func targetResult(err error) string {
	switch {
	case err == nil:
		return resultDone
	case errors.Is(err, engine.ErrRetryLater):
		return resultBusy
	default:
		return resultFailed
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveRequest counts and times one API request under route, which must
// be a fixed pattern ("GET /v1/batch/{id}"), never a request's path.
func (m *Metrics) ObserveRequest(route string, code int, d time.Duration) {
	m.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}
