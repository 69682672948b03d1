package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestRunner_Soak runs SOAK_JOBS jobs (make soak: 100,000) through one
// runner on a directory store, SOAK_RATE (150) jobs a second, so over ten
// minutes of real time, with the sweep and eviction both at work: the
// injected clock moves a second per job, so with a TTL of 30 minutes about
// 1,800 jobs are readable at a time; every 500th job stores large results
// (2.4 MB, in Badger's value log), past MaxBytes (8 MiB), and eviction
// deletes the oldest jobs. It samples RSS, the heap, the store's size on
// disk and the stored jobs, logs them as a table, and checks that the pace
// holds and that RSS and the disk level off (see the end). Skipped unless
// SOAK_JOBS is set.
func TestRunner_Soak(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SOAK_JOBS"))
	if n <= 0 {
		t.Skip("set SOAK_JOBS (make soak) to run the soak test")
	}
	const (
		ttl      = 30 * time.Minute
		maxBytes = 8 << 20
		perJob   = 4
	)
	dir := t.TempDir()
	store, err := persistence.Open(dir)
	require.NoError(t, err)
	clk := testkit.NewClock()
	ended := make(chan struct{}, 1)
	var targets, endedJobs atomic.Int64
	counter := &soakLog{}
	r, err := engine.New(store, func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if len(tg.URL)%10 == 0 {
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "not found", Hint: "check the URL"}
		}
		if strings.Contains(tg.URL, "/big/") {
			return engine.Result{Content: strings.Repeat("B", 600<<10)}, nil
		}
		return engine.Result{Content: strings.Repeat("s", 256+int(tg.URL[len(tg.URL)-1])*12), Meta: map[string]any{"n": len(tg.URL)}}, nil
	}, engine.Config{
		TTL: ttl, MaxBytes: maxBytes, Workers: 2, JobsTotal: 32, JobsPerCaller: 4, Now: clk.Now,
		Hooks: engine.Hooks{
			Target: func(error, time.Duration, int) { targets.Add(1) },
			Job: func(o string) {
				if o != "created" && o != "reused" {
					endedJobs.Add(1)
					select {
					case ended <- struct{}{}:
					default:
					}
				}
			},
		},
	}, slog.New(counter))
	require.NoError(t, err)
	defer func() {
		r.Close()
		require.NoError(t, store.Close())
	}()

	type sample struct {
		jobs                   int
		elapsed                time.Duration
		rss, heap, disk, bytes int64
		sst, vlog              int64
		stored                 int
	}
	var samples []sample
	take := func(jobs int, elapsed time.Duration) sample {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		stored := 0
		require.NoError(t, store.Jobs(func(persistence.JobRecord) bool { stored++; return true }))
		disk, kinds := diskBytes(t, dir)
		s := sample{jobs: jobs, elapsed: elapsed, rss: rssBytes(t), heap: int64(m.HeapInuse), disk: disk,
			sst: kinds["sst"], vlog: kinds["vlog"], bytes: store.Bytes(), stored: stored}
		samples = append(samples, s)
		t.Logf("%d jobs, %s: RSS %.1f MiB, heap %.1f MiB, disk %.1f MiB (sst %.1f, vlog %.1f, mem %.1f), %d stored",
			s.jobs, s.elapsed.Round(100*time.Millisecond), mb(s.rss), mb(s.heap), mb(s.disk), mb(s.sst), mb(s.vlog), mb(kinds["mem"]), s.stored)
		return s
	}
	// Paced: Badger's value-log GC runs every 5 minutes of real time, so a
	// run that does 100,000 jobs in a minute would only show its garbage.
	rate := 150.0
	if v := os.Getenv("SOAK_RATE"); v != "" {
		rate, err = strconv.ParseFloat(v, 64)
		require.NoError(t, err, "SOAK_RATE")
	}
	pace := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer pace.Stop()
	every := max(n/20, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	take(0, 0)
	for i := 0; i < n; {
		<-pace.C
		ts := make([]engine.Target, 1+rng.IntN(perJob))
		for k := range ts {
			ts[k] = engine.Target{URL: fmt.Sprintf("https://soak.example/%d/%d/%c", i, k, 'a'+rng.IntN(26))}
			if i%500 == 250 {
				// Now and then a job of large results: eviction's work.
				ts[k].URL = fmt.Sprintf("https://soak.example/big/%d/%d/b", i, k)
			}
		}
		_, _, err := r.Submit(context.Background(), enginetest.Caller("c"+strconv.Itoa(i%16)), "", ts)
		if errors.Is(err, engine.ErrBusy) || errors.Is(err, engine.ErrCallerBusy) {
			select {
			case <-ended:
			case <-time.After(testkit.Deadline):
				t.Fatalf("no job ended for %s", testkit.Deadline)
			}
			continue
		}
		require.NoError(t, err)
		i++
		clk.Advance(time.Second)
		if i%every == 0 {
			take(i, time.Since(start))
		}
	}
	testkit.WaitFor(t, "every job ended", func() bool { return endedJobs.Load() == int64(n) })
	elapsed := time.Since(start)
	last := take(n, elapsed)
	if p := os.Getenv("SOAK_HEAPPROFILE"); p != "" {
		f, err := os.Create(p)
		require.NoError(t, err)
		runtime.GC()
		require.NoError(t, pprof.WriteHeapProfile(f))
		require.NoError(t, f.Close())
	}

	t.Logf("soak: %d jobs, %d targets in %s (%.0f jobs/s); %d sweeps deleted %d jobs, %d evictions deleted %d jobs",
		n, targets.Load(), elapsed.Round(time.Second), float64(n)/elapsed.Seconds(),
		counter.sweeps.Load(), counter.swept.Load(), counter.evictions.Load(), counter.evicted.Load())
	t.Logf("| jobs | time | RSS MiB | heap MiB | disk MiB | stored jobs | result MiB |")
	t.Logf("|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range samples {
		t.Logf("| %d | %s | %.1f | %.1f | %.1f | %d | %.1f |", s.jobs, s.elapsed.Round(100*time.Millisecond),
			mb(s.rss), mb(s.heap), mb(s.disk), s.stored, mb(s.bytes))
	}

	// Level off. Badger's value-log GC runs every 5 minutes of real time:
	// the disk, and RSS (which counts the store's mapped files), climb
	// between two runs of it and drop at one. So the run must have seen the
	// disk drop by a third at least once, and it must end no higher than
	// the first half's peak (plus a quarter): nothing piles up from one GC
	// cycle to the next.
	var midRSS, midDisk int64
	dropped := false
	for i, s := range samples {
		if s.jobs <= n/2 {
			midRSS, midDisk = max(midRSS, s.rss), max(midDisk, s.disk)
		}
		if i > 0 && s.disk < samples[i-1].disk*2/3 {
			dropped = true
		}
	}
	pace.Stop()
	jobsPerSecond := func(from, to int) float64 {
		var a, b sample
		for _, s := range samples {
			if s.jobs <= from {
				a = s
			}
			if s.jobs <= to {
				b = s
			}
		}
		return float64(b.jobs-a.jobs) / (b.elapsed - a.elapsed).Seconds()
	}
	early, late := jobsPerSecond(0, n/2), jobsPerSecond(n*3/4, n)
	t.Logf("soak: %.0f jobs/s in the first half, %.0f in the last quarter; first half's peak RSS %.1f MiB, disk %.1f MiB; at the end %.1f MiB, %.1f MiB",
		early, late, mb(midRSS), mb(midDisk), mb(last.rss), mb(last.disk))
	require.GreaterOrEqual(t, late, early/2, "the pace holds")
	require.True(t, dropped, "the value-log GC reclaimed space (run for 10 minutes at least)")
	require.LessOrEqual(t, last.rss, midRSS*5/4, "RSS levels off")
	require.LessOrEqual(t, last.disk, midDisk*5/4+8<<20, "the store's size on disk levels off")
	require.LessOrEqual(t, last.bytes, int64(maxBytes)+1<<20, "eviction keeps the result bytes near MaxBytes")
	require.Less(t, last.stored, n/10, "the sweep and eviction keep the stored jobs bounded")
	require.NotZero(t, counter.swept.Load(), "the sweep deleted jobs")
	require.NotZero(t, counter.evicted.Load(), "eviction deleted jobs")
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// rssBytes reads VmRSS from /proc/self/status.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// diskBytes is the space dir's files take on disk (allocated blocks: Badger
// preallocates sparse files, whose length says little), in all and by kind:
// sst (the LSM tree), vlog (the value log: results over 64 KiB), mem (the
// memtables' write-ahead logs).
func diskBytes(t *testing.T, dir string) (total int64, byKind map[string]int64) {
	t.Helper()
	byKind = map[string]int64{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return nil // gone meanwhile (compaction)
		}
		total += st.Blocks * 512
		byKind[strings.TrimPrefix(filepath.Ext(p), ".")] += st.Blocks * 512
		return nil
	}))
	return total, byKind
}

// soakLog is a slog handler that counts the runner's sweep and eviction
// lines (Debug) and drops everything.
type soakLog struct {
	sweeps, swept, evictions, evicted atomic.Int64
}

func (h *soakLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelDebug }

func (h *soakLog) Handle(_ context.Context, r slog.Record) error {
	var calls, count *atomic.Int64
	switch r.Message {
	case "swept expired jobs":
		calls, count = &h.sweeps, &h.swept
	case "evicted jobs":
		calls, count = &h.evictions, &h.evicted
	default:
		return nil
	}
	calls.Add(1)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "count" {
			count.Add(a.Value.Int64())
		}
		return true
	})
	return nil
}

func (h *soakLog) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *soakLog) WithGroup(string) slog.Handler { return h }
