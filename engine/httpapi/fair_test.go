package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/metrics"
)

// gatedJobs is a runner whose Lookup (the owner check), for the job gated, waits for a token
// on proceed; every Job call's id is logged in order.
type gatedJobs struct {
	runner
	gated   string
	entered chan string
	proceed chan struct{}
	mu      *sync.Mutex
	log     *[]string
}

func (g gatedJobs) Lookup(id string) (engine.Job, error) {
	g.mu.Lock()
	*g.log = append(*g.log, id)
	g.mu.Unlock()
	g.entered <- id
	if id == g.gated {
		<-g.proceed
	}
	return g.runner.Lookup(id)
}

// TestAPI_ReadsFairByCaller: with one turn, a caller that floods reads
// waits behind its own: another caller's read, come after four of hers,
// is served after one of them (round-robin by caller), and her reads past
// her queue's bound (MaxQueuedReads) are answered 429 with Retry-After at
// once, without any work, and counted (siftbatch_reads_refused_total on
// /metrics, beside the reads queued and waiting).
func TestAPI_ReadsFairByCaller(t *testing.T) {
	t.Parallel()
	r := newRunner(t, nil)
	ctx := context.Background()
	aliceJob, _, err := r.Submit(ctx, &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/a"}})
	if err != nil {
		t.Fatal(err)
	}
	bobJob, _, err := r.Submit(ctx, &engine.Caller{Name: "bob"}, "", []engine.Target{{URL: "https://example.com/b"}})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, r, aliceJob)
	waitJob(t, r, bobJob)
	var mu sync.Mutex
	var log []string
	g := gatedJobs{runner: r, gated: aliceJob, entered: make(chan string, 64), proceed: make(chan struct{}), mu: &mu, log: &log}
	h, err := newHandler(g, testAuth, Options{MaxInFlight: 1, MaxQueuedReads: 3})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key, id string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	type answer struct {
		who  string
		code int
	}
	answers := make(chan answer, 16)
	start := func(key, id string) {
		go func() { answers <- answer{key, get(key, id).Code} }()
	}
	start("alice-key", aliceJob) // holds the one turn, in Job
	if got := testkit.Recv(t, g.entered); got != aliceJob {
		t.Fatalf("first Job call %s", got)
	}
	for i := 1; i <= 3; i++ {
		start("alice-key", aliceJob)
		testkit.WaitFor(t, "alice's reads queued", func() bool { return h.reads.Waiting("alice") == i })
	}
	// Past her bound: 429 at once, no work done.
	rec := get("alice-key", aliceJob)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("alice's read past her queue: %d, Retry-After %q: %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	start("bob-key", bobJob)
	testkit.WaitFor(t, "bob's read queued", func() bool { return h.reads.Waiting("bob") == 1 })
	// The scheduler's counts, as /metrics shows them: 4 reads queued (3
	// of alice's, bob's), 1 refused, 4 waiting.
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Reads(h))
	scrape := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range []string{"siftbatch_reads_queued_total 4\n", "siftbatch_reads_refused_total 1\n", "siftbatch_reads_waiting 4\n"} {
		if !strings.Contains(scrape.Body.String(), line) {
			t.Errorf("/metrics has no %q:\n%s", line, scrape.Body)
		}
	}

	g.proceed <- struct{}{} // alice's first read ends; her second takes the turn
	if got := testkit.Recv(t, g.entered); got != aliceJob {
		t.Fatalf("second Job call %s, want alice's (she queued first)", got)
	}
	g.proceed <- struct{}{} // then bob's, before her third
	if got := testkit.Recv(t, g.entered); got != bobJob {
		t.Fatalf("third Job call %s, want bob's: one of alice's, then his", got)
	}
	for range 2 { // alice's last two, each after the one before
		if got := testkit.Recv(t, g.entered); got != aliceJob {
			t.Fatalf("Job call %s, want alice's", got)
		}
		g.proceed <- struct{}{}
	}
	codes := map[string][]int{}
	for range 5 {
		a := testkit.Recv(t, answers)
		codes[a.who] = append(codes[a.who], a.code)
	}
	if !slices.Equal(codes["alice-key"], []int{200, 200, 200, 200}) || !slices.Equal(codes["bob-key"], []int{200}) {
		t.Fatalf("answers %v: want every queued read served", codes)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{aliceJob, aliceJob, bobJob, aliceJob, aliceJob}; !slices.Equal(log, want) {
		t.Fatalf("Job calls %v, want %v: the refused read did no work", log, want)
	}
}
