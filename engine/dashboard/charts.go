package dashboard

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The series the charts read, as package metrics names them.
const (
	seriesTargets       = "siftbatch_targets_total"
	seriesTargetSeconds = "siftbatch_target_seconds"
	seriesLiveJobs      = "siftbatch_live_jobs"
	seriesInflight      = "siftbatch_inflight_targets"
)

// stats are the numbers the admin sees, read from the metrics' registry:
// the targets in flight (every Refresh), and the charts' points (every
// ChartStep). Safe for concurrent use.
type stats struct {
	mu       sync.Mutex
	haveBusy bool
	inflight float64
	next     time.Time
	prev     reading
	rate     []float64 // targets stored per second
	latency  []float64 // mean seconds per target stored
	live     []float64 // live jobs
	// hist are the fetch time histogram's readings of the last
	// quantileWindow (and the one just before), oldest first: the
	// window's quantiles come from the newest less the oldest.
	hist []histReading
}

// quantileWindow is the span of the admin's fetch time quantiles.
const quantileWindow = 15 * time.Minute

// histReading is the fetch time histogram at t: its buckets' upper
// bounds and cumulative counts (summed over its label sets).
type histReading struct {
	t      time.Time
	bounds []float64
	cum    []float64
	count  float64
}

// reading is one gathering of the counters.
type reading struct {
	ok             bool
	t              time.Time
	targets        float64
	sum, count     float64
	live, inflight float64
	hist           histReading
}

func read(g prometheus.Gatherer, now time.Time) reading {
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return reading{}
	}
	rd := reading{t: now, hist: histReading{t: now}}
	for _, mf := range mfs {
		switch mf.GetName() {
		case seriesTargets:
			rd.ok = true
			for _, m := range mf.GetMetric() {
				rd.targets += m.GetCounter().GetValue()
			}
		case seriesTargetSeconds:
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				rd.sum += h.GetSampleSum()
				rd.count += float64(h.GetSampleCount())
				rd.hist.add(h)
			}
		case seriesLiveJobs:
			rd.live = gauge(mf)
		case seriesInflight:
			rd.inflight = gauge(mf)
		}
	}
	return rd
}

func gauge(mf *dto.MetricFamily) float64 {
	var v float64
	for _, m := range mf.GetMetric() {
		v += m.GetGauge().GetValue()
	}
	return v
}

// sample reads g; every step it adds a point to each chart.
func (s *stats) sample(g prometheus.Gatherer, now time.Time, step time.Duration) {
	rd := read(g, now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.haveBusy, s.inflight = rd.ok, rd.inflight
	if !rd.ok || now.Before(s.next) {
		return
	}
	s.next = now.Add(step)
	if s.prev.ok {
		dt := rd.t.Sub(s.prev.t).Seconds()
		rate, lat := 0.0, 0.0
		if dt > 0 {
			rate = max(0, rd.targets-s.prev.targets) / dt
		}
		if dc := rd.count - s.prev.count; dc > 0 {
			lat = (rd.sum - s.prev.sum) / dc
		}
		s.rate = push(s.rate, rate)
		s.latency = push(s.latency, lat)
	}
	s.live = push(s.live, rd.live)
	s.prev = rd
	if rd.hist.bounds != nil {
		s.hist = append(s.hist, rd.hist)
		// Keep one reading at or before the window's start, as the base.
		drop := 0
		for drop+1 < len(s.hist) && !s.hist[drop+1].t.After(now.Add(-quantileWindow)) {
			drop++
		}
		s.hist = s.hist[drop:]
	}
}

// add adds one label set's histogram to r (the same buckets in each).
func (r *histReading) add(h *dto.Histogram) {
	bs := h.GetBucket()
	if r.bounds == nil {
		r.bounds = make([]float64, len(bs))
		r.cum = make([]float64, len(bs))
		for i, b := range bs {
			r.bounds[i] = b.GetUpperBound()
		}
	}
	if len(bs) != len(r.bounds) {
		return
	}
	for i, b := range bs {
		r.cum[i] += float64(b.GetCumulativeCount())
	}
	r.count += float64(h.GetSampleCount())
}

// fetchQuantiles are the fetch time's p50 and p95 over the last
// quantileWindow, estimated from the histogram's buckets as Prometheus's
// histogram_quantile does (linear within a bucket), with the number of
// targets they count; ok is false before any target is stored in the
// window. Before the dashboard has run a whole window, they count every
// target the histogram has.
func (s *stats) fetchQuantiles() (p50, p95 float64, n int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.hist) == 0 {
		return 0, 0, 0, false
	}
	last := s.hist[len(s.hist)-1]
	base := histReading{} // none older than the window: count from zero
	if first := s.hist[0]; len(s.hist) > 1 && len(first.cum) == len(last.cum) && !first.t.After(last.t.Add(-quantileWindow)) {
		base = first
	}
	total := last.count - base.count
	if total <= 0 {
		return 0, 0, 0, false
	}
	delta := make([]float64, len(last.cum))
	for i := range delta {
		delta[i] = last.cum[i]
		if base.cum != nil {
			delta[i] -= base.cum[i]
		}
	}
	return bucketQuantile(0.5, last.bounds, delta, total), bucketQuantile(0.95, last.bounds, delta, total), int(total), true
}

