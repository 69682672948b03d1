package main

// Issue 34's figures (docs/PERFORMANCE.md, "One caller cannot exhaust
// serve"), each side by side in one run: this commit's serve and, when
// SIFTBATCH_REF_BIN names a serve binary of another commit (the
// reference: main before issue 34), that one, alternating:
//
//   - BenchmarkServe_MCPBatchRSS: serve's peak RSS growth under one MCP
//     POST of 1,000 batch_result calls on a 4 MB result.
//   - BenchmarkServe_Bystander: bob's GET of his own small job, 40 in a
//     row, alone (the scheduler's cost on an uncontended read), beside 60
//     readers of alice's 4 MB result, and beside 1,000 concurrent list
//     requests of alice's (each scanning 1,000 of her jobs).
//   - BenchmarkServe_IdleConnections: /healthz and a tenant's GET under
//     24,000 idle connections from one address (two stranger processes).
//
// Both run serve as a process of its own (in-memory store, loopback).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
)

// benchBins are the serve binaries a side-by-side benchmark runs: this
// commit's ("this"), and SIFTBATCH_REF_BIN's ("ref") if set.
func benchBins(b *testing.B) [][2]string {
	bins := [][2]string{{"this", clitest.Binary(b)}}
	if ref := os.Getenv("SIFTBATCH_REF_BIN"); ref != "" {
		bins = append(bins, [2]string{"ref", ref})
	}
	return bins
}

// bigResult is the size of the 4 MB result of issue 34's attacks (under
// the fetcher's default body cap, 4 MiB).
const bigResult = 4_000_000

// BenchmarkServe_MCPBatchRSS: one op is, for each serve binary in turn, a
// fresh serve process holding a 4 MB result, one POST to /mcp of 1,000
// batch_result calls on it (a JSON-RPC batch, without an
// MCP-Protocol-Version header), its answer read whole; it reports the
// answer's status (code-NAME) and serve's peak RSS growth over its RSS
// before the POST (growth-MiB-NAME). Issue 34's goal: ≤ 200 MiB, ideally
// flat.
func BenchmarkServe_MCPBatchRSS(b *testing.B) {
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		b.Skip("no /proc/PID/clear_refs: cannot reset a peak RSS")
	}
	site := benchSite(b)
	bins := benchBins(b)
	growth := map[string][]float64{}
	for b.Loop() {
		for _, bin := range bins {
			p := startServeBinary(b, bin[1])
			id := benchJob(b, p.c, p.base, "alice-secret-key", site.URL, 1, bigResult, "mcprss")
			before := procStatusBytes(b, p.pid, "VmRSS")
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
				b.Skipf("cannot reset serve's peak RSS: %v", err)
			}
			code, _ := mcpPost(b, p.c, p.base, "alice-secret-key", "", mcpBatch(1000, id))
			peak := procStatusBytes(b, p.pid, "VmHWM")
			growth[bin[0]] = append(growth[bin[0]], float64(peak-before)/(1<<20))
			b.ReportMetric(float64(code), "code-"+bin[0])
			p.stop()
		}
	}
	for name, g := range growth {
		b.ReportMetric(slices.Max(g), "growth-MiB-"+name)
	}
}

// bystanderServe is one serve of BenchmarkServe_Bystander, with alice's
// 4 MB result, her 1,000 small jobs and bob's small job.
type bystanderServe struct {
	name     string
	p        *serveProcess
	big, bob string
}

