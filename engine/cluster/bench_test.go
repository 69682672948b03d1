package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/clustertest"
)

// benchPair starts a cluster of two nodes for a benchmark, logging at
// Info (as serve does by default): holder, which holds the jobs, and
// other, which forwards to it.
func benchPair(b *testing.B) (holder, other *node) {
	b.Helper()
	tc := clustertest.Start(b, clustertest.Options{Level: slog.LevelInfo}, "holder", "other")
	holder, other = tc.Node("holder"), tc.Node("other")
	return holder, other
}

// timedGet sends GET path with alice's key to n's API, reads the whole
// answer, and returns how long that took and how many bytes it held.
func timedGet(b *testing.B, n *node, path string) (time.Duration, int64) {
	start := time.Now()
	req, err := http.NewRequest(http.MethodGet, n.Srv.URL+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-key")
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	size, err := io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("GET %s on %s: %d, %v", path, n.Name, res.StatusCode, err)
	}
	return time.Since(start), size
}

// heapMetric reads one of the runtime's uint64 metrics.
func heapMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The runtime's metrics read: bytes allocated so far; bytes of heap
// objects, live or not yet swept (HeapAlloc); bytes the last collection
// marked live.
const (
	allocsMetric  = "/gc/heap/allocs:bytes"
	objectsMetric = "/memory/classes/heap/objects:bytes"
	liveMetric    = "/gc/heap/live:bytes"
)

// heapPeak samples the heap's objects (HeapAlloc) every millisecond and
// keeps the most it saw since the last reset.
type heapPeak struct {
	mu   sync.Mutex
	peak uint64
	stop chan struct{}
	done chan struct{}
}

func startHeapPeak(b *testing.B) *heapPeak {
	h := &heapPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			h.sample()
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	b.Cleanup(func() {
		close(h.stop)
		<-h.done
	})
	return h
}

func (h *heapPeak) sample() uint64 {
	v := heapMetric(objectsMetric)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peak = max(h.peak, v)
	return h.peak
}

// reset starts a new peak, and returns the heap's objects now.
func (h *heapPeak) reset() uint64 {
	v := heapMetric(objectsMetric)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peak = v
	return v
}

// pairReads accumulates the reads of one loop, from the job's own node and
// from the other one: their time; the bytes this process allocated
// meanwhile (both nodes, the client, and what else runs, protoactor's
// gossip: a little); with a heapPeak, the most its heap grew during one.
type pairReads struct {
	heap                 *heapPeak
	own, other           time.Duration
	ownAlloc, otherAlloc uint64
	ownPeak, otherPeak   uint64
	n                    int
}

// run reads path from both nodes, the order alternating: what drifts
// during the run (the heap, the CPU's clock) weighs on both alike.
func (p *pairReads) run(b *testing.B, holder, other *node, path string, want int64) {
	nodes := []*node{holder, other}
	if p.n%2 == 1 {
		nodes[0], nodes[1] = other, holder
	}
	for _, n := range nodes {
		var base uint64
		if p.heap != nil {
			base = p.heap.reset()
		}
		before := heapMetric(allocsMetric)
		d, size := timedGet(b, n, path)
		alloc := heapMetric(allocsMetric) - before
		var peak uint64
		if p.heap != nil {
			peak = p.heap.sample() - base
		}
		if size != want {
			b.Fatalf("GET %s on %s: %d bytes, want %d", path, n.Name, size, want)
		}
		if n == holder {
			p.own, p.ownAlloc, p.ownPeak = p.own+d, p.ownAlloc+alloc, max(p.ownPeak, peak)
		} else {
			p.other, p.otherAlloc, p.otherPeak = p.other+d, p.otherAlloc+alloc, max(p.otherPeak, peak)
		}
	}
	p.n++
}

func (p *pairReads) report(b *testing.B) {
	n := float64(p.n)
	b.ReportMetric(float64(p.own.Nanoseconds())/n, "own-ns/op")
	b.ReportMetric(float64(p.other.Nanoseconds())/n, "other-ns/op")
	b.ReportMetric(float64(p.other)/float64(p.own), "other/own")
	b.ReportMetric(float64(p.ownAlloc)/n, "own-alloc-B/op")
	b.ReportMetric(float64(p.otherAlloc)/n, "other-alloc-B/op")
	if p.heap != nil {
		b.ReportMetric(float64(p.ownPeak), "own-peak-heap-B")
		b.ReportMetric(float64(p.otherPeak), "other-peak-heap-B")
	}
}

