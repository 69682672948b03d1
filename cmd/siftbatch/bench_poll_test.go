package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pollLoadEnv, set in a child process of the test binary, makes it the
// load process of BenchmarkServe_PollLoad: its value is the load's
// pollLoadConfig as JSON. The child prints one line, pollLoadPrefix and its
// pollLoadResult as JSON, and exits.
const (
	pollLoadEnv    = "SIFTBATCH_BENCH_POLL_LOAD"
	pollLoadPrefix = "poll-load: "
	// pollModesEnv, if set, names the modes BenchmarkServe_PollLoad runs
	// ("jobs", "healthz", or both, comma-separated): to profile one alone.
	pollModesEnv = "SIFTBATCH_BENCH_POLL_MODES"
)

// The poll load's shape (issue 9): two callers, 100 clients each, jobs of
// 32 targets of a 1 KiB page; targets counted over a window after a
// warm-up.
const (
	pollCallers    = 2
	pollClients    = 200
	pollTargets    = 32
	pollPage       = 1 << 10
	pollWarmup     = time.Second
	pollWindow     = 5 * time.Second
	pollMaxJobs    = 100_000    // per caller: a bound, never reached
	pollMaxPolls   = 10_000_000 // per client: a bound, never reached
	pollMaxLoad    = 30 * time.Second
	pollModeJobs   = "jobs"
	pollModeHealth = "healthz"
)

// pollLoadKeys are the callers' keys (testKeys).
var pollLoadKeys = [pollCallers]string{"alice-secret-key", "bob-long-secret-key"}

// pollLoadConfig tells the load process what to load.
type pollLoadConfig struct {
	Base string `json:"base"` // serve's base URL
	Site string `json:"site"` // the site the targets are on
	// Mode is pollModeJobs (the clients poll their caller's live job) or
	// pollModeHealth (they GET /healthz).
	Mode   string        `json:"mode"`
	Warmup time.Duration `json:"warmup"`
	Window time.Duration `json:"window"`
}

// pollLoadResult is what the load process measured in its window.
type pollLoadResult struct {
	Targets float64 `json:"targets"` // stored, from serve's siftbatch_targets_total
	Seconds float64 `json:"seconds"` // the window, measured
	Polls   int64   `json:"polls"`   // the clients' requests answered 200
	Errors  int64   `json:"errors"`  // the clients' and submitters' requests that failed or got another answer (all run)
	Jobs    int64   `json:"jobs"`    // jobs submitted (all run)
	Busy    int64   `json:"busy"`    // submits answered 429 and retried (all run)
	// ServeCPU and LoadCPU are the CPU seconds (user and system) that the
	// serve process (the parent) and the load process used in the window.
	ServeCPU float64 `json:"serve_cpu"`
	LoadCPU  float64 `json:"load_cpu"`
}

