package fetcher_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
)

// TestFetcher_FilterSpan checks the span of a page's filters in a traced
// fetch: a child of the fetch's span, with the bytes in and out and which
// filters ran, never the program's text or the page's URL; an untraced
// fetch makes none.
func TestFetcher_FilterSpan(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"items":[1,2,3]}`)
	}))
	t.Cleanup(s.Close)
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	const program = ".items | map(. * 7) | length"
	target := engine.Target{URL: s.URL + "/page?secret=Q", Options: engine.Options{JQ: program}}
	if _, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, target); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("an untraced fetch made %d spans", n)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "fetch")
	res, err := f.Fetch(ctx, &engine.Caller{Name: "t"}, target)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	var filter sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == fetcher.SpanFilter {
			filter = sp
		}
	}
	if filter == nil {
		t.Fatal("no filter span")
	}
	if filter.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Error("the filter span is not the fetch's child")
	}
	got := map[string]string{}
	for _, kv := range filter.Attributes() {
		v := kv.Value.Emit()
		got[string(kv.Key)] = v
		for _, bad := range []string{program, "map(", s.URL, "secret"} {
			if strings.Contains(v, bad) {
				t.Errorf("attribute %s holds %q", kv.Key, bad)
			}
		}
	}
	want := map[string]string{"siftbatch.filter.in_bytes": "17", "siftbatch.filter.jq": "true", "siftbatch.filter.grep": "false",
		"siftbatch.filter.out_bytes": strconv.Itoa(len(res.Content))}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
