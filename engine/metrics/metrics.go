// Package metrics holds siftbatch's Prometheus metrics: [engine.Hooks] that
// feed collectors you register ([New], [Metrics.Hooks]), [Join] to fan one
// Hooks out to several (the metrics and an embedder's own), and HTTP
// middleware that counts and times requests under fixed route labels
// ([Metrics.Middleware]).
//
// The series, all registered by registering a [Metrics]:
//
//	siftbatch_jobs_total{outcome}          jobs by outcome: created, reused, done, partial, failed, cancelled
//	siftbatch_targets_total{result}        stored targets by result: done, failed, busy (busy past the retry window)
//	siftbatch_target_seconds               histogram: time to fetch and store one target
//	siftbatch_result_bytes_total           bytes of result JSON stored
//	siftbatch_job_seconds                  histogram: time from a job's submit to its terminal status
//	siftbatch_live_jobs                    jobs queued or running
//	siftbatch_inflight_targets             targets being fetched
//	siftbatch_hook_panics_total            hook calls that panicked (see [Metrics.Attach])
//	siftbatch_http_requests_total{route,code}  HTTP requests by route and status code
//	siftbatch_http_request_seconds{route}  histogram: HTTP request latency by route
//	siftbatch_fetch_oldest_seconds         age of the oldest fetch in progress (see [Metrics.Fetch])
//	siftbatch_submits_refused_total{reason}  submits refused at a cap: caller_cap, global_cap
//	siftbatch_live_jobs_by_class{class}    live jobs by caller class: standard, restricted, admin, none, other
//
// A cluster node's peer counters are a collector apart, [Cluster]; so are
// its membership ([Membership]), a store's series ([Store]) and a
// fetcher's ([Fetcher]). docs/observability/ has alert rules and a
// Grafana dashboard over them.
package metrics

import (
	"errors"
	"github.com/sift/batch/engine/internal/httpx"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sift/batch/engine"
)

// Target results, the values of siftbatch_targets_total's result label.
const (
	ResultDone   = "done"
	ResultFailed = "failed"
	ResultBusy   = "busy" // came back busy for longer than Config.RetryFor
)

// targetBuckets are siftbatch_target_seconds' buckets, in seconds: from
// 1 ms, where a page answered at once on a near network lands (a 404, a
// 500 or a 429 took 0.2 to 2.6 ms on loopback), through a page's usual
// 100 ms to 1 s (the demo's fast and slow pages: 121 and 904 ms), to the
// fetcher's 210 s deadline. docs/observability/README.md has the
// measurement (BenchmarkFetch_FixturePages in cmd/siftbatch).
var targetBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 210}

// outcomes are the values of siftbatch_jobs_total's outcome label.
var outcomes = []string{"created", "reused", engine.StatusDone, engine.StatusPartial, engine.StatusFailed, engine.StatusCancelled}

// Metrics are the runner's and an HTTP API's Prometheus metrics. A Metrics
// is a [prometheus.Collector]: register it on a registry of yours. Its
// methods, and the hooks and middleware it returns, are safe for
// concurrent use.
type Metrics struct {
	jobs           *prometheus.CounterVec
	targets        *prometheus.CounterVec
	targetSeconds  prometheus.Histogram
	resultBytes    prometheus.Counter
	jobSeconds     prometheus.Histogram
	liveJobs       prometheus.Gauge
	inflight       prometheus.Gauge
	hookPanics     prometheus.CounterFunc
	diskFree       prometheus.GaugeFunc
	diskReserve    prometheus.GaugeFunc
	diskFull       prometheus.GaugeFunc
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	fetchOldest    prometheus.GaugeFunc
	refused        prometheus.Collector
	liveByClass    prometheus.Collector

	runner  atomic.Pointer[engine.Runner]
	fetches fetches
}

