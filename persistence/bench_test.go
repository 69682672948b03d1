package persistence_test

// The store's benchmarks (issue 4): the sweep of expired jobs and eviction.
// `make bench` runs them; docs/PERFORMANCE.md holds the figures.

import (
	"encoding/binary"
	"encoding/hex"
	"expvar"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sift/batch/persistence"
)

// The jobs the removal benchmarks start from: settled jobs of deleteTargets
// targets, 32, the most a job may have, each with deleteResultBytes of
// results on the byte total. A job's keys are deleted by name, so the cost
// per job grows with its targets (a key per target, its outcome, and 6 more
// per job). The fillers have specs rows, no result rows.
const (
	deleteTargets     = 32
	deleteResultBytes = 1000
	// sweepBatch is what the runner's supervisor passes to Sweep
	// (actors.sweepBatch): it sweeps 64 jobs per message and sends itself
	// another while more are due.
	sweepBatch = 64
)

// fillForDelete writes n jobs into dir through the public API and closes
// the store. Created times and leases are one microsecond apart, in an order
// unrelated to the (random) ids; last is the latest lease.
func fillForDelete(b *testing.B, dir string, n int) (last int64) {
	b.Helper()
	s, err := persistence.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ts := make([]persistence.TargetRecord, deleteTargets)
	for i := range ts {
		ts[i] = persistence.TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/page-%d", i), Options: []byte("{}")}
	}
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var id [16]byte
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(id[:], rng.Uint64())
		binary.BigEndian.PutUint64(id[8:], rng.Uint64())
		at := first + int64(i)*int64(time.Microsecond)
		j := persistence.JobRecord{
			ID: hex.EncodeToString(id[:]), Caller: "caller-" + strconv.Itoa(i%100), Status: persistence.StatusDone,
			TargetsTotal: deleteTargets, TargetsDone: deleteTargets, Created: at, Lease: at,
			ResultBytes: deleteResultBytes, Settled: true,
		}
		binary.BigEndian.PutUint64(j.Key[:], rng.Uint64())
		binary.BigEndian.PutUint64(j.Key[8:], rng.Uint64())
		binary.BigEndian.PutUint64(j.Key[16:], uint64(i))
		if err := s.CreateJob(&j, ts); err != nil {
			b.Fatal(err)
		}
		last = at
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	// Once more, to let Badger's compactions finish: every copy then
	// starts settled.
	if s, err = persistence.Open(dir); err != nil {
		b.Fatal(err)
	}
	badgerSettle()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	return last
}

