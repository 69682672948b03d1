package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestAdv36d_EngineReadCrowdUnderFsyncEIO (adversarial, branch adv36d,
// issue 36): an embedder's runner (Open, DurabilitySync, every hook
// panicking) on the power-cut file system has done jobs and a live one
// when every fsync starts failing with EIO. While it lasts, 12 readers
// call Lookup, Targets, Result and List on the done jobs and one writer
// submits and cancels. Rules: a failed fsync is never answered as
// success (Submit returns an error, wrapping ErrNotSynced, ErrDiskFull or
// ErrUnavailable: the cause named); every read returns (within
// testkit.Deadline) and either answers or names the cause (ErrUnavailable):
// a done job is never answered as gone (ErrNotFound, or Targets and Result
// false); once the fault clears the runner goes on by itself (the live
// job ends, a new Submit succeeds and runs to done); after a power cut
// every job a Submit acknowledged is there, and a Cancel that returned
// true reads cancelled.
//
// What it shows (main 55b6b47): see the report of branch adv36d.
func TestAdv36d_EngineReadCrowdUnderFsyncEIO(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	backing, mnt := t.TempDir(), t.TempDir()
	fs, err := powercut.Mount(backing, mnt, powercut.Options{Seed: 36860})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Cut(powercut.DropAll) })
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.Contains(tg.URL, "hold") {
			select {
			case <-release:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		}
		return engine.Result{Content: strings.Repeat("y", 5000) + tg.URL}, nil
	}
	boom := func() { panic("hook panics while every fsync fails") }
	hooks := engine.Hooks{
		Job:        func(string) { boom() },
		Target:     func(error, time.Duration, int) { boom() },
		JobSeconds: func(time.Duration) { boom() },
		Depth:      func(int) { boom() },
		Inflight:   func(int) { boom() },
	}
	cfg := engine.Config{Hooks: hooks, Durability: engine.DurabilitySync, JobsPerCaller: 8, RetryWait: 100 * time.Millisecond}
	dir := filepath.Join(mnt, "store")
	r, err := engine.Open(dir, fetch, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			r.Close()
		}
	})
	ctx := context.Background()
	alice := &engine.Caller{Name: "alice"}
	var done []string
	for i := range 4 {
		id, _, err := r.Submit(ctx, alice, "", []engine.Target{{URL: fmt.Sprintf("https://a.example/%d/1", i)}, {URL: fmt.Sprintf("https://a.example/%d/2", i)}})
		if err != nil {
			t.Fatal(err)
		}
		if j, err := r.Wait(ctx, id); err != nil || j.Status != "done" {
			t.Fatalf("job %s: %+v %v", id, j, err)
		}
		done = append(done, id)
	}
	liveID, _, err := r.Submit(ctx, &engine.Caller{Name: "bob"}, "", []engine.Target{{URL: "https://b.example/hold/1"}})
	if err != nil {
		t.Fatal(err)
	}
	acked := append([]string{liveID}, done...)

	before := fs.Stats()
	fs.FailFsyncs(1)
	var (
		mu       sync.Mutex
		counts   = map[string]int{}
		bad      = map[string]int{}
		sample   = map[string]string{}
		canceled []string
	)
	note := func(what string, err error, good bool) {
		mu.Lock()
		defer mu.Unlock()
		k := what
		if err != nil {
			k += ": " + firstWords(err.Error())
		}
		counts[k]++
		if !good {
			if bad[k] == 0 {
				sample[k] = fmt.Sprint(err)
			}
			bad[k]++
		}
	}
	unavailable := func(err error) bool {
		return errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrDiskFull)
	}
	var wg sync.WaitGroup
	var inflight [13]atomic.Int64
	for w := range 12 {
		wg.Go(func() {
			for i := range 60 {
				inflight[w].Store(time.Now().UnixNano())
				id := done[(w+i)%len(done)]
				switch (w + i) % 4 {
				case 0:
					j, err := r.Lookup(id)
					note("Lookup", err, (err == nil && j.Status == "done") || (err != nil && unavailable(err) && !errors.Is(err, engine.ErrNotFound)))
				case 1:
					_, ts, ok := r.Targets(id)
					note(fmt.Sprintf("Targets ok=%v", ok), nil, ok && len(ts) == 2)
				case 2:
					res, ok := r.Result(id, 1)
					note(fmt.Sprintf("Result ok=%v", ok), nil, ok && res != nil && strings.HasSuffix(res.Content, "/2"))
				case 3:
					js, _, err := r.List("alice", engine.ListOptions{})
					note("List", err, (err == nil && len(js) == len(done)) || (err != nil && unavailable(err)))
				}
				inflight[w].Store(0)
			}
		})
	}
	var nilSubmits []string
	wg.Go(func() {
		for i := range 6 {
			inflight[12].Store(time.Now().UnixNano())
			id, _, err := r.Submit(ctx, alice, "", []engine.Target{{URL: fmt.Sprintf("https://c.example/%d", i)}})
			inflight[12].Store(0)
			if err == nil {
				mu.Lock()
				nilSubmits = append(nilSubmits, id)
				mu.Unlock()
			}
			note("Submit", err, err != nil && (errors.Is(err, engine.ErrNotSynced) || unavailable(err)))
			if i == 2 {
				inflight[12].Store(time.Now().UnixNano())
				ok := r.Cancel(liveID)
				inflight[12].Store(0)
				note(fmt.Sprintf("Cancel=%v", ok), nil, true)
				if ok {
					mu.Lock()
					canceled = append(canceled, liveID)
					mu.Unlock()
				}
			}
		}
	})
	crowdDone := make(chan struct{})
	go func() { wg.Wait(); close(crowdDone) }()
	end := time.NewTimer(testkit.Deadline)
	defer end.Stop()
	select {
	case <-crowdDone:
	case <-end.C:
		var stuck []string
		for w := range inflight {
			if b := inflight[w].Load(); b != 0 {
				stuck = append(stuck, fmt.Sprintf("caller %d for %s", w, time.Since(time.Unix(0, b)).Round(time.Second)))
			}
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var gs []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "adv36d_linux_test.go") || (strings.Contains(g, "sift/batch/") && !strings.Contains(g, "[select") && !strings.Contains(g, "chan receive]:\nruntime")) {
				gs = append(gs, g[:min(len(g), 2500)])
			}
		}
		mu.Lock()
		t.Logf("answers so far: %v", counts)
		mu.Unlock()
		fs.FailFsyncs(0)
		releaseOnce.Do(func() { close(release) })
		t.Fatalf("a call under EIO on every fsync had not returned within %s: %v (failed fsyncs %d); goroutines:\n%s", testkit.Deadline, stuck, fs.Stats().FailedSyncs-before.FailedSyncs, strings.Join(gs[:min(len(gs), 16)], "\n--\n"))
	}
	t.Logf("under EIO on every fsync (%d failed fsyncs): %v", fs.Stats().FailedSyncs-before.FailedSyncs, counts)
	for k, v := range bad {
		t.Errorf("under EIO on every fsync: %s ×%d (e.g. %s)", k, v, sample[k])
	}
	for _, id := range nilSubmits {
		t.Errorf("Submit returned nil (job %s) while every fsync failed: a failed fsync answered as success", id)
	}
	acked = append(acked, nilSubmits...)

	fs.FailFsyncs(0)
	releaseOnce.Do(func() { close(release) })
	testkit.WaitFor(t, "the live job to end once the fault cleared", func() bool {
		j, err := r.Lookup(liveID)
		return err == nil && !engine.IsLive(j.Status)
	})
	var fresh string
	testkit.WaitFor(t, "a Submit to succeed once the fault cleared", func() bool {
		id, _, err := r.Submit(ctx, alice, "", []engine.Target{{URL: "https://d.example/fresh"}})
		fresh = id
		return err == nil
	})
	wctx, cancel := context.WithTimeout(ctx, testkit.Deadline)
	defer cancel()
	if j, err := r.Wait(wctx, fresh); err != nil || j.Status != "done" {
		t.Errorf("a new job once the fault cleared: %+v %v", j, err)
	}
	acked = append(acked, fresh)
	r.Close()
	closed = true
	if err := fs.Cut(powercut.DropAll); err != nil {
		t.Fatal(err)
	}
	fs2, err := powercut.Mount(backing, mnt, powercut.Options{Seed: 36861})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs2.Unmount() })
	r2, err := engine.Open(dir, fetch, engine.Config{Durability: engine.DurabilitySync}, nil)
	if err != nil {
		t.Fatalf("open after the cut: %v", err)
	}
	defer r2.Close()
	for _, id := range acked {
		j, err := r2.Lookup(id)
		if err != nil {
			t.Errorf("after the cut, acknowledged job %s: %v", id, err)
			continue
		}
		if len(canceled) > 0 && id == canceled[0] && j.Status != "cancelled" {
			t.Errorf("after the cut, job %s whose Cancel returned true under EIO reads %s", id, j.Status)
		}
	}
}

// firstWords is an error's text up to its first colon (its cause's
// wrapper), to count errors by kind.
func firstWords(s string) string {
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
