//go:build linux

package main

// The cluster's read of 16 MiB of results measured on two separate `serve
// --cluster` processes (BenchmarkServe_ClusterResults16MiB): time, and
// each process's peak RSS, read in /proc (Linux only). docs/CLUSTER.md
// ("Figures") and docs/PERFORMANCE.md hold the figures.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/loopback"
)

// BenchmarkServe_ClusterResults16MiB reads GET /v1/batch/{id}?results=1 of
// a done job holding 16 MiB of results (16 targets, a 1 MiB page each) from
// two `siftbatch serve --cluster` processes on loopback (the automanaged
// provider, directory stores, --max-body 4 MiB): from the job's node, the
// holder, directly (direct-), and through the other node, the forwarder,
// which forwards it to the holder (forwarded-).
//
// One op is one fresh pair of processes: they start, the holder fetches
// and stores the job, then restarts on its directory (so that what the
// fetch took stays out of the read's figures), the forwarder answers the
// job (the members know each other), then, timed, one read of each kind,
// in an order that alternates from one op to the next. Before each read both processes' peak RSS
// (VmHWM) is reset to their RSS (/proc/PID/clear_refs); after it, the peak
// is read again. The Go runtime gives memory back to the system slowly, so
// the first read of a process weighs on the second: the peaks reported are
// those of the read that came first in its op (half the ops each), over
// the RSS the process had before the reads:
//
//   - holder-fetched-rss-MiB: the holder's RSS once it has fetched and
//     stored the job, before its restart.
//   - holder-rss-MiB, forwarder-rss-MiB: RSS before any read, the holder
//     restarted (the mean over the ops).
//   - direct-holder-peak-MiB: the holder's peak RSS over that, during a
//     direct read.
//   - forwarded-holder-peak-MiB, forwarded-forwarder-peak-MiB: each
//     process's during a forwarded read.
//   - direct-ns/read, forwarded-ns/read: one read, its answer read whole
//     (every op's; ns/op is one of each).
//
// Use -benchtime 2x (or an even count): each kind comes first as often.
func BenchmarkServe_ClusterResults16MiB(b *testing.B) {
	site := benchSite(b)
	c := benchClient(b)
	var (
		direct, forwarded                    time.Duration
		holderRSS, forwarderRSS              float64
		holderFetched                        float64
		directHolder, fwdHolder, fwdForwardr float64
		directFirst, fwdFirst, ops           int
	)
	for b.Loop() {
		b.StopTimer()
		holder, forwarder, id, fetched := clusterPairWithJob(b, c, site.URL, ops)
		holderFetched += float64(fetched)
		hpid, fpid := holder.cmd.Process.Pid, forwarder.cmd.Process.Pid
		holderRSS += float64(procStatusBytes(b, hpid, "VmRSS"))
		forwarderRSS += float64(procStatusBytes(b, fpid, "VmRSS"))
		path := "/v1/batch/" + id + "?results=1"
		kinds := []*clusterNode{holder, forwarder}
		if ops%2 == 1 {
			kinds[0], kinds[1] = forwarder, holder
		}
		for k, via := range kinds {
			hBefore, fBefore := resetPeak(b, hpid), resetPeak(b, fpid)
			b.StartTimer()
			start := time.Now()
			code, n, err := benchGet(c, via.base+path, "alice-secret-key")
			d := time.Since(start)
			b.StopTimer()
			if err != nil || code != http.StatusOK || n < 16<<20 {
				b.Fatalf("read through %s: %d, %d bytes, %v", via.name, code, n, err)
			}
			hPeak := float64(procStatusBytes(b, hpid, "VmHWM") - hBefore)
			fPeak := float64(procStatusBytes(b, fpid, "VmHWM") - fBefore)
			if via == holder {
				direct += d
				if k == 0 {
					directFirst++
					directHolder += hPeak
				}
			} else {
				forwarded += d
				if k == 0 {
					fwdFirst++
					fwdHolder += hPeak
					fwdForwardr += fPeak
				}
			}
		}
		c.Transport.(*http.Transport).CloseIdleConnections()
		var wg sync.WaitGroup
		for _, n := range []*clusterNode{holder, forwarder} {
			wg.Go(func() {
				if !n.stop(benchTimeout) {
					b.Errorf("%s did not stop on SIGTERM", n.name)
				}
			})
		}
		wg.Wait()
		ops++
		b.StartTimer()
	}
	const mib = 1 << 20
	b.ReportMetric(float64(direct.Nanoseconds())/float64(ops), "direct-ns/read")
	b.ReportMetric(float64(forwarded.Nanoseconds())/float64(ops), "forwarded-ns/read")
	b.ReportMetric(holderRSS/float64(ops)/mib, "holder-rss-MiB")
	b.ReportMetric(holderFetched/float64(ops)/mib, "holder-fetched-rss-MiB")
	b.ReportMetric(forwarderRSS/float64(ops)/mib, "forwarder-rss-MiB")
	if directFirst > 0 {
		b.ReportMetric(directHolder/float64(directFirst)/mib, "direct-holder-peak-MiB")
	}
	if fwdFirst > 0 {
		b.ReportMetric(fwdHolder/float64(fwdFirst)/mib, "forwarded-holder-peak-MiB")
		b.ReportMetric(fwdForwardr/float64(fwdFirst)/mib, "forwarded-forwarder-peak-MiB")
	}
}