// settledLive collects garbage until the live heap stops changing (by
// less than 64 KiB from one collection to the next, at most 8 times), and
// returns it: a stream whose client does not read moves on until its
// buffers are full, its garbage meanwhile counted live by the collection
// under way.
func settledLive() uint64 {
	var live uint64
	for range 8 {
		runtime.GC()
		now := heapMetric(liveMetric)
		if max(now, live)-min(now, live) < 64<<10 {
			return now
		}
		live = now
	}
	return live
}

// heldDuring reads path from n as a slow client does, a MiB at a time,
// and after each MiB collects garbage and reads the live heap: it returns
// the most the live heap grew above what it was before the request, that
// is the most the read held at once, its garbage aside.
func heldDuring(b *testing.B, n *node, path string, want int64) uint64 {
	req, err := http.NewRequest(http.MethodGet, n.Srv.URL+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer alice-key")
	buf := make([]byte, 1<<20)
	base := settledLive()
	res, err := n.Srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var most uint64
	var size int64
	for {
		k, err := io.ReadFull(res.Body, buf)
		size += int64(k)
		if live := settledLive(); live > base {
			most = max(most, live-base)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if size != want {
		b.Fatalf("GET %s on %s: %d bytes, want %d", path, n.Name, size, want)
	}
	return most
}

// BenchmarkCluster_Poll: GET /v1/batch/{id} of a settled job of 8 targets
// (a poll), answered over HTTP on loopback by the job's own node (own-ns)
// and by another node, which forwards it (other-ns), alternating in one
// loop; ns/op is one of each. other/own is the ratio of the two.
func BenchmarkCluster_Poll(b *testing.B) {
	holder, other := benchPair(b)
	var urls []string
	for i := range 8 {
		urls = append(urls, fmt.Sprintf("https://example.com/poll/%d", i))
	}
	id := holder.Submit(b, "alice-key", urls...)
	holder.WaitDone(b, id)
	path := "/v1/batch/" + id
	_, want := timedGet(b, holder, path) // warm: connections, who is who
	if _, size := timedGet(b, other, path); size != want {
		b.Fatalf("%d bytes from the other node, %d from the job's", size, want)
	}
	var p pairReads
	for b.Loop() {
		p.run(b, holder, other, path, want)
	}
	p.report(b)
}

// BenchmarkCluster_Results16MiB: GET /v1/batch/{id}?results=1 of a job
// holding 16 MiB of results (16 targets of 1 MiB), read whole over HTTP on
// loopback from the job's own node (own-) and from another node, which
// forwards it (other-), alternating in one loop; ns/op is one of each.
//
// Memory is per process: both nodes and the client share this process's
// heap, which also holds the two in-memory stores (the 16 MiB of results
// among them). alloc-B/op is the bytes allocated per read, garbage
// included. peak-heap-B is the most the heap's objects (HeapAlloc: live
// and garbage not yet collected) grew during a read, sampled every
// millisecond: what the read costs in memory with the default GOGC. After
// the timed loop, held-B is the most the live heap grew above what it was
// before a read, with a collection after each MiB a slow client reads
// (two reads from each node): what a read holds at once, garbage aside.
func BenchmarkCluster_Results16MiB(b *testing.B) {
	holder, other := benchPair(b)
	id := holder.Submit(b, "alice-key", bigURLs("example.com", 16, 1<<20)...)
	holder.WaitDone(b, id)
	path := "/v1/batch/" + id + "?results=1"
	_, want := timedGet(b, holder, path)
	if want < 16<<20 {
		b.Fatalf("%d bytes of results", want)
	}
	if _, size := timedGet(b, other, path); size != want {
		b.Fatalf("%d bytes from the other node, %d from the job's", size, want)
	}
	p := pairReads{heap: startHeapPeak(b)}
	for b.Loop() {
		p.run(b, holder, other, path, want)
	}
	p.report(b)

	var ownHeld, otherHeld uint64
	for range 2 {
		ownHeld = max(ownHeld, heldDuring(b, holder, path, want))
		otherHeld = max(otherHeld, heldDuring(b, other, path, want))
	}
	b.ReportMetric(float64(ownHeld), "own-held-B")
	b.ReportMetric(float64(otherHeld), "other-held-B")
}

// BenchmarkCluster_Throughput: no-op targets (the test cluster's fetch
// answers at once) stored per second by a cluster of 1 node and of 3
// nodes, in this process: each node its own directory store, runner
// (default workers: 1) and caller grains, found through protoactor's test
// provider. One op is a round of 96 jobs of 32 targets (3,072 targets),
// from 8 callers, submitted round-robin to the nodes with Runner.Submit
// (each one asks its caller's grain first, as POST does), one goroutine
// per node, then waited for until every target is stored. The caps are
// raised so that none refuses a job. It reports targets/s, timed from the
// first Submit of a round to its last target stored (ns/op is one round,
// making its 3,072 targets included), and cpus-busy: the cores the process
// kept busy meanwhile, as the Go runtime counts them (out of GOMAXPROCS). Run with -count: the two sub-benchmarks then take turns.
func BenchmarkCluster_Throughput(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			benchClusterThroughput(b, nodes, false)
		})
	}
}

