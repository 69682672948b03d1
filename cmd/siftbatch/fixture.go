package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The demo's kinds of page. Each kind is served under its own path prefix.
const (
	pageFast    = "fast"    // answers at once
	pageSlow    = "slow"    // answers after slowDelay
	pageBusy    = "busy"    // 429 twice, then the page
	pageMissing = "missing" // 404
	pageBroken  = "broken"  // 500
	pagePanic   = "panic"   // a page whose fetch panics (demoPanicHeader)
)

const (
	fastDelay = 120 * time.Millisecond
	slowDelay = 900 * time.Millisecond
	// busyTimes is how many times a busy page answers 429 before the page.
	busyTimes = 2
	// demoPanicHeader on a response makes the demo's FetchFunc panic.
	demoPanicHeader = "X-Siftbatch-Demo"
)

// demoPattern is the order in which the demo's jobs meet the kinds of page;
// job j starts 3j into it, so that each job gets a different mix.
var demoPattern = []string{pageFast, pageSlow, pageBusy, pageFast, pageMissing, pageSlow, pageFast, pageBroken, pageFast, pagePanic}

// fixture is the demo's HTTP server on 127.0.0.1.
type fixture struct {
	base string
	srv  *http.Server
	done chan struct{}

	mu   sync.Mutex
	seen map[string]int // busy page → answers given
}

// startFixture starts the fixture server on a free loopback port.
func startFixture() (*fixture, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start fixture server: %w", err)
	}
	f := &fixture{base: "http://" + ln.Addr().String(), done: make(chan struct{}), seen: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{kind}/{name}", f.page)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(f.done)
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

// url is the URL of a page of the kind, named after its job and index.
func (f *fixture) url(kind string, job, idx int) string {
	return fmt.Sprintf("%s/%s/j%d-%d", f.base, kind, job+1, idx)
}

// close stops the server, ending any request in progress.
func (f *fixture) close() {
	_ = f.srv.Close()
	<-f.done
}

func (f *fixture) page(w http.ResponseWriter, r *http.Request) {
	kind, name := r.PathValue("kind"), r.PathValue("name")
	switch kind {
	case pageFast:
		f.wait(r.Context(), fastDelay)
	case pageSlow:
		f.wait(r.Context(), slowDelay)
	case pageBusy:
		f.mu.Lock()
		f.seen[name]++
		n := f.seen[name]
		f.mu.Unlock()
		if n <= busyTimes {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy, come back later", http.StatusTooManyRequests)
			return
		}
	case pageMissing:
		http.NotFound(w, r)
		return
	case pageBroken:
		http.Error(w, "the fixture broke on purpose", http.StatusInternalServerError)
		return
	case pagePanic:
		w.Header().Set(demoPanicHeader, "panic")
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<h1>%s page %s</h1>\n<p>%s</p>\n", strings.ToUpper(kind[:1])+kind[1:], name, lorem)
}

// wait pauses a handler for d, or until its request is gone.
func (f *fixture) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

const lorem = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor " +
	"incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation."

// errDemoPanic is what the demo's FetchFunc panics with.
var errDemoPanic = errors.New("demo: this page makes the fetch panic")

// panicOnDemoHeader wraps the fetcher's transport so that a response with
// demoPanicHeader makes the fetch panic, as a bug in a FetchFunc would; it
// counts each such panic in d first.
func panicOnDemoHeader(next http.RoundTripper, d *deliberate) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && resp.Header.Get(demoPanicHeader) != "" {
			resp.Body.Close()
			d.count.Add(1)
			panic(errDemoPanic)
		}
		return resp, err
	})
}

// deliberate counts the panics the demo causes, and the log records of
// them its log has dropped.
type deliberate struct {
	count   atomic.Int64
	dropped atomic.Int64
}

// demoLog is the demo's log: it drops the records of the demo's own
// panics (the runner logs each as an error, then a worker restart), as many
// as the panic page caused, and passes every other record on.
type demoLog struct {
	slog.Handler
	panics *deliberate
}

// Handle drops a record of a deliberate panic, and passes the others on.
func (l *demoLog) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "fetch panicked") {
		if l.panics.dropped.Load() < l.panics.count.Load() {
			l.panics.dropped.Add(1)
			return nil
		}
	}
	if strings.HasPrefix(r.Message, "worker restarted after a panic") && l.panics.dropped.Load() > 0 {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

// WithAttrs and WithGroup keep the filter.
func (l *demoLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &demoLog{Handler: l.Handler.WithAttrs(as), panics: l.panics}
}

func (l *demoLog) WithGroup(name string) slog.Handler {
	return &demoLog{Handler: l.Handler.WithGroup(name), panics: l.panics}
}

// roundTripFunc is a function that is an [http.RoundTripper].
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
