package persistence

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkStore_DirSyncCost weighs a durable store's directory syncs
// (dirsync.go) against none in one run, interleaved: two durable stores,
// one syncing its directory for each new log file and one not (the
// baseline, noDirSync), written in turns of 64 outcomes (8 writers, one
// live job each), the order of the two swapped every turn, so that the
// machine's load falls on both alike. Results of 100 bytes (inline, the
// memtable's log) or 64 KiB (the value log); files of Open's sizes
// (default: a new value-log file every ~250 writes of 64 KiB) or of the
// power-cut rounds' (small, OpenWith: 128 KiB memtables, 1 MiB value-log
// files, a new file every ~16 such writes: the most directory syncs a
// store can be made to need). b.N outcomes go to each store. It reports
// each store's writes/s, their ratio (on/off; 1 is no cost), the
// directory syncs of the syncing store and the share of its time they
// took (dirsync-share: the throughput they cost, as every write waits for
// the lock they are made under).
func BenchmarkStore_DirSyncCost(b *testing.B) {
	files := map[string]Options{"default": {}, "small": {MemTableSize: MinMemTableSize, ValueLogFileSize: 1 << 20}}
	for _, f := range []string{"default", "small"} {
		for _, size := range []int{100, 64 << 10} {
			b.Run(fmt.Sprintf("files=%s/result=%d", f, size), func(b *testing.B) {
				on, off := costStore(b, files[f], true), costStore(b, files[f], false)
				before, beforeTime := on.s.DirSyncs(), on.s.dirSyncTime.Load()
				result := make([]byte, size)
				const turn = 64
				b.ResetTimer()
				for done, i := 0, 0; done < b.N; done, i = done+turn, i+1 {
					n := min(turn, b.N-done)
					first, second := on, off
					if i%2 == 1 {
						first, second = off, on
					}
					first.write(b, result, n)
					second.write(b, result, n)
				}
				b.StopTimer()
				won, woff := float64(b.N)/on.took.Seconds(), float64(b.N)/off.took.Seconds()
				b.ReportMetric(won, "on-writes/s")
				b.ReportMetric(woff, "off-writes/s")
				b.ReportMetric(won/woff, "on/off")
				b.ReportMetric(float64(on.s.DirSyncs()-before), "dir-syncs")
				// The share of the syncing store's time spent syncing its
				// directory, under the write lock that every write waits
				// on: the cost on throughput, measured within the one
				// store, free of the load's drift between the two.
				b.ReportMetric(float64(on.s.dirSyncTime.Load()-beforeTime)/float64(on.took), "dirsync-share")
			})
		}
	}
}

// costStoreT is one of BenchmarkStore_DirSyncCost's stores.
type costStoreT struct {
	s    *Store
	jobs []JobRecord
	next int64
	took time.Duration
}

func costStore(b *testing.B, o Options, dirSync bool) *costStoreT {
	s, err := OpenWith(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	s.noDirSync = !dirSync
	if err := s.SetDurable(true); err != nil {
		b.Fatal(err)
	}
	c := &costStoreT{s: s}
	for i := range 8 {
		c.jobs = append(c.jobs, putJobRecord(b, s, i, 1, 1, false))
	}
	return c
}

// write writes n outcomes with one writer per job, and adds the time.
func (c *costStoreT) write(b *testing.B, result []byte, n int) {
	var left atomic.Int64
	left.Store(int64(n))
	errs := make(chan error, len(c.jobs))
	start := time.Now()
	for w := range c.jobs {
		go func() {
			var err error
			for left.Add(-1) >= 0 && err == nil {
				i := atomic.AddInt64(&c.next, 1)
				err = c.s.SaveOutcome(c.jobs[w].ID, &TargetRecord{Idx: int(i % 0xffff), Status: TargetDone, Result: result, Stored: i})
			}
			errs <- err
		}()
	}
	for range c.jobs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	c.took += time.Since(start)
}