// BenchmarkServe_PollLoad is issue 9's polling load, from a process of its
// own: serve (default config but --jobs-per-caller 1; a directory store)
// runs in this process and fetches a 1 KiB page from a site here, on
// loopback; the test binary is run again as the load process
// (pollLoadEnv). There two callers each submit 32-target jobs back to back
// (the next once the last has ended, found by a long-poll), and 200 clients
// (100 per caller) GET their caller's current job, GET /v1/batch/{id}, as
// fast as they can (mode jobs), or GET /healthz instead (mode healthz).
// After a warm-up of 1 s, the targets serve stores in a window of 5 s are
// counted from its /metrics. Issue 9 wants targets/s-jobs ≥ 0.8 ×
// targets/s-healthz.
//
// One op runs both modes, each on a fresh serve and store (the order
// alternates from op to op), and reports targets/s-healthz,
// targets/s-jobs, their ratio x-jobs/healthz, and each mode's polls/s.
// Use -benchtime 1x; `make bench/poll` runs it.
func BenchmarkServe_PollLoad(b *testing.B) {
	site := benchSite(b)
	rates := map[string]float64{}
	polls := map[string]float64{}
	for i := 0; i < b.N; i++ {
		modes := []string{pollModeHealth, pollModeJobs}
		if i%2 == 1 {
			modes[0], modes[1] = modes[1], modes[0]
		}
		if m := os.Getenv(pollModesEnv); m != "" {
			modes = strings.Split(m, ",") // one mode alone, to profile it
		}
		for _, mode := range modes {
			base, stop := benchServe(b, "--jobs-per-caller", "1")
			res := runPollLoad(b, pollLoadConfig{Base: base, Site: site.URL, Mode: mode, Warmup: pollWarmup, Window: pollWindow})
			stop()
			rate := res.Targets / res.Seconds
			b.Logf("%-7s %7.0f targets/s, %7.0f polls/s, %d jobs, %d errors, %d submits retried on 429; CPU cores: serve %.2f, load %.2f",
				mode, rate, float64(res.Polls)/res.Seconds, res.Jobs, res.Errors, res.Busy, res.ServeCPU/res.Seconds, res.LoadCPU/res.Seconds)
			if res.Errors > 0 {
				b.Errorf("%s: %d requests failed", mode, res.Errors)
			}
			rates[mode] += rate
			polls[mode] += float64(res.Polls) / res.Seconds
		}
	}
	n := float64(b.N)
	b.ReportMetric(rates[pollModeHealth]/n, "targets/s-healthz")
	b.ReportMetric(rates[pollModeJobs]/n, "targets/s-jobs")
	b.ReportMetric(rates[pollModeJobs]/rates[pollModeHealth], "x-jobs/healthz")
	b.ReportMetric(polls[pollModeHealth]/n, "polls/s-healthz")
	b.ReportMetric(polls[pollModeJobs]/n, "polls/s-jobs")
	b.Logf("targets/s: %.0f polling jobs, %.0f polling /healthz: ratio %.2f (target ≥ 0.8)", rates[pollModeJobs]/n, rates[pollModeHealth]/n, rates[pollModeJobs]/rates[pollModeHealth])
}

// runPollLoad runs the load process with cfg and returns what it measured.
func runPollLoad(b *testing.B, cfg pollLoadConfig) pollLoadResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Warmup+cfg.Window+pollMaxLoad)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), pollLoadEnv+"="+jsonLine(cfg))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("load process: %v\n%s", err, out.String())
	}
	for l := range strings.Lines(out.String()) {
		if rest, ok := strings.CutPrefix(l, pollLoadPrefix); ok {
			var res pollLoadResult
			if err := json.Unmarshal([]byte(rest), &res); err != nil {
				b.Fatal(err)
			}
			return res
		}
	}
	b.Fatalf("load process said:\n%s", out.String())
	return pollLoadResult{}
}

// jsonLine encodes v on one line.
func jsonLine(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// pollLoad is the load process: it runs the load that cfg (JSON) says,
// prints its result, and returns the exit code.
func pollLoad(cfgJSON string) int {
	var cfg pollLoadConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "poll load:", err)
		return 2
	}
	res, err := runLoad(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "poll load:", err)
		return 1
	}
	fmt.Println(pollLoadPrefix + jsonLine(res))
	return 0
}

