package persistence

import (
	"encoding/binary"
	"encoding/hex"
	"expvar"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// scalingStores are the filled stores of BenchmarkStore_Scaling, filled
// once per process and shared by its runs (-count); closed by TestMain.
var scalingStores = map[string]*scalingStore{}

type scalingStore struct {
	s       *Store
	probe   string         // a done job of 32 targets with 1 KiB results
	targets []TargetRecord // the targets of a new job
}

// closeScalingStores closes the stores BenchmarkStore_Scaling filled.
func closeScalingStores() {
	for k, st := range scalingStores {
		_ = st.s.Close()
		if dir := st.s.Dir(); dir != "" {
			_ = os.RemoveAll(filepath.Dir(dir))
		}
		delete(scalingStores, k)
	}
}

// scalingTargets is the number of targets of every job of the benchmark:
// 32, the most a job may have by default.
const scalingTargets = 32

// BenchmarkStore_Scaling measures the store's share of Submit and of a
// status read with 1,000 and with 100,000 settled jobs already stored, in
// memory and on disk: each at 100k should be within 1.5× of itself at 1k.
// The fillers are settled (done) jobs of 32 targets (their specs row, no
// results), with random ids and keys, written in one write batch (about
// 2 s for 100,000), once per process whatever -count says; on disk the
// store is then closed and opened again; in both modes Badger's compactions
// are left to finish. Compare with benchstat -col /stored. The whole run
// takes about a minute per -count.
//
//   - CreateJob: one op is a new 32-target job's rows (queued, a random
//     id and key). Every 1,024 ops the jobs made are deleted, outside the
//     timer, so that the store holds what it is named for (and at most
//     1,024 more).
//   - Submit: the store's share of a Submit: the idempotency lookup (a
//     miss), CreateJob, and the sweep of expired jobs (none due).
//   - TargetStatuses and JobWithTargets: a done job of 32 targets with
//     1 KiB results: without them, and with them.
//
// The write benchmarks report cpu-ns/op besides ns/op: the process's CPU
// per op with the compactions the ops caused (on 2 cores Badger compacts
// beside the op, so ns/op does not show it), and B/op counts what the
// compactions allocate. They are where a larger store costs more: each
// memtable flush is compacted into a base level that, with random ids,
// the new keys overlap from end to end, so it is rewritten whole; the
// larger the LSM tree (in memory it holds the specs rows, which go to the
// value log on disk), the more each flush costs.
func BenchmarkStore_Scaling(b *testing.B) {
	for _, mode := range []string{"memory", "disk"} {
		for _, size := range []struct {
			name string
			n    int
		}{{"1k", 1_000}, {"100k", 100_000}} {
			b.Run("mode="+mode+"/stored="+size.name, func(b *testing.B) {
				st := scalingStores[mode+size.name]
				if st == nil {
					st = fillScaling(b, mode == "disk", size.n)
					scalingStores[mode+size.name] = st
				}
				s := st.s
				b.Run("CreateJob", func(b *testing.B) {
					st.write(b, 99, func(j *JobRecord) error { return s.CreateJob(j, st.targets) })
				})
				b.Run("Submit", func(b *testing.B) {
					st.write(b, 98, func(j *JobRecord) error {
						if _, found, err := s.JobByKey(j.Key); err != nil || found {
							return fmt.Errorf("found %v: %v", found, err)
						}
						if err := s.CreateJob(j, st.targets); err != nil {
							return err
						}
						_, _, err := s.Sweep(time.Now().UnixNano(), 64)
						return err
					})
				})
				b.Run("TargetStatuses", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, ts, err := s.TargetStatuses(st.probe); err != nil || len(ts) != scalingTargets {
							b.Fatal(err)
						}
					}
				})
				b.Run("JobWithTargets", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, ts, err := s.JobWithTargets(st.probe); err != nil || len(ts[scalingTargets-1].Result) != 1<<10 {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// scalingWindow is how many jobs the write benchmarks create before they
// delete them (outside the timer), so that the store holds the jobs it is
// named for, and at most this many more.
const scalingWindow = 1024

// newScalingJob returns a new queued job of 32 targets, as a Submit makes:
// a random id and key.
func newScalingJob(rng *rand.Rand) JobRecord {
	var id [idLen]byte
	binary.BigEndian.PutUint64(id[:], rng.Uint64())
	binary.BigEndian.PutUint64(id[8:], rng.Uint64())
	now := time.Now().UnixNano()
	j := JobRecord{ID: hex.EncodeToString(id[:]), Caller: "bench", Status: StatusQueued, TargetsTotal: scalingTargets, Created: now, Lease: now}
	binary.BigEndian.PutUint64(j.Key[:], rng.Uint64())
	binary.BigEndian.PutUint64(j.Key[8:], rng.Uint64())
	return j
}

// write runs a write benchmark: op writes one new job. Every
// scalingWindow jobs, and at the end, the timer is stopped and the jobs
// written are deleted. It reports cpu-ns/op besides: the process's CPU
// time per op, with the deletions' left out and the compactions the ops
// caused counted (it waits for them to finish): on 2 cores, Badger's
// compactions run beside the op, so ns/op alone does not show them.
func (st *scalingStore) write(b *testing.B, seed uint64, op func(j *JobRecord) error) {
	b.ReportAllocs()
	rng := rand.New(rand.NewPCG(seed, uint64(b.N)))
	var made []JobRecord
	var cpu time.Duration
	start := cpuTime(b)
	for b.Loop() {
		j := newScalingJob(rng)
		if err := op(&j); err != nil {
			b.Fatal(err)
		}
		if made = append(made, j); len(made) == scalingWindow {
			b.StopTimer()
			cpu += cpuTime(b) - start
			st.remove(b, made)
			made = made[:0]
			start = cpuTime(b)
			b.StartTimer()
		}
	}
	settle()
	cpu += cpuTime(b) - start
	st.remove(b, made)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// remove deletes jobs the benchmark created, every key of theirs.
func (st *scalingStore) remove(b *testing.B, jobs []JobRecord) {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	doomed := make([]doomed, len(jobs))
	if err := st.s.view("bench", func(txn *badger.Txn) error {
		for i := range jobs {
			id, _ := parseID(jobs[i].ID)
			var err error
			if doomed[i], err = doom(txn, id); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.s.deleteLocked("bench", doomed); err != nil {
		b.Fatal(err)
	}
}

// fillScaling opens a store (in a directory of its own on disk) holding n
// settled filler jobs and one probe job, with Badger's compactions done.
func fillScaling(b *testing.B, disk bool, n int) *scalingStore {
	b.Helper()
	dir := ""
	if disk {
		parent, err := os.MkdirTemp("", "siftbatch-scaling-")
		if err != nil {
			b.Fatal(err)
		}
		dir = filepath.Join(parent, "store")
	}
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 4))
	ts := make([]TargetRecord, scalingTargets)
	for i := range ts {
		ts[i] = TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/filler/page-%d", i), Options: []byte("{}")}
	}
	specs := encodeSpecs(ts)
	created := time.Now().Add(-time.Hour).UnixNano()
	lease := time.Now().Add(365 * 24 * time.Hour).UnixNano()
	wb := s.db.NewWriteBatch()
	for i := range n {
		var id [idLen]byte
		binary.BigEndian.PutUint64(id[:], rng.Uint64())
		binary.BigEndian.PutUint64(id[8:], rng.Uint64())
		j := JobRecord{ID: hex.EncodeToString(id[:]), Caller: "filler-" + strconv.Itoa(i%100), Status: StatusDone,
			TargetsTotal: scalingTargets, TargetsDone: scalingTargets, Created: created + int64(i), Lease: lease + int64(i), Settled: true}
		binary.BigEndian.PutUint64(j.Key[:], rng.Uint64())
		binary.BigEndian.PutUint64(j.Key[8:], rng.Uint64())
		for _, kv := range [][2][]byte{
			{jobKey(id), encodeJob(&j)}, {specsKey(id), specs}, {idemKey(j.Key), id[:]},
			{indexKey(prefixLease, j.Lease, id), nil}, {indexKey(prefixAge, j.Created, id), nil},
		} {
			if err := wb.Set(kv[0], kv[1]); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	if disk {
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if s, err = Open(dir); err != nil {
			b.Fatal(err)
		}
	}
	probe := JobRecord{ID: fmt.Sprintf("%032x", n), Caller: "bench", Status: StatusRunning, TargetsTotal: scalingTargets, Created: created, Lease: lease}
	probe.Key[0] = 0xff
	if err := s.CreateJob(&probe, ts); err != nil {
		b.Fatal(err)
	}
	res := make([]byte, 1<<10)
	for i := range res {
		res[i] = byte('a' + i%26)
	}
	for i := range scalingTargets {
		t := TargetRecord{Idx: i, Status: TargetDone, Result: res, Stored: lease}
		if i == scalingTargets-1 {
			probe.Status, probe.Settled, probe.TargetsDone, probe.ResultBytes = StatusDone, true, scalingTargets, scalingTargets<<10
			err = s.SaveTarget(&probe, &t)
		} else {
			err = s.SaveOutcome(probe.ID, &t)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	settle()
	sub := make([]TargetRecord, scalingTargets)
	for i := range sub {
		sub[i] = TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/submit/page-%d", i)}
	}
	return &scalingStore{s: s, probe: probe.ID, targets: sub}
}

// settle waits, up to a minute, until Badger has had no compaction running
// for 300 ms (its compactors look every 50 ms; the gauge is Badger's
// expvar of tables being compacted now).
func settle() {
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