// New returns the metrics, every job outcome and target result at zero so
// that a scrape shows zeros, not gaps.
func New() *Metrics {
	m := &Metrics{
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
			Buckets: targetBuckets,
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
			Help: "HTTP requests by route (a fixed pattern, never an id) and status code.",
		}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "siftbatch_http_request_seconds",
			Help:    "HTTP request latency by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
	}
	m.hookPanics = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "siftbatch_hook_panics_total",
		Help: "Hook calls that panicked (each was skipped; the runner went on).",
	}, func() float64 {
		if r := m.runner.Load(); r != nil {
			return float64(r.HookPanics())
		}
		return 0
	})
	disk := func(f func(engine.DiskState) float64) func() float64 {
		return func() float64 {
			if r := m.runner.Load(); r != nil {
				return f(r.Disk())
			}
			return 0
		}
	}
	m.diskFree = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "siftbatch_disk_free_bytes",
		Help: "Free space of the store's file system at its last measure (every second; 0 for a store in memory).",
	}, disk(func(d engine.DiskState) float64 { return float64(d.Free) }))
	m.diskReserve = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "siftbatch_disk_reserve_bytes",
		Help: "Free space the runner keeps on the store's file system (Config.DiskReserve; 0 for a store in memory).",
	}, disk(func(d engine.DiskState) float64 { return float64(d.Reserve) }))
	m.diskFull = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "siftbatch_disk_full",
		Help: "1 while the free space is below the reserve: new jobs are refused (507) and running ones held.",
	}, disk(func(d engine.DiskState) float64 {
		if d.Full {
			return 1
		}
		return 0
	}))
	m.fetches = fetches{now: time.Now, started: map[uint64]time.Time{}}
	m.fetchOldest = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "siftbatch_fetch_oldest_seconds",
		Help: "Age of the oldest fetch in progress, 0 when none (through Metrics.Fetch).",
	}, m.fetches.oldest)
	m.refused = m.refusedCollector()
	m.liveByClass = m.liveByClassCollector()
	for _, o := range outcomes {
		m.jobs.WithLabelValues(o)
	}
	for _, r := range []string{ResultDone, ResultFailed, ResultBusy} {
		m.targets.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.jobs, m.targets, m.targetSeconds, m.resultBytes, m.jobSeconds,
		m.liveJobs, m.inflight, m.hookPanics, m.diskFree, m.diskReserve, m.diskFull, m.requests, m.requestSeconds, m.fetchOldest, m.refused, m.liveByClass}
}

// Describe sends the descriptors of every series, for
// [prometheus.Collector].
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect sends every series' current value, for [prometheus.Collector].
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Attach has siftbatch_hook_panics_total read r's [engine.Runner.HookPanics],
// siftbatch_submits_refused_total its [engine.Runner.Refusals] and
// siftbatch_live_jobs_by_class its [engine.Runner.LiveByClass].
// Call it once [engine.Open] (or [engine.New]) has returned the runner that m's hooks observe;
// until then the series reads 0.
func (m *Metrics) Attach(r *engine.Runner) { m.runner.Store(r) }

// Hooks returns the [engine.Hooks] that feed the metrics. Put them in
// [engine.Config.Hooks], alone or with others through [Join].
func (m *Metrics) Hooks() engine.Hooks {
	return engine.Hooks{
		Job: func(outcome string) { m.jobs.WithLabelValues(outcome).Inc() },
		Target: func(err error, d time.Duration, resultBytes int) {
			m.targets.WithLabelValues(targetResult(err)).Inc()
			m.targetSeconds.Observe(d.Seconds())
			m.resultBytes.Add(float64(max(resultBytes, 0))) // a counter cannot go down
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
		return ResultDone
	case errors.Is(err, engine.ErrRetryLater):
		return ResultBusy
	default:
		return ResultFailed
	}
}

// Middleware counts and times each request next serves, under route: a
// fixed pattern such as "GET /v1/batch/{id}", never a request's path, so
// that no id or other input becomes a label. The code is the status next
// writes (200 if it writes none); a request whose handler panics, with
// [http.ErrAbortHandler] too, counts as 500, and the panic goes on up.
func (m *Metrics) Middleware(route string, next http.Handler) http.Handler {
	seconds := m.requestSeconds.WithLabelValues(route) // the series exists from the start
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := httpx.NewStatusRecorder(w)
		defer func() {
			code := rec.Code
			v := recover()
			if v != nil {
				code = http.StatusInternalServerError
			}
			seconds.Observe(time.Since(start).Seconds())
			m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			if v != nil {
				panic(v)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}