// clusterPairWithJob starts two `serve --cluster` processes, holder and
// forwarder, on directories and ports of their own, submits to the holder
// a job of 16 pages of 1 MiB of site, waits for it to end, then restarts
// the holder on its directory (what fetching and storing the job took
// stays out of its figures: fetched is its RSS before the restart), and
// waits until the forwarder answers the job; it returns the two and the
// job's id. Each process is stopped at b's cleanup if not before.
func clusterPairWithJob(b *testing.B, c *http.Client, site string, op int) (holder, forwarder *clusterNode, id string, fetched int64) {
	b.Helper()
	dir := b.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		b.Fatal(err)
	}
	apis, manages := nodePorts(b, 2)
	peers := addrs(manages)
	names := []string{"holder", "forwarder"}
	certs := testClusterCerts(b)
	start := func(i int) *clusterNode {
		api := apis[i].Addr()
		n := startClusterNode(b, names[i], "http://"+api, []*loopback.Port{apis[i], manages[i]},
			"--keys", keys, "--data", filepath.Join(dir, names[i]), "--addr", api, "--allow-private", "--log-level", "warn",
			"--max-body", fmt.Sprint(4<<20),
			"--cluster", "siftbatch-bench", "--node", names[i],
			"--cluster-addr", "127.0.0.1:0",
			"--manage-addr", peers[i], "--peers", strings.Join(peers, ","),
			"--cluster-ca", filepath.Join(certs, "ca.crt"), "--cluster-cert", filepath.Join(certs, names[i]+".crt"), "--cluster-key", filepath.Join(certs, names[i]+".key"))
		waitAnswer(b, c, n.base+"/healthz")
		return n
	}
	holder, forwarder = start(0), start(1)
	id = benchJob(b, c, holder.base, "alice-secret-key", site, 16, 1<<20, fmt.Sprintf("cluster%d", op))
	fetched = procStatusBytes(b, holder.cmd.Process.Pid, "VmRSS")
	c.Transport.(*http.Transport).CloseIdleConnections()
	if !holder.stop(benchTimeout) {
		b.Fatal("holder did not stop on SIGTERM")
	}
	holder = start(0)
	waitAnswer(b, c, forwarder.base+"/v1/batch/"+id)
	return holder, forwarder, id, fetched
}

// waitAnswer polls url (as alice) until it answers 200, every 50 ms, for
// at most benchTimeout: a process starting, members finding each other.
func waitAnswer(b *testing.B, c *http.Client, url string) {
	b.Helper()
	deadline := time.Now().Add(benchTimeout)
	for {
		code, _, err := benchGet(c, url, "alice-secret-key")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d, %v", url, code, err)
		}
		time.Sleep(50 * time.Millisecond) // a poll of another process: nothing to wait on
	}
}

// resetPeak sets process pid's peak RSS (VmHWM) to its RSS now, and
// returns that RSS. It skips the benchmark where the kernel does not let
// it (/proc/PID/clear_refs, Linux 4.0).
func resetPeak(b *testing.B, pid int) int64 {
	b.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		b.Skipf("cannot reset a process's peak RSS: %v", err)
	}
	return procStatusBytes(b, pid, "VmRSS")
}
