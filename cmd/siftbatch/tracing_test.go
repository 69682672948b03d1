package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/tracing"
)

// otlpReceiver is a loopback OTLP trace receiver: the collector's own
// protocol (go.opentelemetry.io/proto/otlp's TraceService), over gRPC or
// HTTP (protobuf bodies at /v1/traces), keeping what it is sent.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	requests []*collectortrace.ExportTraceServiceRequest
}

// Export implements the collector's TraceService.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.mu.Unlock()
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is OTLP/HTTP's POST /v1/traces, protobuf-encoded.
func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	var in collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &in)
	}
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	out, _ := r.Export(req.Context(), &in)
	b, _ := proto.Marshal(out)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// startReceiver starts a receiver of protocol on a loopback listener it
// keeps, stopped at t's cleanup; it returns its endpoint URL.
func startReceiver(t *testing.T, protocol string) (*otlpReceiver, string) {
	t.Helper()
	r := &otlpReceiver{}
	if protocol == tracing.ProtocolHTTP {
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return r, srv.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return r, "http://" + ln.Addr().String() // http: without TLS
}

// receivedSpan is a span the receiver got, with its resource's service
// name.
type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) spans() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, req := range r.requests {
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, receivedSpan{service, s})
				}
			}
		}
	}
	return out
}

// texts is every text of a span as the wire carried it: its name, its
// attributes', its events' and its status's.
func texts(s *tracepb.Span) []string {
	out := []string{s.GetName(), s.GetStatus().GetMessage()}
	add := func(kvs []*commonpb.KeyValue) {
		for _, kv := range kvs {
			out = append(out, kv.GetKey()+"="+kv.GetValue().String())
		}
	}
	add(s.GetAttributes())
	for _, e := range s.GetEvents() {
		out = append(out, e.GetName())
		add(e.GetAttributes())
	}
	return out
}

// TestServe_TracesOverOTLP runs a real serve process with the standard
// OTEL_ variables pointing at a loopback OTLP receiver (the collector's
// protocol, gRPC and HTTP/protobuf in turn), submits a job of two targets
// with a W3C traceparent, waits for it, and stops serve cleanly. The
// batch processor's delay is a minute, so every span the receiver has
// came with the flush on the clean stop. It checks the service name, the
// job's spans in the caller's trace, and that no span holds the fixture's
// URL, its address or the API key. (A loopback receiver of the collector's
// protocol, not a build of the OpenTelemetry Collector itself.)
func TestServe_TracesOverOTLP(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "a page")
	}))
	t.Cleanup(site.Close)
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, protocol := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			recv, endpoint := startReceiver(t, protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_SERVICE_NAME", "siftbatch-wire")
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000") // only the stop's flush sends them
			t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
			p := startServeProcess(t)

			body := `{"targets":[{"url":"` + site.URL + `/a?k=QSECRET"},{"url":"` + site.URL + `/b"}]}`
			req, err := http.NewRequest(http.MethodPost, p.base+"/v1/batch", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer alice-secret-key")
			req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
			r := send(t, p.c, req)
			if r.code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", r.code, r.body)
			}
			id := r.json(t)["id"].(string)
			if st := p.wait(t, "alice-secret-key", id)["status"]; st != engine.StatusDone {
				t.Fatalf("job %s: %v", id, st)
			}
			if n := len(recv.spans()); n != 0 {
				t.Fatalf("%d spans exported before the stop: the batch delay is a minute", n)
			}
			p.stop() // SIGTERM: a clean stop flushes

			spans := recv.spans()
			count := map[string]int{}
			for _, s := range spans {
				if s.service != "siftbatch-wire" {
					t.Errorf("span %s: service %q, want OTEL_SERVICE_NAME's", s.span.GetName(), s.service)
				}
				count[s.span.GetName()]++
				if s.span.GetName() == tracing.SpanJob || s.span.GetName() == tracing.SpanTarget || s.span.GetName() == "POST /v1/batch" {
					if got := hex.EncodeToString(s.span.GetTraceId()); got != callerTrace {
						t.Errorf("span %s in trace %s, want the caller's %s", s.span.GetName(), got, callerTrace)
					}
				}
				for _, text := range texts(s.span) {
					for _, bad := range []string{site.URL, strings.TrimPrefix(site.URL, "http://"), "QSECRET", "alice-secret-key"} {
						if strings.Contains(text, bad) {
							t.Errorf("span %s holds %q: %s", s.span.GetName(), bad, text)
						}
					}
				}
			}
			for name, want := range map[string]int{"POST /v1/batch": 1, tracing.SpanJob: 1, tracing.SpanTarget: 2,
				tracing.SpanTargetWait: 2, tracing.SpanTargetFetch: 2, tracing.SpanTargetStore: 2} {
				if count[name] != want {
					t.Errorf("%d spans %s, want %d (got %v)", count[name], name, want, count)
				}
			}
		})
	}
}
