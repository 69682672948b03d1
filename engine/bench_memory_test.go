package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
)

// BenchmarkRunner_PeakRSS runs 1,000 jobs × 32 targets through a runner with
// the default Config (8 live jobs at a time, one per caller, one worker, 64
// MiB of results) on a directory store, as a service would, and reports the
// process's peak resident set: peak-RSS-MiB (VmHWM, reset at the start of
// the op, so earlier benchmarks in the process do not count), and
// heap-MiB, the Go heap in use at the end, after a GC. Each result is 4 KiB
// of content, so 128 MiB pass through the store and eviction runs.
//
// One op is the whole run; use -benchtime=1x, and a process of its own for
// a clean figure (`make bench` does both).
func BenchmarkRunner_PeakRSS(b *testing.B) {
	const (
		jobs    = 1000
		perJob  = 32
		live    = engine.DefaultJobsTotal
		content = 4 << 10
	)
	result := engine.Result{Content: strings.Repeat("x", content), Meta: map[string]any{"status": 200}}
	var peak, heap float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		debug.FreeOSMemory()
		if err := benchResetPeakRSS(); err != nil {
			b.Skipf("cannot reset the peak RSS: %v", err)
		}
		store := benchStore(b)
		ended := make(chan struct{}, jobs)
		r, err := engine.New(store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			return result, nil
		}, engine.Config{Hooks: engine.Hooks{Job: func(o string) {
			if o != "created" {
				ended <- struct{}{}
			}
		}}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for j := 0; j < jobs; j++ {
			if j >= live {
				select {
				case <-ended:
				case <-time.After(benchTimeout):
					b.Fatal("no job ended")
				}
			}
			ts := make([]engine.Target, perJob)
			for k := range ts {
				ts[k] = engine.Target{URL: "https://example.com/" + strconv.Itoa(j) + "/" + strconv.Itoa(k)}
			}
			c := &engine.Caller{Name: "caller-" + strconv.Itoa(j)}
			for {
				_, _, err := r.Submit(context.Background(), c, "", ts)
				if err == nil {
					break
				}
				if !errors.Is(err, engine.ErrBusy) { // the ended job may not be off the count yet
					b.Fatalf("job %d: %v", j, err)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		for j := 0; j < live; j++ {
			<-ended
		}
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap += float64(ms.HeapInuse)
		hwm, err := benchPeakRSS()
		if err != nil {
			b.Fatal(err)
		}
		peak += float64(hwm)
		r.Close()
	}
	b.ReportMetric(peak/float64(b.N)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(heap/float64(b.N)/(1<<20), "heap-MiB")
}

// benchResetPeakRSS resets the process's peak resident set (Linux ≥ 4.0).
func benchResetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// benchPeakRSS returns the process's peak resident set in bytes (VmHWM).
func benchPeakRSS() (int64, error) {
	f, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(f))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}
