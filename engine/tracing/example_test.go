package tracing_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/tracing"
)

// ExampleNew traces a runner with the embedder's own TracerProvider (here
// an in-memory recorder; serve uses [tracing.FromEnv]) and prints the
// spans one job of one target makes.
func ExampleNew() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := tracing.New(tp) // its Middleware goes around the HTTP routes: httpapi.Options{Wrap: tr.Middleware}

	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: "page"}, nil
	}
	r, err := engine.Open("", fetch, engine.Config{TracerProvider: tr.TracerProvider()}, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "agent"}, "", []engine.Target{{URL: "https://example.com/"}})
	if err != nil {
		panic(err)
	}
	if _, err := r.Wait(context.Background(), id); err != nil {
		panic(err)
	}
	r.Close()
	_ = tp.Shutdown(context.Background())

	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Println(n)
	}
	// Output:
	// siftbatch.job
	// siftbatch.target
	// siftbatch.target.fetch
	// siftbatch.target.store
	// siftbatch.target.wait
}
