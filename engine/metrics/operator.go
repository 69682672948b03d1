package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sift/batch/engine"
)

// The series an operator's alerts read (docs/observability/): the fetches
// in progress and the submits refused are a [Metrics]'s; the store's, the
// fetcher's and a cluster node's membership are collectors apart, each
// registered beside it where the process has one.

// Refusal reasons, the values of siftbatch_submits_refused_total's reason
// label.
const (
	RefusedCallerCap = "caller_cap" // engine.ErrCallerBusy: the caller's JobsPerCaller
	RefusedGlobalCap = "global_cap" // engine.ErrBusy: JobsTotal
)

// fetches tracks when each fetch in progress started, for
// siftbatch_fetch_oldest_seconds. Safe for concurrent use.
type fetches struct {
	now func() time.Time

	mu      sync.Mutex
	next    uint64
	started map[uint64]time.Time
}

// begin records a fetch that starts now; end, called with its key, forgets it.
func (f *fetches) begin() uint64 {
	t := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.started[f.next] = t
	return f.next
}

func (f *fetches) end(k uint64) {
	f.mu.Lock()
	delete(f.started, k)
	f.mu.Unlock()
}

// oldest is the age in seconds of the oldest fetch in progress, 0 if none.
func (f *fetches) oldest() float64 {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var age time.Duration
	for _, t := range f.started { // at most the runner's workers
		age = max(age, now.Sub(t))
	}
	return age.Seconds()
}

// Fetch returns fetch wrapped so that siftbatch_fetch_oldest_seconds reads
// the age of the oldest call of it in progress (0 when none): give the
// runner the wrapped one. A fetch older than its deadline (the fetcher's
// Timeout) is stuck at its worker: the alert SiftbatchFetchStuck. The
// wrapper adds a map insert and delete under a mutex to each call; it is
// safe for concurrent use.
func (m *Metrics) Fetch(fetch engine.FetchFunc) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		k := m.fetches.begin()
		defer m.fetches.end(k)
		return fetch(ctx, c, t)
	}
}

// constCollector emits, at each scrape, the series that read returns for
// its descriptors: a counter or gauge whose value is read from elsewhere,
// with or without labels.
type constCollector struct {
	desc  *prometheus.Desc
	vtype prometheus.ValueType
	read  func(emit func(v float64, labels ...string))
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	c.read(func(v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc, c.vtype, v, labels...)
	})
}

// refusedCollector is siftbatch_submits_refused_total, read from the
// attached runner's [engine.Runner.Refusals] (zeros until Attach).
func (m *Metrics) refusedCollector() prometheus.Collector {
	return constCollector{
		desc: prometheus.NewDesc("siftbatch_submits_refused_total",
			"Submits refused at a cap, by reason: caller_cap (the caller's live jobs, 429), global_cap (the runner's live jobs in all, 429).",
			[]string{"reason"}, nil),
		vtype: prometheus.CounterValue,
		read: func(emit func(float64, ...string)) {
			var n engine.Refusals
			if r := m.runner.Load(); r != nil {
				n = r.Refusals()
			}
			emit(float64(n.CallerBusy), RefusedCallerCap)
			emit(float64(n.Busy), RefusedGlobalCap)
		},
	}
}

// Caller classes, the values of siftbatch_live_jobs_by_class's class
// label: serve's key classes (engine/httpapi's ClassStandard,
// ClassRestricted, ClassAdmin), ClassNone for a job submitted without a
// class, ClassOther for any other (an embedder's own: a class is never
// its own label value unless it is one of these, so the label stays
// bounded).
const (
	ClassStandard   = "standard"
	ClassRestricted = "restricted"
	ClassAdmin      = "admin"
	ClassNone       = "none"
	ClassOther      = "other"
)

// liveByClassCollector is siftbatch_live_jobs_by_class, read from the
// attached runner's [engine.Runner.LiveByClass] (zeros until Attach).
func (m *Metrics) liveByClassCollector() prometheus.Collector {
	return constCollector{
		desc: prometheus.NewDesc("siftbatch_live_jobs_by_class",
			"Jobs queued or running, by the caller class they were submitted with: standard, restricted, admin, none, other.",
			[]string{"class"}, nil),
		vtype: prometheus.GaugeValue,
		read: func(emit func(float64, ...string)) {
			counts := map[string]int{ClassStandard: 0, ClassRestricted: 0, ClassAdmin: 0, ClassNone: 0, ClassOther: 0}
			if r := m.runner.Load(); r != nil {
				for class, n := range r.LiveByClass() {
					switch class {
					case ClassStandard, ClassRestricted, ClassAdmin:
					case "":
						class = ClassNone
					default:
						class = ClassOther
					}
					counts[class] += n
				}
			}
			for class, n := range counts {
				emit(float64(n), class)
			}
		},
	}
}