// BenchmarkServe_Bystander: one op is, for each serve binary in turn
// (both running, set up first), bob's 40 GETs of his own small job, one
// after the other, in each of three loads: alone; beside 60 clients
// reading alice's 4 MB result as fast as they can; beside 1,000 clients
// listing alice's jobs as fast as they can (?status=failed: each list
// scans 1,000 of her jobs, ListScan, and finds none). It reports bob's
// max and p50 in ms (max-ms-LOAD-NAME, p50-ms-LOAD-NAME) and, alone, his
// mean in µs (mean-us-alone-NAME): the scheduler's cost on an
// uncontended read is mean-us-alone-this over mean-us-alone-ref. Issue
// 34's goals: max beside the readers ≤ 50 ms; the cost ≤ 5%. Bob reads
// from 127.0.0.2, alice's clients from 127.0.0.1.
func BenchmarkServe_Bystander(b *testing.B) {
	site := benchSite(b)
	var serves []*bystanderServe
	for _, bin := range benchBins(b) {
		p := startServeBinary(b, bin[1], "--jobs-per-caller", "1000", "--jobs-total", "1002")
		s := &bystanderServe{name: bin[0], p: p}
		s.big = benchJob(b, p.c, p.base, "alice-secret-key", site.URL, 1, bigResult, "big")
		s.bob = benchJob(b, p.c, p.base, "bob-long-secret-key", site.URL, 1, 256, "bob")
		fillJobs(b, p, site.URL, 1000)
		serves = append(serves, s)
	}
	samples := map[string][]time.Duration{}
	for b.Loop() {
		for _, s := range serves {
			for _, load := range []string{"alone", "readers", "lists"} {
				samples[load+"-"+s.name] = append(samples[load+"-"+s.name], s.bystander(b, load)...)
			}
		}
	}
	for k, d := range samples {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)-1])/1e6, "max-ms-"+k)
		b.ReportMetric(float64(d[len(d)/2])/1e6, "p50-ms-"+k)
		if strings.HasPrefix(k, "alone-") {
			var sum time.Duration
			for _, x := range d {
				sum += x
			}
			b.ReportMetric(float64(sum)/float64(len(d))/1e3, "mean-us-"+k)
		}
	}
}

// fillJobs submits n one-target jobs of alice's to p, 16 at a time, and
// waits (long-polls) until each has ended.
func fillJobs(b *testing.B, p *serveProcess, site string, n int) {
	b.Helper()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: benchTimeout}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var next atomic.Int64
	ids := make([]string, n)
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/batch", strings.NewReader(targetsBody(fmt.Sprintf("%s/page/64?fill=%d", site, i))))
				req.Header.Set("Authorization", "Bearer alice-secret-key")
				r := send(b, c, req)
				if r.code != http.StatusAccepted {
					b.Errorf("submit %d: %d %s", i, r.code, r.body)
					return
				}
				ids[i-1] = r.json(b)["id"].(string)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		for {
			req, _ := http.NewRequest(http.MethodGet, p.base+"/v1/batch/"+id+"?wait=60s", nil)
			req.Header.Set("Authorization", "Bearer alice-secret-key")
			if st := send(b, c, req).json(b)["status"]; st != "queued" && st != "running" {
				break
			}
		}
	}
}