// bucketQuantile estimates the q-quantile of total observations counted
// in cumulative buckets cum with upper bounds bounds: linear within the
// bucket the rank falls in; past the last bound, the last bound.
func bucketQuantile(q float64, bounds, cum []float64, total float64) float64 {
	rank := q * total
	prevBound, prevCum := 0.0, 0.0
	for i, b := range bounds {
		if cum[i] >= rank {
			if cum[i] == prevCum {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCum)/(cum[i]-prevCum)
		}
		prevBound, prevCum = b, cum[i]
	}
	return prevBound
}

func push(xs []float64, x float64) []float64 {
	xs = append(xs, x)
	if len(xs) > chartPoints {
		xs = xs[len(xs)-chartPoints:]
	}
	return xs
}

// busy returns the targets in flight, if the registry has the metrics.
func (s *stats) busy() (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight, s.haveBusy
}

// chartView is one small chart: an SVG polyline over the last points.
type chartView struct {
	Title  string
	Last   string
	Max    string
	Points string // the polyline's points, in a 300×60 box
	Area   string // the same, closed along the bottom, for the fill
	Empty  bool
}

// The chart box, in SVG units.
const (
	chartW = 300
	chartH = 60
)

func (s *stats) charts() []chartView {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.prev.ok {
		return nil
	}
	return []chartView{
		newChart("Targets per second", s.rate, func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "/s" }),
		newChart("Fetch latency (mean)", s.latency, func(v float64) string { return fmtSeconds(v) }),
		newChart("Live jobs", s.live, func(v float64) string { return strconv.Itoa(int(v)) }),
	}
}

func fmtSeconds(v float64) string {
	if v < 1 {
		return strconv.Itoa(int(v*1000+0.5)) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " s"
}

func newChart(title string, xs []float64, format func(float64) string) chartView {
	c := chartView{Title: title, Empty: len(xs) == 0}
	if c.Empty {
		c.Last, c.Max = "—", "—"
		return c
	}
	top := 0.0
	for _, x := range xs {
		top = max(top, x)
	}
	c.Last, c.Max = format(xs[len(xs)-1]), format(top)
	if top == 0 {
		top = 1
	}
	// The newest point is at the right edge; the chart fills from the
	// right as points come.
	step := float64(chartW) / float64(chartPoints-1)
	x0 := float64(chartW) - step*float64(len(xs)-1)
	var pts strings.Builder
	for i, x := range xs {
		y := chartH - 2 - x/top*(chartH-6)
		fmt.Fprintf(&pts, "%.1f,%.1f ", x0+step*float64(i), y)
	}
	c.Points = strings.TrimSpace(pts.String())
	c.Area = fmt.Sprintf("%.1f,%d %s %d,%d", x0, chartH, c.Points, chartW, chartH)
	return c
}
