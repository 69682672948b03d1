package tracing_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/tracing"
	"github.com/sift/batch/persistence"
)

// benchSide is one side of BenchmarkTracing_OnOff: a runner behind the
// HTTP API, traced or not.
type benchSide struct {
	runner  *engine.Runner
	api     http.Handler
	store   *persistence.Store
	tp      *sdktrace.TracerProvider // nil: off
	ended   *countSpans
	submits []time.Duration
	jobs    time.Duration
}

// countSpans counts the spans that end.
type countSpans struct{ n atomic.Int64 }

func (c *countSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *countSpans) OnEnd(sdktrace.ReadOnlySpan)                     { c.n.Add(1) }
func (c *countSpans) Shutdown(context.Context) error                  { return nil }
func (c *countSpans) ForceFlush(context.Context) error                { return nil }

func newBenchSide(b *testing.B, endpoint string, fetchTime time.Duration) *benchSide {
	b.Helper()
	s := &benchSide{}
	tr := tracing.New(nil)
	if endpoint != "" {
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithInsecure())
		if err != nil {
			b.Fatal(err)
		}
		s.ended = &countSpans{}
		s.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSpanProcessor(s.ended))
		tr = tracing.New(s.tp)
	}
	store, err := persistence.Open("")
	if err != nil {
		b.Fatal(err)
	}
	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		if fetchTime > 0 {
			time.Sleep(fetchTime) // a page's time: what a fetch costs the runner's worker
		}
		return engine.Result{Content: "a page of some bytes"}, nil
	}
	r, err := engine.New(store, fetch, engine.Config{TracerProvider: tr.TracerProvider(), Workers: 2}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	keys, _ := httpapi.ReadKeys(strings.NewReader("alice " + secretKey + "\n"))
	api, err := httpapi.New(r, keys, httpapi.Options{Wrap: tr.Middleware})
	if err != nil {
		b.Fatal(err)
	}
	s.runner, s.store, s.api = r, store, httpapi.Front(api, http.NotFoundHandler())
	return s
}

func (s *benchSide) close(b *testing.B) {
	s.runner.Close()
	if err := s.store.Close(); err != nil {
		b.Error(err)
	}
	if s.tp != nil {
		if err := s.tp.Shutdown(context.Background()); err != nil {
			b.Error(err)
		}
	}
}

// job submits a job of n targets over the API (timing the POST), and
// waits for its end.
func (s *benchSide) job(b *testing.B, i, n int) {
	var body strings.Builder
	body.WriteString(`{"targets":[`)
	for t := range n {
		if t > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"url":"https://example.com/%d/%d"}`, i, t)
	}
	body.WriteString(`]}`)
	start := time.Now()
	req := httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Bearer "+secretKey)
	w := httptest.NewRecorder()
	s.api.ServeHTTP(w, req)
	s.submits = append(s.submits, time.Since(start))
	if w.Code != http.StatusAccepted {
		b.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	out := w.Body.String()
	k := strings.Index(out, `"id":"`)
	id := out[k+6 : k+6+32]
	if _, err := s.runner.Wait(context.Background(), id); err != nil {
		b.Fatal(err)
	}
	s.jobs += time.Since(start)
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// BenchmarkTracing_OnOff runs jobs of 32 targets through the HTTP API on
// two runners side by side, one untraced and one traced into a real OTLP
// HTTP exporter (batched, to a loopback receiver that counts the bytes),
// alternating job by job. fetch=0 is a no-op fetch (the runner's own cost,
// where tracing weighs most); fetch=300us is a page answered at once on a
// near network (a 404 or 500 on loopback took 0.3 ms, see
// docs/observability). It reports each side's jobs per second and submit
// p99, their ratios, and the spans and OTLP bytes per job.
//
//	go test -run '^$' -bench BenchmarkTracing_OnOff -benchtime 200x ./engine/tracing
func BenchmarkTracing_OnOff(b *testing.B) {
	for _, fetchTime := range []time.Duration{0, 300 * time.Microsecond} {
		name := "fetch=0"
		if fetchTime > 0 {
			name = "fetch=" + fetchTime.String()
		}
		b.Run(name, func(b *testing.B) { benchOnOff(b, fetchTime) })
	}
}

func benchOnOff(b *testing.B, fetchTime time.Duration) {
	var received atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		received.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	off, on := newBenchSide(b, "", fetchTime), newBenchSide(b, recv.URL+"/v1/traces", fetchTime)
	const targets = 32
	off.job(b, -1, targets) // warm both
	on.job(b, -1, targets)
	off.submits, on.submits, off.jobs, on.jobs = nil, nil, 0, 0
	if err := on.tp.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
	spans0, bytes0 := on.ended.n.Load(), received.Load()
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			off.job(b, i, targets)
			on.job(b, i, targets)
		} else {
			on.job(b, i, targets)
			off.job(b, i, targets)
		}
	}
	b.StopTimer()
	if err := on.tp.ForceFlush(context.Background()); err != nil {
		b.Fatal(err)
	}
	spans, bytes := on.ended.n.Load()-spans0, received.Load()-bytes0
	off.close(b)
	on.close(b)
	n := float64(b.N)
	offRate, onRate := n/off.jobs.Seconds(), n/on.jobs.Seconds()
	b.ReportMetric(offRate, "off_jobs/s")
	b.ReportMetric(onRate, "on_jobs/s")
	b.ReportMetric(onRate/offRate, "on/off_throughput")
	b.ReportMetric(float64(p99(off.submits).Microseconds()), "off_submit_p99_µs")
	b.ReportMetric(float64(p99(on.submits).Microseconds()), "on_submit_p99_µs")
	b.ReportMetric(float64(spans)/n, "spans/job")
	b.ReportMetric(float64(bytes)/n, "otlp_bytes/job")
}