func runLoad(cfg pollLoadConfig) (pollLoadResult, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: 2 * pollClients}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var res pollLoadResult
	var errs, jobs, busy, ok atomic.Int64
	var ids [pollCallers]atomic.Pointer[string]
	end := time.Now().Add(cfg.Warmup + cfg.Window)
	done := make(chan struct{}) // closed once the window is measured
	var wg sync.WaitGroup

	// The callers: a job of 32 targets, then, once it has ended, the next.
	for k := range pollCallers {
		wg.Go(func() {
			for j := 0; j < pollMaxJobs && time.Now().Before(end); j++ {
				id, err := pollSubmit(client, cfg, k, j, &busy)
				if err != nil {
					errs.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				jobs.Add(1)
				ids[k].Store(&id)
				if err := pollUntilEnded(client, cfg, k, id, end); err != nil {
					errs.Add(1)
				}
			}
		})
	}
	// The clients: as fast as they can, until the window ends.
	for c := range pollClients {
		wg.Go(func() {
			k := c % pollCallers
			for n := 0; n < pollMaxPolls; n++ {
				select {
				case <-done:
					return
				default:
				}
				url, key := cfg.Base+"/healthz", ""
				if cfg.Mode == pollModeJobs {
					id := ids[k].Load()
					if id == nil {
						time.Sleep(time.Millisecond)
						continue
					}
					url, key = cfg.Base+"/v1/batch/"+*id, pollLoadKeys[k]
				}
				code, _, err := benchGet(client, url, key)
				if err != nil || code != http.StatusOK {
					errs.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				ok.Add(1)
			}
		})
	}

	time.Sleep(cfg.Warmup)
	t0, err := scrapeTargets(client, cfg.Base)
	if err != nil {
		close(done)
		wg.Wait()
		return res, err
	}
	p0, start := ok.Load(), time.Now()
	serve0, load0 := procCPU(os.Getppid()), procCPU(os.Getpid())
	time.Sleep(cfg.Window)
	serve1, load1 := procCPU(os.Getppid()), procCPU(os.Getpid())
	t1, err := scrapeTargets(client, cfg.Base)
	p1, took := ok.Load(), time.Since(start)
	res.ServeCPU, res.LoadCPU = serve1-serve0, load1-load0
	close(done)
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.Targets, res.Seconds, res.Polls = t1-t0, took.Seconds(), p1-p0
	res.Errors, res.Jobs, res.Busy = errs.Load(), jobs.Load(), busy.Load()
	return res, nil
}

// pollSubmit submits caller k's job j, retrying (a bounded number of
// times) while serve answers 429: its last job may not be off the count
// yet when its end is seen.
func pollSubmit(c *http.Client, cfg pollLoadConfig, k, j int, busy *atomic.Int64) (string, error) {
	urls := make([]string, pollTargets)
	for i := range urls {
		urls[i] = fmt.Sprintf("%s/page/%d?c=%d&j=%d&i=%d", cfg.Site, pollPage, k, j, i)
	}
	body := targetsBody(urls...)
	for range 1000 {
		req, err := http.NewRequest(http.MethodPost, cfg.Base+"/v1/batch", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+pollLoadKeys[k])
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return "", err
		}
		switch resp.StatusCode {
		case http.StatusAccepted:
			var v struct{ ID string }
			if err := json.Unmarshal(data, &v); err != nil || v.ID == "" {
				return "", fmt.Errorf("submit answer %s", data)
			}
			return v.ID, nil
		case http.StatusTooManyRequests:
			busy.Add(1)
			time.Sleep(time.Millisecond)
		default:
			return "", fmt.Errorf("submit: %d %s", resp.StatusCode, data)
		}
	}
	return "", errors.New("submit: busy 1,000 times")
}

// pollUntilEnded long-polls caller k's job id until it has ended (or the
// load's end has passed by pollMaxLoad).
func pollUntilEnded(c *http.Client, cfg pollLoadConfig, k int, id string, end time.Time) error {
	for time.Now().Before(end.Add(pollMaxLoad)) {
		req, err := http.NewRequest(http.MethodGet, cfg.Base+"/v1/batch/"+id+"?wait=10s", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+pollLoadKeys[k])
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		var v struct{ Status string }
		err = json.NewDecoder(resp.Body).Decode(&v)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("poll: %d %v", resp.StatusCode, err)
		}
		if v.Status != "queued" && v.Status != "running" {
			return nil
		}
	}
	return errors.New("job did not end")
}

// procCPU returns the CPU seconds, user and system, that process pid has
// used so far (/proc/PID/stat, in clock ticks of 1/100 s); 0 if it cannot
// be read.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime and stime the 12th and 13th.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// scrapeTargets returns serve's siftbatch_targets_total, summed over its
// results, from /metrics.
func scrapeTargets(c *http.Client, base string) (float64, error) {
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "siftbatch_targets_total{") {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %v", l, err)
		}
		sum += v
	}
	return sum, sc.Err()
}
