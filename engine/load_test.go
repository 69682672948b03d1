package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// loadDuration is how long TestRunner_Load runs: LOAD_SECONDS, or 2.5s (it
// runs under -race in make test, not under -short; make load runs it for
// 20s).
func loadDuration(t *testing.T) time.Duration {
	s := os.Getenv("LOAD_SECONDS")
	if s == "" {
		return 2500 * time.Millisecond
	}
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "LOAD_SECONDS")
	return time.Duration(v * float64(time.Second))
}

// loadCounts are the hooks' counts.
type loadCounts struct {
	jobs        sync.Map // outcome → *atomic.Int64
	targets     atomic.Int64
	targetBytes atomic.Int64
	jobSeconds  atomic.Int64
	maxDepth    atomic.Int64
	maxInflight atomic.Int64
}

func (c *loadCounts) job(o string) int64 {
	v, ok := c.jobs.Load(o)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func (c *loadCounts) hooks() engine.Hooks {
	return engine.Hooks{
		Job: func(o string) {
			v, _ := c.jobs.LoadOrStore(o, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		},
		Target: func(_ error, _ time.Duration, n int) {
			c.targets.Add(1)
			c.targetBytes.Add(int64(n))
		},
		JobSeconds: func(time.Duration) { c.jobSeconds.Add(1) },
		Depth:      func(n int) { storeMax(&c.maxDepth, int64(n)) },
		Inflight:   func(n int) { storeMax(&c.maxInflight, int64(n)) },
	}
}

// loadFetch answers at random: a result, a TargetError, a plain error, a
// panic, or busy.
func loadFetch(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
	if err := ctx.Err(); err != nil {
		return engine.Result{}, err
	}
	switch n := rand.IntN(100); {
	case n < 55:
		return engine.Result{Content: strings.Repeat("r", rand.IntN(2048)), Meta: map[string]any{"caller": c.Name}}, nil
	case n < 70:
		return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found " + tg.URL, Hint: "check " + tg.URL}
	case n < 80:
		return engine.Result{}, fmt.Errorf("get %s with %s: connection reset", tg.URL, c.KeySHA256)
	case n < 85:
		panic(secretPanic + " " + tg.URL + " " + c.KeySHA256)
	default:
		return engine.Result{}, fmt.Errorf("%s answered 429: %w", tg.URL, engine.ErrRetryLater)
	}
}

// TestRunner_Load has 200 goroutines submit, read, touch and cancel against
// a runner with raised caps and a FetchFunc that succeeds, fails, panics and
// answers busy at random, for LOAD_SECONDS (2.5s by default). Then every job
// is terminal; the counts of Status and of the hooks agree; no cap was
// exceeded at any observed moment (the hooks' depth and in-flight counts,
// and the store's live jobs per caller sampled throughout); the goroutines
// are back to where they started; no log line carries a secret. It reports
// ops/s and the heap before and after.
//
// Not parallel: the goroutine count is measured around it.
func TestRunner_Load(t *testing.T) {
	testkit.Long(t)
	dur := loadDuration(t)
	clients := 200
	if s := os.Getenv("LOAD_CLIENTS"); s != "" {
		var err error
		clients, err = strconv.Atoi(s)
		require.NoError(t, err, "LOAD_CLIENTS")
	}
	const (
		callers       = 40
		jobsTotal     = 64
		jobsPerCaller = 4
		workers       = 2
		perJob        = 8
	)
	goroutines0 := runtime.NumGoroutine()
	heap0 := heapInUse()

	store, err := persistence.Open(t.TempDir())
	require.NoError(t, err)
	counts := &loadCounts{}
	log := &logScanner{}
	r, err := engine.New(store, loadFetch, engine.Config{
		Workers: workers, JobsTotal: jobsTotal, JobsPerCaller: jobsPerCaller, TargetsPerJob: perJob,
		MaxBytes: 1 << 40, RetryWait: 2 * time.Millisecond, RetryFor: 20 * time.Millisecond, Hooks: counts.hooks(),
	}, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.NoError(t, err)
	heapStart := heapInUse()

	// The cap sampler: the store's live jobs, per caller and in all, from
	// one snapshot. A job is stored live before the supervisor counts it
	// and stored ended before it stops counting it, so the store never
	// shows more live jobs than the supervisor allows.
	stopSampling := make(chan struct{})
	sampled := make(chan error, 1)
	samples := 0
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var violation error
		for {
			select {
			case <-stopSampling:
				sampled <- violation
				return
			case <-tick.C:
			}
			left, err := store.Unsettled()
			if err != nil {
				violation = err
				continue
			}
			samples++
			per, live := map[string]int{}, 0
			for _, j := range left {
				if persistence.IsLive(j.Status) {
					live++
					per[j.Caller]++
					if per[j.Caller] > jobsPerCaller && violation == nil {
						violation = fmt.Errorf("caller %s has %d live jobs", j.Caller, per[j.Caller])
					}
				}
			}
			if live > jobsTotal && violation == nil {
				violation = fmt.Errorf("%d live jobs", live)
			}
		}
	}()

	var (
		mu      sync.Mutex
		ids     []string
		created = map[string]bool{}
		ops     [4]atomic.Int64 // submit, status, touch, cancel
		refused atomic.Int64
		reused  atomic.Int64
		wg      sync.WaitGroup

		reusedIDs []string // under mu
	)
	pick := func(rng *rand.Rand) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(ids) == 0 {
			return "", false
		}
		return ids[rng.IntN(len(ids))], true
	}
	start := time.Now()
	deadline := start.Add(dur)
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(deadline) {
				switch n := rng.IntN(100); {
				case n < 30:
					ops[0].Add(1)
					name := "c" + strconv.Itoa(rng.IntN(callers))
					ts := make([]engine.Target, 1+rng.IntN(perJob))
					for i := range ts {
						// A small space of URLs: the same submission comes again,
						// and is reused while its job is not failed or cancelled.
						ts[i] = engine.Target{URL: secretURL(strconv.Itoa(rng.IntN(6)), i)}
					}
					id, re, err := r.Submit(context.Background(), &engine.Caller{Name: name, KeySHA256: secretKey}, "agent", ts)
					switch {
					case errors.Is(err, engine.ErrCallerBusy), errors.Is(err, engine.ErrBusy):
						refused.Add(1)
						continue
					case err != nil:
						t.Errorf("submit: %v", err)
						return
					}
					mu.Lock()
					if re {
						// Checked once every submit has returned: the
						// submit that created it may not have taken mu yet.
						reusedIDs = append(reusedIDs, id)
					} else {
						if created[id] {
							t.Errorf("job id %s handed out twice", id)
						}
						created[id] = true
						ids = append(ids, id)
					}
					mu.Unlock()
				case n < 80:
					ops[1].Add(1)
					if id, ok := pick(rng); ok {
						j, ts, ok := r.Status(id)
						if !ok || len(ts) != j.TargetsTotal || j.TargetsDone > j.TargetsTotal {
							t.Errorf("status %s: %v %+v", id, ok, j)
							return
						}
					}
				case n < 95:
					ops[2].Add(1)
					if id, ok := pick(rng); ok {
						r.Touch(id)
					}
				default:
					ops[3].Add(1)
					if id, ok := pick(rng); ok {
						r.Cancel(id)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reused.Store(int64(len(reusedIDs)))
	for _, id := range reusedIDs {
		if !created[id] {
			t.Errorf("reused %s, which was never created", id)
		}
	}

	// Every job ends by itself (busy targets fail after RetryFor).
	terminal := map[string]int{}
	targetsDone := 0
	testkit.WaitFor(t, "every job terminal", func() bool {
		clear(terminal)
		targetsDone = 0
		for _, id := range ids {
			j, _, ok := r.Status(id)
			if !ok || persistence.IsLive(j.Status) {
				return false
			}
			terminal[j.Status]++
			targetsDone += j.TargetsDone
		}
		return true
	})
	close(stopSampling)
	require.NoError(t, <-sampled, "a cap was exceeded")
	heapEnd := heapInUse()

	// Compare with the hooks after Close: it returns once every job actor
	// has stopped, so after their hooks, and after a cancelled job's target
	// in flight is stored. Status then reads the store.
	r.Close()
	clear(terminal)
	targetsDone = 0
	for _, id := range ids {
		j, _, ok := r.Status(id)
		require.True(t, ok, "status %s after Close", id)
		terminal[j.Status]++
		targetsDone += j.TargetsDone
	}
	require.Equal(t, int64(len(ids)), counts.job("created"), "created: Submit and the hooks agree")
	require.Equal(t, reused.Load(), counts.job("reused"))
	ended := 0
	for _, o := range []string{"done", "partial", "failed", "cancelled"} {
		require.Equal(t, int64(terminal[o]), counts.job(o), "%s: Status and the hooks agree", o)
		ended += terminal[o]
	}
	require.Equal(t, len(ids), ended)
	require.Equal(t, int64(ended), counts.jobSeconds.Load(), "JobSeconds once per job")
	require.Equal(t, int64(targetsDone), counts.targets.Load(), "targets stored: Status and the hooks agree")
	require.LessOrEqual(t, counts.maxDepth.Load(), int64(jobsTotal))
	require.LessOrEqual(t, counts.maxInflight.Load(), int64(workers))
	require.NoError(t, store.Close())
	testkit.WaitFor(t, "goroutines back to the start", func() bool { return runtime.NumGoroutine() <= goroutines0 })
	heapClosed := heapInUse()
	lines := log.check(t)

	total := ops[0].Load() + ops[1].Load() + ops[2].Load() + ops[3].Load()
	t.Logf("load: %d goroutines for %s: %d ops (%.0f ops/s): %d submits (%d jobs created, %d reused, %d refused by a cap), "+
		"%d status, %d touch, %d cancel; jobs %v; %d targets stored; max live %d/%d, max in flight %d/%d, %d cap samples; "+
		"goroutines %d before, %d after; heap in use %s before, %s with the runner started, %s at the end, %s after Close; %d log lines scanned",
		clients, elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(), ops[0].Load(), len(ids), reused.Load(), refused.Load(),
		ops[1].Load(), ops[2].Load(), ops[3].Load(), terminal, counts.targets.Load(), counts.maxDepth.Load(), jobsTotal,
		counts.maxInflight.Load(), workers, samples, goroutines0, runtime.NumGoroutine(),
		mib(heap0), mib(heapStart), mib(heapEnd), mib(heapClosed), lines)
	require.Less(t, heapClosed, heap0+32<<20, "the heap comes back after Close")
}

// heapInUse returns the heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