// bystander runs load against s while bob reads his job 40 times, one
// after the other, and returns his reads' times.
func (s *bystanderServe) bystander(b *testing.B, load string) []time.Duration {
	var clients int
	var path string
	switch load {
	case "readers":
		clients, path = 60, "/v1/batch/"+s.big+"/0"
	case "lists":
		clients, path = 1000, "/v1/batch?status=failed&limit=100"
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var started sync.WaitGroup
	lc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients + 1, MaxConnsPerHost: clients + 1}, Timeout: benchTimeout}
	defer lc.CloseIdleConnections()
	for range clients {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for !stop.Load() {
				_, _, _ = benchGet(lc, s.p.base+path, "alice-secret-key")
				if first {
					started.Done()
					first = false
				}
			}
			if first {
				started.Done()
			}
		}()
	}
	started.Wait() // every client has had an answer: the load is on
	// Bob is another tenant, at another address: alice's clients, all
	// from 127.0.0.1, fill its connection cap (--max-conns-per-addr,
	// 256) since issue 34, and a connection of bob's from the same
	// address would be closed to make room for hers.
	bt := &http.Transport{MaxIdleConnsPerHost: 4, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}
	defer bt.CloseIdleConnections()
	c := &http.Client{Transport: bt, Timeout: benchTimeout}
	var d []time.Duration
	for range 40 {
		t0 := time.Now()
		code, n, err := benchGet(c, s.p.base+"/v1/batch/"+s.bob, "bob-long-secret-key")
		d = append(d, time.Since(t0))
		if err != nil || code != http.StatusOK || n == 0 {
			b.Errorf("%s, %s: bob's read: %d, %d bytes, %v", s.name, load, code, n, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	return d
}

// idleConnsEnv, set in a child process of the test binary, makes it a
// stranger of BenchmarkServe_IdleConnections: its value is "HOST:PORT N".
const idleConnsEnv = "SIFTBATCH_TEST_IDLE_CONNS"

// idleConns opens n connections to addr, from 127.0.0.1, each with one
// GET /healthz sent and nothing read, says "open K" on stdout (K the
// connections it could open), and keeps them until stdin is closed. A
// process of its own: one process may hold 20,000 files here, and the
// attack is 24,000 connections.
func idleConns(cfg string) int {
	addr, ns, _ := strings.Cut(cfg, " ")
	n, err := strconv.Atoi(ns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle conns:", err)
		return 2
	}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			continue // a refusal, the backlog full: the attack goes on
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	fmt.Printf("open %d\n", len(conns))
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		_ = c.Close()
	}
	return 0
}

// BenchmarkServe_IdleConnections: issue 34's attack 3 at full size. One
// op is, for each serve binary in turn, a fresh serve (default flags: its
// file limit the machine's, 20,000 here), two stranger processes opening
// 12,000 connections each from 127.0.0.1 (24,000), each with one GET
// /healthz sent and its answer never read, then 10 GETs of /healthz from
// 127.0.0.1 and 10 of bob's own job from 127.0.0.2, each on a new
// connection with a 5 s timeout (a timeout counts as 5 s, and as one not
// answered). It reports the max of each in ms (max-ms-healthz-NAME,
// max-ms-tenant-NAME) and how many were not answered (unanswered-NAME).
// Issue 34's goal: both answered within 1 s.
func BenchmarkServe_IdleConnections(b *testing.B) {
	site := benchSite(b)
	worst := map[string]float64{}
	for b.Loop() {
		for _, bin := range benchBins(b) {
			p := startServeBinary(b, bin[1])
			bob := benchJob(b, p.c, p.base, "bob-long-secret-key", site.URL, 1, 256, "bob")
			host := strings.TrimPrefix(p.base, "http://")
			var stdins []io.WriteCloser
			var cmds []*exec.Cmd
			for range 2 {
				cmd := exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), idleConnsEnv+"="+host+" 12000")
				in, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				line, _ := bufio.NewReader(out).ReadString('\n')
				b.Logf("%s: stranger %s", bin[0], strings.TrimSpace(line))
				stdins, cmds = append(stdins, in), append(cmds, cmd)
			}
			timed := func(c *http.Client, u, key string) float64 {
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				t0 := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					worst["unanswered-"+bin[0]]++
					return 5000
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					worst["unanswered-"+bin[0]]++
				}
				return float64(time.Since(t0)) / 1e6
			}
			stranger, tenant := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
			stranger.Timeout, tenant.Timeout = 5*time.Second, 5*time.Second
			worst["unanswered-"+bin[0]] += 0
			for range 10 {
				k := "max-ms-healthz-" + bin[0]
				worst[k] = max(worst[k], timed(stranger, p.base+"/healthz", ""))
				k = "max-ms-tenant-" + bin[0]
				worst[k] = max(worst[k], timed(tenant, p.base+"/v1/batch/"+bob, "bob-long-secret-key"))
			}
			for i, in := range stdins {
				_ = in.Close()
				_ = cmds[i].Wait()
			}
			p.stop()
		}
	}
	for k, v := range worst {
		b.ReportMetric(v, k)
	}
}