// BenchmarkCluster_Transport: what the cluster's mutual TLS costs against
// plaintext (Config.Insecure), each sub-benchmark a fresh cluster of its
// own. poll: GET /v1/batch/{id} of a settled 8-target job answered by
// another node, which forwards it (BenchmarkCluster_Poll's other-ns; the
// nodes' connections are made before the timed loop, as in a running
// cluster); ns/op is one forwarded poll. throughput: BenchmarkCluster_Throughput
// on 3 nodes (ns/op is one round of 3,072 targets). Run each one on its
// own, alternating (docs/CLUSTER.md, Figures).
func BenchmarkCluster_Transport(b *testing.B) {
	for _, mode := range []string{"mtls", "insecure"} {
		b.Run("poll/"+mode, func(b *testing.B) {
			tc := clustertest.Start(b, clustertest.Options{Level: slog.LevelInfo, Insecure: mode == "insecure"}, "holder", "other")
			holder, other := tc.Node("holder"), tc.Node("other")
			var urls []string
			for i := range 8 {
				urls = append(urls, fmt.Sprintf("https://example.com/poll/%d", i))
			}
			id := holder.Submit(b, "alice-key", urls...)
			holder.WaitDone(b, id)
			path := "/v1/batch/" + id
			_, want := timedGet(b, holder, path)
			if _, size := timedGet(b, other, path); size != want { // warm: connections, who is who
				b.Fatalf("%d bytes from the other node, %d from the job's", size, want)
			}
			for b.Loop() {
				if _, size := timedGet(b, other, path); size != want {
					b.Fatalf("%d bytes from the other node, %d from the job's", size, want)
				}
			}
		})
		b.Run("throughput/"+mode, func(b *testing.B) {
			benchClusterThroughput(b, 3, mode == "insecure")
		})
	}
}

func benchClusterThroughput(b *testing.B, nodes int, insecure bool) {
	const (
		perJob  = 32
		jobs    = 96
		callers = 8
	)
	dirs := make([]string, nodes)
	for i := range dirs {
		dirs[i] = b.TempDir() // before the cluster: removed after its nodes stop
	}
	var stored, want atomic.Int64
	round := make(chan struct{}, 1)
	cfg := engine.Config{JobsPerCaller: 1 << 16, JobsTotal: 1 << 16, MaxBytes: 1 << 40,
		Hooks: engine.Hooks{Target: func(error, time.Duration, int) {
			if stored.Add(1) == want.Load() {
				round <- struct{}{}
			}
		}}}
	specs := make([]clustertest.Spec, nodes)
	for i := range specs {
		specs[i] = clustertest.Spec{Name: fmt.Sprintf("n%d", i), NodeOptions: clustertest.NodeOptions{Dir: dirs[i]}}
	}
	tc := clustertest.StartSpecs(b, clustertest.Options{Level: slog.LevelInfo, Insecure: insecure, Config: cfg}, specs...)
	ns := tc.Nodes()
	batches := make([][]engine.Target, jobs)
	var took time.Duration
	var busy float64
	rounds := 0
	for b.Loop() {
		for j := range batches { // new URLs each round: the same would reuse the jobs
			batches[j] = make([]engine.Target, perJob)
			for i := range batches[j] {
				batches[j][i] = engine.Target{URL: fmt.Sprintf("https://example.com/%d/%d/%d", rounds, j, i)}
			}
		}
		start, idle := time.Now(), cpuSeconds()
		want.Add(jobs * perJob)
		var wg sync.WaitGroup
		for i, n := range ns {
			wg.Go(func() {
				for j := i; j < jobs; j += nodes {
					c := &engine.Caller{Name: fmt.Sprintf("bench-%d", j%callers)}
					if _, _, err := n.Runner.Submit(context.Background(), c, "", batches[j]); err != nil {
						b.Errorf("submit to %s: %v", n.Name, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		select {
		case <-round:
		case <-time.After(time.Minute):
			b.Fatalf("stored %d of %d targets", stored.Load(), want.Load())
		}
		took += time.Since(start)
		busy += cpuSeconds() - idle
		rounds++
	}
	b.ReportMetric(float64(rounds*jobs*perJob)/took.Seconds(), "targets/s")
	b.ReportMetric(busy/took.Seconds(), "cpus-busy")
}

// cpuSeconds is the CPU time this process's Go code and runtime have used
// (the runtime's estimate: every P's time but its idle time).
func cpuSeconds() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64() - s[1].Value.Float64()
}
