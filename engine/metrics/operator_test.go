package metrics_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/metrics"
)

// TestMetrics_FetchOldest: siftbatch_fetch_oldest_seconds is the age of the
// oldest fetch in progress through Metrics.Fetch, by the metrics' clock,
// and 0 once none is.
func TestMetrics_FetchOldest(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	clock := testkit.NewClock()
	metrics.SetNow(m, clock.Now)
	entered, gate := make(chan struct{}), make(chan struct{})
	fetch := m.Fetch(func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		entered <- struct{}{}
		<-gate
		return engine.Result{Content: "page"}, nil
	})
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_fetch_oldest_seconds": 0})
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := fetch(context.Background(), &engine.Caller{Name: "a"}, engine.Target{URL: "https://example.com/"})
			done <- err
		}()
		testkit.Recv(t, entered)
		clock.Advance(90 * time.Second)
	}
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_fetch_oldest_seconds": 180})
	close(gate)
	for range 2 {
		if err := testkit.Recv(t, done); err != nil {
			t.Fatal(err)
		}
	}
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_fetch_oldest_seconds": 0})
}

// TestMetrics_SubmitsRefused: each cap's refusals are counted under their
// reason, read from the attached runner; both are 0 before Attach.
func TestMetrics_SubmitsRefused(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	wantValues(t, b.scrape(t), map[string]float64{
		`siftbatch_submits_refused_total{reason="caller_cap"}`: 0,
		`siftbatch_submits_refused_total{reason="global_cap"}`: 0,
	})
	gate := make(chan struct{})
	eb := enginetest.Setup(t, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		<-gate
		return engine.Result{}, nil
	}, engine.Config{JobsPerCaller: 1, JobsTotal: 1})
	defer close(gate)
	m.Attach(eb.Runner)
	eb.Submit(t, "alice", enginetest.Targets("a", 1))
	for _, c := range []string{"alice", "bob", "carol"} {
		if _, _, err := eb.Runner.Submit(context.Background(), enginetest.Caller(c), "", enginetest.Targets(c+"2", 1)); err == nil {
			t.Fatalf("%s's submit was not refused", c)
		}
	}
	wantValues(t, b.scrape(t), map[string]float64{
		`siftbatch_submits_refused_total{reason="caller_cap"}`: 1,
		`siftbatch_submits_refused_total{reason="global_cap"}`: 2,
	})
}

// TestMetrics_Store: the store's series read a real store at each scrape:
// its byte total, the MaxBytes given, and its write errors and retries.
func TestMetrics_Store(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	store := enginetest.OpenStore(t, "")
	b.reg.MustRegister(metrics.Store(store, 1<<20))
	wantValues(t, b.scrape(t), map[string]float64{
		"siftbatch_store_bytes": 0, "siftbatch_store_max_bytes": 1 << 20,
		"siftbatch_store_write_errors_total": 0, "siftbatch_store_write_retries_total": 0,
	})
	eb := enginetest.SetupOn(t, store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: "page"}, nil
	}, engine.Config{})
	eb.WaitSettled(t, eb.Submit(t, "alice", enginetest.Targets("a", 2)))
	if got := value(t, b.scrape(t), "siftbatch_store_bytes"); got <= 0 || got != float64(store.Bytes()) {
		t.Errorf("siftbatch_store_bytes %v, want the store's %d", got, store.Bytes())
	}
	store.SetWriteFault(func() error { return syscall.EIO })
	if _, _, err := eb.Runner.Submit(context.Background(), enginetest.Caller("bob"), "", enginetest.Targets("b", 1)); err == nil {
		t.Fatal("a submit stored on a failing disk")
	}
	store.SetWriteFault(nil)
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_store_write_errors_total": float64(store.WriteErrors())})
	if store.WriteErrors() < 1 {
		t.Errorf("WriteErrors %d after a failed submit", store.WriteErrors())
	}
}

type fetcherCounts struct{ deaths map[string]uint64 }

func (f fetcherCounts) FilterDeaths() map[string]uint64 { return f.deaths }
func (f fetcherCounts) Timeout() time.Duration          { return 3*time.Minute + 30*time.Second }

// TestMetrics_Fetcher: a fetcher's filter deaths by reason and its
// deadline.
func TestMetrics_Fetcher(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.reg.MustRegister(metrics.Fetcher(fetcherCounts{map[string]uint64{"crashed": 3, "timeout": 0}}))
	wantValues(t, b.scrape(t), map[string]float64{
		`siftbatch_filter_deaths_total{reason="crashed"}`: 3,
		`siftbatch_filter_deaths_total{reason="timeout"}`: 0,
		`siftbatch_fetch_timeout_seconds`:                 210,
	})
}

// TestMetrics_Membership: a node's member count and whether it is in its
// own member list, read at each scrape.
func TestMetrics_Membership(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	members, self := 3, true
	b.reg.MustRegister(metrics.Membership(func() (int, bool) { return members, self }))
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_cluster_members": 3, "siftbatch_cluster_member": 1})
	members, self = 2, false
	wantValues(t, b.scrape(t), map[string]float64{"siftbatch_cluster_members": 2, "siftbatch_cluster_member": 0})
}

// TestMetrics_LiveJobsByClass: the attached runner's live jobs by caller
// class, serve's classes under their own names, no class as "none", any
// other as "other"; every class at zero before and after.
func TestMetrics_LiveJobsByClass(t *testing.T) {
	t.Parallel()
	m, b := setup(t)
	zero := map[string]float64{}
	for _, c := range []string{"standard", "restricted", "admin", "none", "other"} {
		zero[`siftbatch_live_jobs_by_class{class="`+c+`"}`] = 0
	}
	wantValues(t, b.scrape(t), zero)
	gate := testkit.NewGate()
	eb := enginetest.Setup(t, enginetest.GatedFetch(gate), engine.Config{JobsPerCaller: 1, JobsTotal: 8})
	m.Attach(eb.Runner)
	var ids []string
	for i, class := range []string{"standard", "standard", "admin", "", "sift-internal", "batch-tier-7"} {
		id, _, err := eb.Runner.Submit(context.Background(), enginetest.Caller(fmt.Sprint("c", i)), class, enginetest.Targets(fmt.Sprint("t", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	wantValues(t, b.scrape(t), map[string]float64{
		`siftbatch_live_jobs_by_class{class="standard"}`:   2,
		`siftbatch_live_jobs_by_class{class="restricted"}`: 0,
		`siftbatch_live_jobs_by_class{class="admin"}`:      1,
		`siftbatch_live_jobs_by_class{class="none"}`:       1,
		`siftbatch_live_jobs_by_class{class="other"}`:      2,
	})
	gate.Open()
	for _, id := range ids {
		eb.WaitSettled(t, id)
	}
	wantValues(t, b.scrape(t), zero)
}