// badgerSettle waits, up to a minute, until Badger has had no compaction
// running for 300 ms (its compactors look every 50 ms; the gauge is
// Badger's expvar of tables being compacted now), so that a benchmark does
// not time the compactions its setup left behind.
func badgerSettle() {
	deadline := time.Now().Add(time.Minute)
	quiet := time.Now()
	for time.Now().Before(deadline) {
		if v, ok := expvar.Get("badger_compaction_current_num_lsm").(*expvar.Int); ok && v.Value() != 0 {
			quiet = time.Now()
		} else if time.Since(quiet) >= 300*time.Millisecond {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func copyDir(b *testing.B, from, to string) {
	b.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStore_Delete measures removing settled jobs (32 targets each).
// Every run starts from a fresh copy of the same filled store. One op
// removes them all; the figure is us/job, microseconds per job removed.
//
//   - Sweep/jobs=100k: 100,000 jobs, all expired, swept as the runner does
//     it: [persistence.Store.Sweep] 64 jobs at a time until none is due.
//   - Evict/jobs=10k,over=10x: 10,000 jobs, [persistence.Store.Evict] down to
//     a tenth of their result bytes: 9,000 jobs removed, oldest first, in one
//     call. (10× over the default 64 MiB with 32 results of 10 KB a job is
//     about 2,000 jobs: 10,000 is already a large store to evict from.)
//
// Use -benchtime=1x: one op takes seconds; its store copy is outside the
// timer.
func BenchmarkStore_Delete(b *testing.B) {
	dir := b.TempDir()
	type template struct {
		dir  string
		last int64 // the latest lease
	}
	templates := map[int]*template{}
	open := func(b *testing.B, n int) (*persistence.Store, *template) {
		b.Helper()
		t := templates[n]
		if t == nil {
			t = &template{dir: filepath.Join(dir, strconv.Itoa(n))}
			t.last = fillForDelete(b, t.dir, n)
			templates[n] = t
		}
		to := filepath.Join(b.TempDir(), "store")
		copyDir(b, t.dir, to)
		s, err := persistence.Open(to)
		if err != nil {
			b.Fatal(err)
		}
		badgerSettle()
		return s, t
	}
	b.Run("Sweep/jobs=100k", func(b *testing.B) {
		const jobs = 100_000
		removed := 0
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			s, t := open(b, jobs)
			b.StartTimer()
			for {
				n, more, err := s.Sweep(t.last, sweepBatch)
				if err != nil {
					b.Fatal(err)
				}
				removed += n
				if !more {
					break
				}
			}
			b.StopTimer()
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
		if removed != b.N*jobs {
			b.Fatalf("swept %d jobs, want %d", removed, b.N*jobs)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(removed), "us/job")
	})
	b.Run("Evict/jobs=10k,over=10x", func(b *testing.B) {
		const jobs = 10_000
		removed := 0
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			s, _ := open(b, jobs)
			limit := s.Bytes() / 10
			b.StartTimer()
			n, err := s.Evict(limit)
			if err != nil {
				b.Fatal(err)
			}
			removed += n
			b.StopTimer()
			if got := s.Bytes(); got > limit || n != jobs*9/10 {
				b.Fatalf("evicted %d jobs down to %d bytes, want %d down to %d", n, got, jobs*9/10, limit)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(removed), "us/job")
	})
}

// BenchmarkStore_Read measures the reads a poll makes of a settled job of
// 32 targets, each done with a result of 1 KiB or of 512 KiB (16 MiB in
// all), in both modes: neither read may touch a result, so each must cost
// the same with either (within 1.5×, time and allocated bytes).
//
//   - Job: [persistence.Store.Job], the summary (one point read);
//   - TargetStatuses: [persistence.Store.TargetStatuses], every target
//     without its result;
//   - JobWithTargets: [persistence.Store.JobWithTargets], every result
//     too, for contrast (it reads the 16 MiB).
//
// Compare the sizes with benchstat -col /result.
func BenchmarkStore_Read(b *testing.B) {
	for _, mode := range []string{"memory", "disk"} {
		for _, size := range []struct {
			name string
			n    int
		}{{"1KiB", 1 << 10}, {"512KiB", 512 << 10}} {
			b.Run("mode="+mode+"/result="+size.name, func(b *testing.B) {
				dir := ""
				if mode == "disk" {
					dir = b.TempDir()
				}
				s, err := persistence.Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				id := readJob(b, s, size.n)
				b.Run("Job", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if j, err := s.Job(id); err != nil || j.TargetsDone != 32 {
							b.Fatal(j, err)
						}
					}
				})
				b.Run("TargetStatuses", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, ts, err := s.TargetStatuses(id); err != nil || ts[31].ResultSize != int64(size.n) {
							b.Fatal(err)
						}
					}
				})
				b.Run("JobWithTargets", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, ts, err := s.JobWithTargets(id); err != nil || len(ts[31].Result) != size.n {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// readJob stores a settled job of 32 targets, each done with a result of
// n bytes, as the runner does (an outcome at a time, the row with the
// last), and returns its id.
func readJob(b *testing.B, s *persistence.Store, n int) string {
	b.Helper()
	const targets = 32
	ts := make([]persistence.TargetRecord, targets)
	for i := range ts {
		ts[i] = persistence.TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/read/page-%d", i), Options: []byte("{}")}
	}
	at := time.Now().UnixNano()
	j := persistence.JobRecord{ID: fmt.Sprintf("%032x", n), Caller: "bench", Status: persistence.StatusRunning,
		TargetsTotal: targets, Created: at, Lease: at}
	if err := s.CreateJob(&j, ts); err != nil {
		b.Fatal(err)
	}
	res := make([]byte, n)
	for i := range res {
		res[i] = byte('a' + i%26)
	}
	for i := range targets {
		t := persistence.TargetRecord{Idx: i, Status: persistence.TargetDone, Result: res, Stored: at}
		if i < targets-1 {
			if err := s.SaveOutcome(j.ID, &t); err != nil {
				b.Fatal(err)
			}
			continue
		}
		j.Status, j.Settled, j.TargetsDone, j.ResultBytes = persistence.StatusDone, true, targets, int64(targets*n)
		if err := s.SaveTarget(&j, &t); err != nil {
			b.Fatal(err)
		}
	}
	return j.ID
}

// BenchmarkStore_CallerJobs measures a page of 20 of one caller's jobs,
// newest first ([persistence.Store.CallerJobs]), in a store of 11,000 jobs
// of 32 targets: 1,000 the caller's, 100 each of 100 others. One op is one
// page: the first, or the 26th (the cursor of the 25th in hand).
func BenchmarkStore_CallerJobs(b *testing.B) {
	for _, mode := range []string{"memory", "disk"} {
		b.Run("mode="+mode, func(b *testing.B) {
			dir := ""
			if mode == "disk" {
				dir = b.TempDir()
			}
			s, err := persistence.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			ts := make([]persistence.TargetRecord, 32)
			for i := range ts {
				ts[i] = persistence.TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/list/page-%d", i)}
			}
			at := time.Now().UnixNano()
			for i := range 11_000 {
				caller := "caller-" + strconv.Itoa(i%100)
				if i%11 == 0 {
					caller = "bench"
				}
				var id [16]byte
				binary.BigEndian.PutUint64(id[:], rng.Uint64())
				binary.BigEndian.PutUint64(id[8:], rng.Uint64())
				j := persistence.JobRecord{ID: hex.EncodeToString(id[:]), Caller: caller, Status: persistence.StatusDone, Settled: true,
					TargetsTotal: 32, TargetsDone: 32, Created: at + int64(i), Lease: at + int64(i)}
				binary.BigEndian.PutUint64(j.Key[:], rng.Uint64())
				if err := s.CreateJob(&j, ts); err != nil {
					b.Fatal(err)
				}
			}
			var after []byte
			for range 25 {
				_, next, err := s.CallerJobs("bench", after, 20, nil)
				if err != nil || next == nil {
					b.Fatal(next, err)
				}
				after = next
			}
			for _, page := range []struct {
				name  string
				after []byte
			}{{"page=1", nil}, {"page=26", after}} {
				b.Run(page.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						jobs, _, err := s.CallerJobs("bench", page.after, 20, nil)
						if err != nil || len(jobs) != 20 {
							b.Fatal(len(jobs), err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkStore_CreateJob is one job's creation ([persistence.Store.CreateJob]):
// a job of 1 target from one of 100 callers, with its idempotency, caller,
// every-job and unsettled entries, in one transaction, on the in-memory
// store and on a directory. Issue 26 compares it with and without the
// index of every job (docs/PERFORMANCE.md).
func BenchmarkStore_CreateJob(b *testing.B) {
	for _, mode := range []string{"memory", "disk"} {
		b.Run("mode="+mode, func(b *testing.B) {
			dir := ""
			if mode == "disk" {
				dir = b.TempDir()
			}
			s, err := persistence.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rng := rand.New(rand.NewPCG(5, 6))
			ts := []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/create/page", Options: []byte("{}")}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				var id [16]byte
				binary.BigEndian.PutUint64(id[:], rng.Uint64())
				binary.BigEndian.PutUint64(id[8:], rng.Uint64())
				at := time.Now().UnixNano()
				j := persistence.JobRecord{ID: hex.EncodeToString(id[:]), Caller: "caller-" + strconv.Itoa(i%100), Status: persistence.StatusQueued,
					TargetsTotal: 1, Created: at, Lease: at}
				binary.BigEndian.PutUint64(j.Key[:], rng.Uint64())
				if err := s.CreateJob(&j, ts); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