// StoreCounters is what a store tells of itself: a
// *github.com/sift/batch/persistence.Store has them.
type StoreCounters interface {
	// Bytes is the stored bytes in all, what MaxBytes bounds.
	Bytes() int64
	// WriteErrors is how many writes failed for a reason of the disk.
	WriteErrors() int64
	// WriteRetries is how many of a job's writes failed and were held to
	// be tried again.
	WriteRetries() int64
}

// Store returns the collector of a store's series, read from s at each
// scrape; maxBytes is the runner's [engine.Config.MaxBytes] (defaulted):
//
//	siftbatch_store_bytes                stored bytes in all (every row of every job)
//	siftbatch_store_max_bytes            the runner's MaxBytes: past it the oldest finished jobs are evicted
//	siftbatch_store_write_errors_total   writes that failed for a reason of the disk
//	siftbatch_store_write_retries_total  a job's writes that failed and were held to be tried again
func Store(s StoreCounters, maxBytes int64) prometheus.Collector {
	return multiCollector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_store_bytes",
			Help: "Stored bytes in all: every row of every job, what MaxBytes bounds.",
		}, func() float64 { return float64(s.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_store_max_bytes",
			Help: "The runner's MaxBytes: past it the oldest finished jobs are evicted (live jobs never are).",
		}, func() float64 { return float64(maxBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_store_write_errors_total",
			Help: "Store writes that failed for a reason of the disk (a commit or a sync failed, a held write given up).",
		}, func() float64 { return float64(s.WriteErrors()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "siftbatch_store_write_retries_total",
			Help: "A job's store writes that failed and were held to be tried again.",
		}, func() float64 { return float64(s.WriteRetries()) }),
	}
}

// FetcherCounters is what a fetcher tells of itself: a
// *github.com/sift/batch/engine/fetcher.Fetcher has them.
type FetcherCounters interface {
	// FilterDeaths is how many filter processes died or were killed, by a
	// reason of a fixed set (fetcher.FilterDeathReasons).
	FilterDeaths() map[string]uint64
	// Timeout is one fetch's deadline.
	Timeout() time.Duration
}

// Fetcher returns the collector of a fetcher's series, read from f at each
// scrape:
//
//	siftbatch_filter_deaths_total{reason}  filter processes that died or were killed: timeout, cpu, memory, broken, crashed
//	siftbatch_fetch_timeout_seconds        one fetch's deadline
func Fetcher(f FetcherCounters) prometheus.Collector {
	return multiCollector{
		constCollector{
			desc: prometheus.NewDesc("siftbatch_filter_deaths_total",
				"Filter (jq, grep) processes that died or were killed, by reason: timeout, cpu, memory (a page's filters past a limit), broken (garbage answered), crashed (died by itself or by a signal not the fetcher's).",
				[]string{"reason"}, nil),
			vtype: prometheus.CounterValue,
			read: func(emit func(float64, ...string)) {
				for reason, n := range f.FilterDeaths() { // a fixed set of reasons
					emit(float64(n), reason)
				}
			},
		},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_fetch_timeout_seconds",
			Help: "One fetch's deadline (serve --fetch-timeout).",
		}, func() float64 { return f.Timeout().Seconds() }),
	}
}

// Membership returns the collector of a cluster node's view of its
// cluster, read from read at each scrape (members: how many nodes are in
// the node's member list; member: whether the node is in it itself):
//
//	siftbatch_cluster_members  nodes in this node's member list
//	siftbatch_cluster_member   1 while this node is in its own member list, 0 while it is not
func Membership(read func() (members int, member bool)) prometheus.Collector {
	return multiCollector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_cluster_members",
			Help: "Nodes in this node's member list.",
		}, func() float64 { n, _ := read(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "siftbatch_cluster_member",
			Help: "1 while this node is in its own member list, 0 while it is not (its jobs answer 503 node unavailable elsewhere).",
		}, func() float64 {
			if _, ok := read(); ok {
				return 1
			}
			return 0
		}),
	}
}
