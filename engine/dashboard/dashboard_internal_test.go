package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// panickyRunner panics on Job (a bug, as the dashboard sees it); it has
// no live jobs.
type panickyRunner struct{ runner }

func (panickyRunner) Live() []engine.Job { return nil }
func (panickyRunner) Job(string) (engine.Job, bool) {
	panic("https://secret.example/page PANIC-VALUE-7e1f")
}

// TestDashboard_HandlerPanic: a page whose handler panics (a bug) is
// answered 500, the dashboard goes on, and the log line holds neither the
// panic's value nor a URL.
func TestDashboard_HandlerPanic(t *testing.T) {
	t.Parallel()
	keys, err := httpapi.ReadKeys(strings.NewReader("alice alice-key\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.SyncBuffer
	h, err := newHandler(panickyRunner{}, keys, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	token, _ := h.sessions.create("alice", false, time.Now().Add(time.Hour), time.Now())
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, Prefix+"jobs/00112233445566778899aabbccddeeff", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: token})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "PANIC") {
			t.Fatalf("answer %d %q", rec.Code, rec.Body)
		}
	}
	if l := logs.String(); !strings.Contains(l, "dashboard handler panicked") || strings.Contains(l, "PANIC-VALUE") || strings.Contains(l, "secret.example") {
		t.Fatalf("log:\n%s", l)
	}
}

// TestDashboard_ThrottleTableBounded: the sign-in throttle's memory stays
// bounded however many addresses try. It counts the table's entries and
// the scans of the whole table instead of measuring the heap or the time:
// past maxBuckets addresses that all tried within the minute, the table
// starts again rather than grow, and the full scan runs once per
// maxBuckets/2 new addresses, not once for each; addresses that have not
// tried for a minute are the ones dropped.
func TestDashboard_ThrottleTableBounded(t *testing.T) {
	t.Parallel()
	th := throttle{perMinute: 5, m: make(map[string]*bucket)}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }
	const extra = 3 * maxBuckets / 10
	peak, scans := 0, 0
	for i := range maxBuckets + extra {
		if len(th.m) >= maxBuckets {
			scans++ // a new address finds the table full: a full scan
		}
		if ok, _ := th.allow(addr(i), now); !ok {
			t.Fatalf("address %d's first attempt refused", i)
		}
		peak = max(peak, len(th.m))
	}
	if peak > maxBuckets {
		t.Fatalf("the table held %d addresses, past its bound of %d", peak, maxBuckets)
	}
	if want := 1 + extra/(maxBuckets/2); scans > want {
		t.Fatalf("%d new addresses past the bound scanned the table %d times, want at most %d", extra, scans, want)
	}
	// Once the table is full again, a new address a minute later drops
	// every address whose bucket has filled since: all of them.
	for i := 0; len(th.m) < maxBuckets; i++ {
		th.allow("again "+addr(i), now)
	}
	th.allow("192.0.2.1", now.Add(time.Minute))
	if len(th.m) != 1 {
		t.Fatalf("a minute later, a new address finds %d addresses kept, want only itself", len(th.m))
	}
}

// TestStats_FetchQuantiles: the admin's p50 and p95 fetch times come from
// the histogram's buckets over the last 15 minutes, interpolated within a
// bucket as histogram_quantile does; targets stored before the window no
// longer count; before any target, there are none.
func TestStats_FetchQuantiles(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: seriesTargetSeconds, Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5}})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: seriesTargets})
	reg.MustRegister(h, c)
	var s stats
	at := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	step := 5 * time.Second
	s.sample(reg, at, step)
	if _, _, _, ok := s.fetchQuantiles(); ok {
		t.Fatal("quantiles before any target")
	}
	for i := range 100 {
		if i < 90 {
			h.Observe(0.03)
		} else {
			h.Observe(0.7)
		}
	}
	at = at.Add(step)
	s.sample(reg, at, step)
	near := func(got, want float64) bool { return got > want-1e-9 && got < want+1e-9 }
	p50, p95, n, ok := s.fetchQuantiles()
	if !ok || n != 100 || !near(p50, 0.05*50/90) || !near(p95, 0.5+0.5*5/10) {
		t.Fatalf("p50 %v p95 %v n %d ok %v; want %v, 0.75, 100", p50, p95, n, ok, 0.05*50/90)
	}
	// 16 minutes on, ten slower targets: the first hundred are out of the window.
	for range 16 * 60 / 5 {
		at = at.Add(step)
		s.sample(reg, at, step)
	}
	for range 10 {
		h.Observe(0.2)
	}
	at = at.Add(step)
	s.sample(reg, at, step)
	p50, p95, n, ok = s.fetchQuantiles()
	if !ok || n != 10 || !near(p50, 0.1+0.15*5/10) || !near(p95, 0.1+0.15*9.5/10) {
		t.Fatalf("after 16 minutes: p50 %v p95 %v n %d ok %v", p50, p95, n, ok)
	}
	if len(s.hist) > int(quantileWindow/step)+2 {
		t.Fatalf("%d readings kept for a %s window of %s steps", len(s.hist), quantileWindow, step)
	}
}

// TestDashboard_URLSearchesBounded: at most urlSearches searches by URL
// run at once across every session, shared fairly by caller: while
// another user's searches take every place, a search waits for one (it
// is not refused); a caller's search past its bound of searches waiting
// (one) answers 429 with Retry-After, reading nothing. A search by id or
// a plain page is never held up by them.
func TestDashboard_URLSearchesBounded(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
	b.Submit(t, "alice", enginetest.Targets("a", 1))
	keys, err := httpapi.ReadKeys(strings.NewReader("alice alice-key\n"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHandler(b.Runner, keys, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	token, _ := h.sessions.create("alice", false, time.Now().Add(time.Hour), time.Now())
	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: token})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	ctx := context.Background()
	for range urlSearches {
		if err := h.searches.Acquire(ctx, "mallory", false); err != nil { // another user's searches, running
			t.Fatal(err)
		}
	}
	for _, path := range []string{Prefix + "jobs", Prefix + "jobs?q=" + "abcd"} {
		if rec := get(path); rec.Code != http.StatusOK {
			t.Errorf("GET %s held up by the searches by URL: %d", path, rec.Code)
		}
	}
	// Alice's search waits for a place (it is not refused because
	// another user's searches run) ...
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- get(Prefix + "jobs?q=example") }()
	testkit.WaitFor(t, "alice's search waiting", func() bool { return h.searches.Waiting("alice") == 1 })
	// ... and her own second one, past her bound of searches waiting, is.
	if rec := get(Prefix + "jobs?q=example"); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "try again in a moment") {
		t.Fatalf("alice's second search waiting: %d %v", rec.Code, rec.Header())
	}
	h.searches.Release() // one of the other user's searches ends
	if rec := testkit.Recv(t, done); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "Searched the URLs of all 1 jobs") {
		t.Fatalf("alice's search once a place was free: %d", rec.Code)
	}
	if n := h.searches.Waiting("alice"); n != 0 {
		t.Fatalf("alice has %d searches waiting after hers ended", n)
	}
	h.searches.Release()
	if rec := get(Prefix + "jobs?q=example"); rec.Code != http.StatusOK {
		t.Fatalf("a search with every place free: %d", rec.Code)
	}
}
