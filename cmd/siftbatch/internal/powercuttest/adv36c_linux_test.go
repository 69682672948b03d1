package powercuttest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// Issue 36, written adversarially (branch adv36c) from the issue and the
// public surface only, beside adv36b's tests: a disk that fills and empties
// again and again, a SIGTERM while full, idempotent resubmits and cancels at
// the moment the disk fills, a long-poll across the recovery. Each test
// mounts a small tmpfs (root) and skips where it cannot.

// diskView is what the operator and a client see of the disk at one moment.
type diskView struct {
	health    string // /healthz's body
	healthOK  bool   // 200
	metric    string // siftbatch_disk_full's value
	free      string // siftbatch_disk_free_bytes's value
	submit    int    // a one-page submit's code (its job, if 202, is returned)
	submitOut string
}

func (v diskView) String() string {
	return fmt.Sprintf("healthz %q, siftbatch_disk_full %s, free %s, submit %d %.160s", strings.TrimSpace(v.health), v.metric, v.free, v.submit, v.submitOut)
}

// metricValue is the value of an unlabelled metric in a /metrics body, "" if absent.
func metricValue(body, name string) string {
	for l := range strings.Lines(body) {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			return f[1]
		}
	}
	return ""
}

// look reads /healthz, /metrics and makes a submit, in that order.
func (n *advNode) look(t *testing.T, c *http.Client) (diskView, advJob) {
	t.Helper()
	var v diskView
	code, out, err := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
	v.health, v.healthOK = string(out), err == nil && code == http.StatusOK
	_, m, _ := call(c, http.MethodGet, n.serve.base+"/metrics", "", "")
	v.metric, v.free = metricValue(string(m), "siftbatch_disk_full"), metricValue(string(m), "siftbatch_disk_free_bytes")
	code, body, j, err := n.submit(c, []int{300}, 0)
	v.submit, v.submitOut = code, string(body)
	if err != nil {
		v.submitOut += " " + err.Error()
	}
	return v, j
}

// diskWarns is the WARN lines of serve's log that say the disk is below
// its reserve (not the per-write "store target" lines, which name a job).
func diskWarns(log string) []string {
	var out []string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "reserve") && !strings.Contains(l, "job_id=") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// TestAdv36c_FlappingDisk: another process fills serve's tmpfs below the
// reserve (16 MiB left; lastbyte: to the last byte, with --disk-reserve 1,
// so that the store's writes meet ENOSPC) and frees it again, six times, while two callers'
// jobs of many 100 KB pages run and a crowd reads (jobs with results, MCP
// batch_result pages, the dashboard, the list with ?wait=). Issue 36: at
// every settled state /healthz, siftbatch_disk_full and a submit agree
// (full: "disk full", 1, 507; room: "ok", 0, 202); every read answers 200
// (or 429); every acknowledged job ends done by itself (held, never
// failed); the disk's log line is rate-limited (six flaps within a minute
// or two are not six or twelve WARN lines); serve lives and exits 0, and
// after a clean restart every result reads whole. Both durabilities.
//
// What it shows (main e4efc69, 2 of 2 runs, every subtest): everything
// holds (the views agree at every settled state, 2,200-2,800 reads all 200,
// every job ends done, every result whole after a clean restart) except the
// log line: "disk below its reserve: new jobs refused, running jobs held
// until there is room" is logged once per flap, 6 WARN lines in 6-9 s of
// flapping (a disk flapping every second logs 3,600 an hour). The docs say
// "one Warn line when it goes below, repeated at most once a minute": the
// minute is per stay below, not per line; the issue asks for a
// rate-limited line.
// Passes since 1426b9b (Badger patch 5, the durable drain, ErrDiskFull at
// Open, the flaps logged once a minute).
func TestAdv36c_FlappingDisk(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		for _, lastByte := range []bool{false, true} {
			t.Run(fmt.Sprintf("durable=%v/lastbyte=%v", durable, lastByte), func(t *testing.T) {
				mnt := testkit.MountTmpfs(t, 200<<20)
				extra := []string{"--workers", "2"}
				if lastByte {
					extra = append(extra, "--disk-reserve", "1")
				}
				n := newAdvNode(t, filepath.Join(mnt, "store"), durable, extra...)
				n.start(t)
				c := advClient(t)
				var (
					mu    sync.Mutex
					acked []advJob
					bad   []string
					reads = map[string]int{}
				)
				for range 4 {
					sizes := make([]int, 24)
					for i := range sizes {
						sizes[i] = 100_000
					}
					code, out, j, err := n.submit(c, sizes, 200)
					if err != nil || code != http.StatusAccepted {
						t.Fatalf("submit: %d %v %s", code, err, out)
					}
					acked = append(acked, j)
				}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for w := range 6 {
					wg.Go(func() {
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							mu.Lock()
							j := acked[(w+i)%len(acked)]
							mu.Unlock()
							var what string
							var code int
							var out []byte
							var err error
							switch (w + i) % 4 {
							case 0:
								what = "job with results"
								code, _, out, err = n.read(c, j.id)
							case 1:
								what = "MCP batch_result"
								var s string
								code, s, err = mcpCall(c, n.serve.base, "batch_result", map[string]any{"id": j.id, "idx": 0, "page": 0})
								out = []byte(s)
								if err == nil && strings.Contains(s, `"isError":true`) && !strings.Contains(s, "not done") && !strings.Contains(s, "pending") && !strings.Contains(s, "running") {
									code = -code
								}
							case 2:
								what = "the dashboard"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/ui/", "", "")
							case 3:
								what = "the list"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/v1/batch?limit=20", faultKey, "")
							}
							mu.Lock()
							reads[fmt.Sprintf("%s %d", what, code)]++
							if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
								bad = append(bad, fmt.Sprintf("%s: %d %v %.300s", what, code, err, out))
							}
							mu.Unlock()
						}
					})
				}
				stopReaders := sync.OnceFunc(func() { close(stop); wg.Wait() })
				defer stopReaders()
				started := time.Now()
				const flaps = 6
				for f := range flaps {
					var filler string
					if lastByte {
						filler = fillFrom(t, mnt)
					} else {
						filler = testkit.FillDisk(t, mnt, 16<<20)
					}
					var v diskView
					testkit.WaitFor(t, fmt.Sprintf("flap %d: /healthz to say disk full", f), func() bool {
						_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
						return strings.Contains(string(out), "disk full")
					})
					v, _ = n.look(t, c)
					if !v.healthOK || !strings.Contains(v.health, "disk full") || v.metric != "1" || v.submit != http.StatusInsufficientStorage {
						t.Errorf("flap %d, full (free %d): the views disagree: %s", f, testkit.FreeBytes(t, mnt), v)
					}
					n.alive(t, fmt.Sprintf("flap %d, full", f))
					must(t, os.Remove(filler))
					testkit.WaitFor(t, fmt.Sprintf("flap %d: /healthz to say ok", f), func() bool {
						code, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
						return code == http.StatusOK && !strings.Contains(string(out), "disk full")
					})
					var j advJob
					v, j = n.look(t, c)
					if !v.healthOK || strings.Contains(v.health, "disk full") || v.metric != "0" || v.submit != http.StatusAccepted {
						t.Errorf("flap %d, room again (free %d): the views disagree: %s", f, testkit.FreeBytes(t, mnt), v)
					}
					if j.id != "" {
						mu.Lock()
						acked = append(acked, j)
						mu.Unlock()
					}
				}
				elapsed := time.Since(started)
				stopReaders()
				mu.Lock()
				t.Logf("reads during %d flaps (%s): %v", flaps, elapsed.Round(time.Second), reads)
				for i, b := range bad {
					if i < 20 {
						t.Errorf("read during the flapping: %s", b)
					}
				}
				if len(bad) > 20 {
					t.Errorf("... and %d more bad reads", len(bad)-20)
				}
				jobs := append([]advJob(nil), acked...)
				mu.Unlock()
				for _, j := range jobs {
					r := n.waitEnded(t, c, j.id)
					if r.Status != "done" {
						var why []string
						for _, tg := range r.Targets {
							if tg.Status != "done" {
								why = append(why, fmt.Sprintf("%d %s %q", tg.Idx, tg.Status, tg.Error))
							}
						}
						t.Errorf("job %s ended %s (%q) after a flapping disk: held targets must go on, not fail: %v", j.id, r.Status, r.Error, why)
					}
					n.checkJob(t, c, j, "after the flapping")
				}
				// The log line: rate-limited. Six flaps within the run's minutes may make a
				// line for the first and one a minute after; not one per flap.
				warns := diskWarns(n.serve.stderr.String())
				if limit := 2 + int(elapsed/time.Minute); len(warns) > limit {
					t.Errorf("%d WARN lines about the disk in %s of flapping (%d flaps; rate-limited would be at most %d):\n%s",
						len(warns), elapsed.Round(time.Second), flaps, limit, strings.Join(warns, "\n"))
				} else {
					t.Logf("%d WARN lines about the disk in %s of flapping", len(warns), elapsed.Round(time.Second))
				}
				n.alive(t, "after the flapping")
				n.stopClean(t)
				// A clean restart with room: every result stored across the flaps reads whole.
				n.start(t)
				for _, j := range jobs {
					n.checkJob(t, c, j, "after a clean restart")
				}
				n.stopClean(t)
			})
		}
	}
}

// TestAdv36c_SIGTERMWhileFull: a job is running (its second page never
// comes, its first is stored) when another process fills serve's disk to
// the last byte; then serve is stopped with SIGTERM, a deploy's restart.
// Issue 36 and the operator at 3 a.m.: serve exits 0 within the deadline
// (a stop that hangs on a full disk is killed by the supervisor: a crash),
// with no fault; it starts again on the still-full disk and serves the
// acknowledged jobs' reads, their stored results whole; submits answer
// 507; once the filler is removed it runs a new job, and the job that was
// running reads ended. Both durabilities.
//
// What it shows (main e4efc69, 3 of 3 runs, both durabilities; the
// full=false control exits in 17-300 ms): serve does not exit within 30 s
// of SIGTERM on the full disk. Its goroutines at SIGQUIT: main in
// Server.Close -> persistence.Store.Close -> badger DB.Close ->
// stopMemoryFlush, waiting for flushMemtable, which logs every second
// "error flushing memtable to disk: ... fallocate .../0000NN.sst: no
// space left on device ... retrying" for as long as the disk is full.
// Durable also logs, 30 s after "stopping", "shutdown gave up on the
// hooks: a hook is blocked" (no hook blocks: it is the store).
// Passes since 1426b9b (Badger patch 5, the durable drain, ErrDiskFull at
// Open, the flaps logged once a minute).
func TestAdv36c_SIGTERMWhileFull(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		for _, full := range []bool{true, false} {
			t.Run(fmt.Sprintf("durable=%v/full=%v", durable, full), func(t *testing.T) {
				mnt := testkit.MountTmpfs(t, 160<<20)
				n := newAdvNode(t, filepath.Join(mnt, "store"), durable)
				n.start(t)
				c := advClient(t)
				code, out, done, err := n.submit(c, []int{3000, 400_000}, 0)
				if err != nil || code != http.StatusAccepted {
					t.Fatalf("submit: %d %v %s", code, err, out)
				}
				n.waitEnded(t, c, done.id)
				// live: its first page is stored, its second never comes.
				u1, num1 := n.pageURL(3000, 0)
				u2, _ := n.pageURL(3000, held)
				body, _ := json.Marshal(map[string]any{"targets": []map[string]string{{"url": u1}, {"url": u2}}})
				code, out, err = call(c, http.MethodPost, n.serve.base+"/v1/batch", faultKey, string(body))
				if err != nil || code != http.StatusAccepted {
					t.Fatalf("submit: %d %v %s", code, err, out)
				}
				var a struct{ ID string }
				must(t, json.Unmarshal(out, &a))
				live := advJob{id: a.ID, want: []string{advContent(num1, 3000), ""}}
				testkit.WaitFor(t, "the live job's first target stored", func() bool {
					_, r, _, _ := n.read(c, live.id)
					return len(r.Targets) == 2 && r.Targets[0].Status == "done"
				})
				var filler string
				if full {
					filler = fillFrom(t, mnt)
					testkit.WaitFor(t, "/healthz to say disk full", func() bool {
						_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
						return strings.Contains(string(out), "disk full")
					})
				}
				// SIGTERM on the full disk (or, full=false, the control: the same on a disk with room).
				must(t, n.serve.cmd.Process.Signal(syscall.SIGTERM))
				termAt := time.Now()
				select {
				case <-n.serve.done:
					t.Logf("serve exited %s after SIGTERM (full=%v)", time.Since(termAt).Round(time.Millisecond), full)
				case <-time.After(testkit.Deadline):
					_ = n.serve.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines' stacks, to say where it hangs
					<-n.serve.done
					log := n.serve.stderr.String()
					var stacks []string
					for _, g := range strings.Split(log, "\n\n") {
						if strings.Contains(g, "goroutine ") && (strings.Contains(g, "badger") || strings.Contains(g, "persistence") || strings.Contains(g, "Shutdown") || strings.Contains(g, "Close")) {
							stacks = append(stacks, headTail(g, 1500))
						}
					}
					t.Fatalf("serve did not exit within %s of SIGTERM (full=%v); its log (not Badger's) and stacks at SIGQUIT:\n%s\n%s",
						testkit.Deadline, full, grepNot(log, "lib=badger", 3000), strings.Join(stacks[:min(len(stacks), 8)], "\n--\n"))
				}
				if st := n.serve.cmd.ProcessState; st == nil || st.ExitCode() != 0 {
					t.Errorf("serve's exit on SIGTERM on a full disk: %v\n%s", st, tail(n.serve.stderr.String(), 2500))
				}
				serveDiedOfFault(t, n.serve.stderr.String())
				// Again, on the still-full disk.
				n.start(t)
				n.checkJob(t, c, done, "restarted on the full disk after SIGTERM")
				r := n.checkJob(t, c, live, "restarted on the full disk after SIGTERM")
				if len(r.Targets) == 2 && r.Targets[0].Status != "done" {
					t.Errorf("the live job's first target, stored before the SIGTERM, reads %s after it", r.Targets[0].Status)
				}
				if full {
					require507(t, n, c)
					must(t, os.Remove(filler))
				}
				var j advJob
				testkit.WaitFor(t, "a submit to be taken once room returned", func() bool {
					code, _, jj, err := n.submit(c, []int{3000}, 0)
					j = jj
					return err == nil && code == http.StatusAccepted
				})
				if r := n.waitEnded(t, c, j.id); r.Status != "done" {
					t.Errorf("a job submitted once room returned ends %s", r.Status)
				}
				if r := n.waitEnded(t, c, live.id); r.Status == "done" {
					t.Errorf("the job whose page never came reads done")
				}
				n.alive(t, "room returned")
				n.stopClean(t)
			})
		}
	}
}

// grepNot is the lines of log without s, its last n bytes.
func grepNot(log, s string, n int) string {
	var b strings.Builder
	for l := range strings.Lines(log) {
		if !strings.Contains(l, s) {
			b.WriteString(l)
		}
	}
	return tail(b.String(), n)
}

// idemSubmit posts a job of the given URLs with an Idempotency-Key.
func (n *advNode) idemSubmit(c *http.Client, key string, urls []string) (int, string, bool, []byte, error) {
	var targets []map[string]string
	for _, u := range urls {
		targets = append(targets, map[string]string{"url": u})
	}
	body, _ := json.Marshal(map[string]any{"targets": targets})
	req, _ := http.NewRequest(http.MethodPost, n.serve.base+"/v1/batch", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+faultKey)
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", false, nil, err
	}
	defer resp.Body.Close()
	var a struct {
		ID     string
		Reused bool
	}
	var out []byte
	buf := make([]byte, 4096)
	for {
		k, rerr := resp.Body.Read(buf)
		out = append(out, buf[:k]...)
		if rerr != nil {
			break
		}
	}
	if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK {
		_ = json.Unmarshal(out, &a)
	}
	return resp.StatusCode, a.ID, a.Reused, out, nil
}

// TestAdv36c_IdempotentResubmitAndCancelAtFill: four clients each keep one
// Idempotency-Key and its body, submit it, resubmit it (the client lost
// the answer), cancel it now and then and submit a new key, while another
// process fills the disk to the last byte in the middle of it. Issue 36
// (new submits 507, cancels work while full) with the contract's
// idempotency: a key is never answered with two different job ids while
// its job is reusable; a resubmit of a key whose job exists is never
// answered 507 "nothing was created" if the job is there (logged, counted);
// every 200 cancel reads cancelled, also after a clean restart; every
// acknowledged job ends once room returns. Both durabilities.
//
// What it shows (main e4efc69, 2 of 2 runs): passes. Noted, not failed: a
// resubmit of an Idempotency-Key whose job exists and is held answers 507
// "disk full" with a hint that "no new job is taken" (9-101 a run), so a
// client that lost its 202 does not learn its job's id until room returns.
func TestAdv36c_IdempotentResubmitAndCancelAtFill(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			mnt := testkit.MountTmpfs(t, 200<<20)
			n := newAdvNode(t, filepath.Join(mnt, "store"), durable, "--workers", "2")
			n.start(t)
			c := advClient(t)
			type keyed struct {
				key  string
				urls []string
				id   string
			}
			var (
				mu        sync.Mutex
				ids       = map[string]map[string]bool{} // key -> ids answered
				acked     = map[string]bool{}            // ids answered 202
				cancelled = map[string]bool{}            // ids whose cancel answered 200
				bad       []string
				codes     = map[string]int{}
				full507   []string // resubmits of a key whose job existed, answered 507
			)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					var cur keyed
					fresh := func(i int) {
						cur = keyed{key: fmt.Sprintf("w%d-k%d", w, i)}
						for range 3 {
							u, _ := n.pageURL(500_000, 20)
							cur.urls = append(cur.urls, u)
						}
					}
					fresh(0)
					for i := 1; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						code, id, reused, out, err := n.idemSubmit(c, cur.key, cur.urls)
						mu.Lock()
						codes[fmt.Sprintf("submit %d reused=%v", code, reused)]++
						switch {
						case err != nil:
							bad = append(bad, fmt.Sprintf("submit %s: %v", cur.key, err))
						case code == http.StatusAccepted && id != "":
							if ids[cur.key] == nil {
								ids[cur.key] = map[string]bool{}
							}
							ids[cur.key][id] = true
							acked[id] = true
							if cur.id != "" && id != cur.id && !cancelled[cur.id] {
								bad = append(bad, fmt.Sprintf("key %s: job %s, then a resubmit made job %s", cur.key, cur.id, id))
							}
							if cur.id == "" || cancelled[cur.id] {
								cur.id = id
							}
						case code == http.StatusInsufficientStorage:
							if cur.id != "" && !cancelled[cur.id] {
								full507 = append(full507, fmt.Sprintf("key %s (job %s): %.200s", cur.key, cur.id, out))
							}
						case code == http.StatusTooManyRequests, code == http.StatusUnprocessableEntity:
						default:
							bad = append(bad, fmt.Sprintf("submit %s: %d %.200s", cur.key, code, out))
						}
						mu.Unlock()
						if cur.id == "" {
							continue
						}
						switch i % 5 {
						case 2:
							code, out, err := call(c, http.MethodDelete, n.serve.base+"/v1/batch/"+cur.id, faultKey, "")
							mu.Lock()
							codes[fmt.Sprintf("cancel %d", code)]++
							switch {
							case err != nil:
								bad = append(bad, fmt.Sprintf("cancel %s: %v", cur.id, err))
							case code == http.StatusOK:
								cancelled[cur.id] = true
							case code == http.StatusConflict:
							case code == http.StatusInsufficientStorage || code == http.StatusServiceUnavailable:
								if !strings.Contains(string(out), "disk") {
									bad = append(bad, fmt.Sprintf("cancel %s refused without naming the disk: %d %.200s", cur.id, code, out))
								}
							default:
								bad = append(bad, fmt.Sprintf("cancel %s: %d %.200s", cur.id, code, out))
							}
							mu.Unlock()
						case 4:
							_, r, _, err := n.read(c, cur.id)
							if err == nil && r.Status != "queued" && r.Status != "running" {
								fresh(i)
							}
						}
					}
				})
			}
			stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
			defer stopLoad()
			testkit.WaitFor(t, "six acknowledged jobs", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(acked) >= 6
			})
			filler := fillFrom(t, mnt)
			testkit.WaitFor(t, "/healthz to say disk full", func() bool {
				_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
				return strings.Contains(string(out), "disk full")
			})
			// Let the clients meet the full disk for a while: 40 more submits.
			mu.Lock()
			base := 0
			for _, v := range codes {
				base += v
			}
			mu.Unlock()
			testkit.WaitFor(t, "40 more calls on the full disk", func() bool {
				mu.Lock()
				defer mu.Unlock()
				s := 0
				for _, v := range codes {
					s += v
				}
				return s >= base+40
			})
			n.alive(t, "while full")
			must(t, os.Remove(filler))
			testkit.WaitFor(t, "/healthz to say ok", func() bool {
				_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
				return !strings.Contains(string(out), "disk full")
			})
			stopLoad()
			mu.Lock()
			t.Logf("answers: %v", codes)
			for _, b := range bad {
				t.Errorf("%s", b)
			}
			for k, v := range ids {
				if len(v) > 1 {
					t.Logf("key %s answered %d job ids (a cancelled job frees its key)", k, len(v))
				}
			}
			if len(full507) > 0 {
				t.Logf("%d resubmits of a key whose job exists answered 507, e.g. %s", len(full507), full507[0])
			}
			var all []string
			for id := range acked {
				all = append(all, id)
			}
			canc := map[string]bool{}
			for id := range cancelled {
				canc[id] = true
			}
			mu.Unlock()
			for _, id := range all {
				r := n.waitEnded(t, c, id)
				if canc[id] && r.Status != "cancelled" && r.Status != "done" {
					t.Errorf("job %s: cancel answered 200, it ends %s", id, r.Status)
				}
				if !canc[id] && r.Status != "done" {
					t.Errorf("job %s ends %s (%q): never cancelled, held by a full disk, it must end done", id, r.Status, r.Error)
				}
			}
			n.stopClean(t)
			n.start(t)
			for _, id := range all {
				_, r, _, err := n.read(c, id)
				if err != nil {
					t.Errorf("after a clean restart, job %s: %v", id, err)
					continue
				}
				if canc[id] && r.Status != "cancelled" && r.Status != "done" {
					t.Errorf("after a clean restart, job %s (cancel answered 200) reads %s", id, r.Status)
				}
			}
			n.stopClean(t)
		})
	}
}

// TestAdv36c_LongPollAcrossRecovery: a job is held by a full disk (its
// pages are served, their results have nowhere to go, or no target
// starts); a ?wait=2s long-poll on it answers 200 "running" while full; a
// ?wait=60s long-poll started while full answers, once the filler is
// removed, with the job ended: held jobs go on by themselves and a
// waiting client hears of it. Also /v1/batch?wait= is not a thing: only
// the job's. Both durabilities.
//
// What it shows (main e4efc69, 2 of 2 runs): passes.
func TestAdv36c_LongPollAcrossRecovery(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			mnt := testkit.MountTmpfs(t, 160<<20)
			n := newAdvNode(t, filepath.Join(mnt, "store"), durable)
			n.start(t)
			c := advClient(t)
			long := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{}}
			defer long.CloseIdleConnections()
			sizes := make([]int, 12)
			for i := range sizes {
				sizes[i] = 200_000
			}
			code, out, j, err := n.submit(c, sizes, 400)
			if err != nil || code != http.StatusAccepted {
				t.Fatalf("submit: %d %v %s", code, err, out)
			}
			testkit.WaitFor(t, "the job to run", func() bool {
				_, r, _, _ := n.read(c, j.id)
				return r.Status == "running"
			})
			filler := testkit.FillDisk(t, mnt, 8<<20)
			testkit.WaitFor(t, "/healthz to say disk full", func() bool {
				_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
				return strings.Contains(string(out), "disk full")
			})
			code, out, err = call(long, http.MethodGet, n.serve.base+"/v1/batch/"+j.id+"?wait=2s", faultKey, "")
			var r advRead
			if err == nil {
				_ = json.Unmarshal(out, &r)
			}
			if err != nil || code != http.StatusOK || r.Status != "running" {
				t.Errorf("?wait=2s on a held job while full: %d %v status %q %.200s (want 200 running)", code, err, r.Status, out)
			}
			type answer struct {
				code int
				out  []byte
				err  error
			}
			waited := make(chan answer, 1)
			go func() {
				code, out, err := call(long, http.MethodGet, n.serve.base+"/v1/batch/"+j.id+"?wait=60s", faultKey, "")
				waited <- answer{code, out, err}
			}()
			// The wait is in flight; then room returns.
			_, _, _ = call(c, http.MethodGet, n.serve.base+"/v1/batch?limit=5", faultKey, "")
			must(t, os.Remove(filler))
			a := testkit.Recv(t, waited)
			var w advRead
			if a.err == nil {
				_ = json.Unmarshal(a.out, &w)
			}
			if a.err != nil || a.code != http.StatusOK || w.Status != "done" {
				t.Errorf("?wait=60s started while full, room returned meanwhile: %d %v status %q (want 200 done) %.200s", a.code, a.err, w.Status, a.out)
			}
			n.checkJob(t, c, j, "after the long-poll")
			n.alive(t, "after the long-poll")
			n.stopClean(t)
		})
	}
}

// TestAdv36c_EveryFsyncFailsOnAFullDisk: serve --durable on the power-cut
// file system (the harness's small store sizes: many rotations), three
// callers submitting, polling and cancelling; then the disk is full (write
// budget 0) and every fsync fails with EIO at once, until both faults have
// been met several times. Issue 36 (fsyncgate, ENOSPC and EIO together): a
// failed fsync is never answered as success, so while every fsync fails no
// submit is answered 202 (each answer instead names the cause: "disk");
// serve lives; once both faults clear, every acknowledged job ends by
// itself; and after a power cut the history checker reads every 202 and
// every target read done back.
//
// What it shows (main e4efc69, 5 of 5 runs, each subtest): no 202 is
// given while every fsync fails and nothing acknowledged is lost, but
// serve stops answering: a submit has no answer within 60 s (or answers
// 503 "disk failed" / 507 "disk full" after 18-30 s), and a read of an
// acknowledged job answers 503 after 18-24 s or not within 30 s. ENOSPC
// is met 29-60 times but only 1-2 fsyncs are tried in that minute. Its
// goroutines at SIGQUIT: the supervisor's submit in Store.CreateJob ->
// updateLocked -> openLocked -> reopenLocked, in WaitGroup.Wait for a
// minute (the reopen after the failed sync: Badger's close waits for a
// memtable flush that cannot fallocate its table, as in
// TestAdv36c_SIGTERMWhileFull), holding the store's mutex, on which the
// writer loop (beginGroup) and a job's cancel (SaveJobNow) wait.
//
// Passes since Badger patch 6 (persistence/internal/badger/PATCH.md): the
// read-only open a store falls back to no longer syncs the directory, so
// reads go on while every fsync fails.
func TestAdv36c_EveryFsyncFailsOnAFullDisk(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, reserve := range []string{"", "1"} {
		t.Run("reserve="+reserve, func(t *testing.T) {
			var extra []string
			if reserve != "" {
				extra = []string{"--disk-reserve", reserve}
			}
			h := newHarness(t, true)
			h.mount(t, 36810)
			advStartH(t, h, extra...)
			hist := &History{}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			rng := rand.New(rand.NewPCG(3681, 0))
			for ci := range callers - 1 { // the last key probes
				crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(ci)))
				wg.Go(func() { h.client(hist, fmt.Sprintf("powercut-key-%04d", ci), crng, stop) })
			}
			stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
			defer stopLoad()
			died := func() {
				select {
				case <-h.serve.done:
					t.Fatalf("serve died: %v\n%s\n...\n%s", h.serve.cmd.ProcessState, deathLines(h.serve.stderr.String()), tail(h.serve.stderr.String(), 1500))
				default:
				}
			}
			submits := func() int { s, _, _ := hist.Counts(time.Now().Add(time.Hour)); return s }
			testkit.WaitFor(t, "8 acknowledged submits", func() bool { died(); return submits() >= 8 })
			before := h.fs.Stats()
			h.fs.SetWriteBudget(0)
			h.fs.FailFsyncs(1)
			c := advClient(t)
			slow := &http.Client{Timeout: 2 * testkit.Deadline, Transport: &http.Transport{}}
			defer slow.CloseIdleConnections()
			probes := map[string]int{}
			var probeBad []string
			looks := 0
			var slowest time.Duration
			end := time.Now().Add(testkit.Deadline)
			for {
				died()
				looks++
				t0 := time.Now()
				body := fmt.Sprintf(`{"targets":[{"url":"%s/p/%d/3000/2"}]}`, h.site.URL, h.page.Add(1))
				type answer struct {
					code int
					out  []byte
					err  error
				}
				probe := make(chan answer, 1)
				go func() {
					code, out, err := call(slow, http.MethodPost, h.serve.base+"/v1/batch", fmt.Sprintf("powercut-key-%04d", callers-1), body)
					probe <- answer{code, out, err}
				}()
				// While the submit is in flight: a read of an acknowledged job and /healthz.
				j0 := hist.Jobs()[0]
				r0 := time.Now()
				if code, _, err := h.read(c, j0.Key, j0.ID); err != nil || code != http.StatusOK {
					probeBad = append(probeBad, fmt.Sprintf("read of acknowledged job %s during a submit under the faults: %d %v (after %s)", j0.ID, code, err, time.Since(r0).Round(time.Millisecond)))
				}
				if code, out, err := call(c, http.MethodGet, h.serve.base+"/healthz", "", ""); err != nil || code != http.StatusOK {
					probeBad = append(probeBad, fmt.Sprintf("/healthz during a submit under the faults: %d %v %.200s", code, err, out))
				}
				a := <-probe // slow's own timeout bounds it
				code, out, err := a.code, a.out, a.err
				slowest = max(slowest, time.Since(t0))
				if err != nil {
					// No answer: where serve is stuck. Its kernel side first, then its goroutines (SIGQUIT ends it).
					var wchans []string
					if ents, e := os.ReadDir(fmt.Sprintf("/proc/%d/task", h.serve.cmd.Process.Pid)); e == nil {
						for _, en := range ents {
							w, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", h.serve.cmd.Process.Pid, en.Name()))
							st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", h.serve.cmd.Process.Pid, en.Name()))
							f := strings.Fields(string(st))
							state := ""
							if len(f) > 2 {
								state = f[2]
							}
							wchans = append(wchans, state+":"+string(w))
						}
					}
					_ = h.serve.cmd.Process.Signal(syscall.SIGQUIT)
					<-h.serve.done
					var stacks []string
					for _, g := range strings.Split(h.serve.stderr.String(), "\n\n") {
						if strings.Contains(g, "goroutine ") && (strings.Contains(g, "sift/batch/") || strings.Contains(g, "Mutex") || strings.Contains(g, "syscall.Syscall")) && !strings.Contains(g, "[select") && !strings.Contains(g, "net/http.(*conn).serve") {
							stacks = append(stacks, headTail(g, 2500))
						}
					}
					t.Fatalf("a submit under EIO and ENOSPC had no answer in %s: %v (ENOSPC %d, failed fsyncs %d); serve's threads (state:wchan) %v; its warnings:\n%s\nits goroutines at SIGQUIT:\n%s",
						slowest.Round(time.Millisecond), err, h.fs.Stats().NoSpace-before.NoSpace, h.fs.Stats().FailedSyncs-before.FailedSyncs, wchans,
						tail(warnings(h.serve.stderr.String()), 2000), strings.Join(stacks[:min(len(stacks), 12)], "\n--\n"))
				}
				probes[fmt.Sprint(code)]++
				switch {
				case err != nil:
					probeBad = append(probeBad, fmt.Sprintf("submit: %v", err))
				case code == http.StatusAccepted:
					probeBad = append(probeBad, fmt.Sprintf("submit answered 202 while every fsync fails: %.200s", out))
				case code == http.StatusTooManyRequests:
				case !strings.Contains(strings.ToLower(string(out)), "disk"):
					probeBad = append(probeBad, fmt.Sprintf("submit refused without naming the disk: %d %.200s", code, out))
				}
				if looks <= 3 || time.Since(t0) > 5*time.Second {
					t.Logf("probe %d: submit %d %v after %s: %.200s", looks, code, err, time.Since(t0).Round(time.Millisecond), out)
				}
				st := h.fs.Stats()
				if (st.NoSpace-before.NoSpace >= 3 && st.FailedSyncs-before.FailedSyncs >= 3) || looks >= 300 || time.Now().After(end) {
					break
				}
			}
			st := h.fs.Stats()
			t.Logf("under the faults: ENOSPC %d, failed fsyncs %d, probe submits %v (%d, the slowest answered in %s)", st.NoSpace-before.NoSpace, st.FailedSyncs-before.FailedSyncs, probes, looks, slowest.Round(time.Millisecond))
			for i, b := range probeBad {
				if i < 10 {
					t.Errorf("%s", b)
				}
			}
			h.fs.SetWriteBudget(-1)
			h.fs.FailFsyncs(0)
			stopLoad()
			died()
			serveDiedOfFault(t, h.serve.stderr.String())
			for _, j := range hist.Jobs() {
				testkit.WaitFor(t, "job "+j.ID+" to end after the faults cleared", func() bool {
					died()
					code, r, err := h.read(c, j.Key, j.ID)
					return err == nil && code == http.StatusOK && r.Status != "queued" && r.Status != "running"
				})
			}
			if t.Failed() {
				t.Logf("serve's warnings under the faults:\n%s", tail(warnings(h.serve.stderr.String()), 4000))
			}
			cut := time.Now()
			faultCut(t, h, powercut.DropAll)
			h.mount(t, 36811)
			advStartH(t, h, extra...)
			sub, tg, cn := hist.Counts(cut)
			losses := Check(hist, cut, h.readBack(t, hist.Jobs()))
			t.Logf("%d submits, %d targets shown done, %d cancels acknowledged; %d lost", sub, tg, cn, len(losses))
			for _, l := range losses {
				t.Errorf("after the cut: %s", l)
			}
			if t.Failed() {
				t.Logf("serve's warnings:\n%s", tail(warnings(h.serve.stderr.String()), 3000))
			}
			h.stop(t)
			must(t, h.fs.Unmount())
		})
	}
}

// TestAdv36c_LargeResultsPastTheRoom: with --disk-reserve 1 (nothing kept)
// and --max-body 16 MiB, another process leaves 20 MiB free on serve's
// tmpfs, and a job of six 12 MiB pages is submitted: its results (72 MiB)
// cannot all fit, even in the store's preallocated files. Issue 36: a write that fails for space fails as an error (no
// fault); the job is held, not failed, and reads 200 meanwhile; /healthz
// says disk full once a write has found no room, and submits answer 507;
// once the filler is removed the job ends done by itself with every
// result whole, also after a clean restart. Both durabilities.
//
// What it shows (main e4efc69, 2 of 2 runs with six pages): passes. (With
// three 12 MiB pages the job was done while /healthz said disk full: they
// fit in the store's preallocated files; not a fault.)
func TestAdv36c_LargeResultsPastTheRoom(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			mnt := testkit.MountTmpfs(t, 200<<20)
			n := newAdvNode(t, filepath.Join(mnt, "store"), durable, "--disk-reserve", "1", "--max-body", "16777216")
			n.start(t)
			c := advClient(t)
			filler := testkit.FillDisk(t, mnt, 20<<20)
			code, out, j, err := n.submit(c, []int{12 << 20, 12 << 20, 12 << 20, 12 << 20, 12 << 20, 12 << 20}, 0)
			if err != nil || code != http.StatusAccepted {
				t.Fatalf("submit with 20 MiB free and --disk-reserve 1: %d %v %.300s", code, err, out)
			}
			testkit.WaitFor(t, "/healthz to say disk full (a write found no room)", func() bool {
				select {
				case <-n.serve.done:
					t.Fatalf("serve died: %s", tail(n.serve.stderr.String(), 3000))
				default:
				}
				_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
				return strings.Contains(string(out), "disk full")
			})
			require507(t, n, c)
			r := n.checkJob(t, c, j, "while full")
			if r.Status != "running" && r.Status != "queued" {
				t.Errorf("the job reads %s (%q) while the disk is full: a full disk must hold it", r.Status, r.Error)
			}
			n.alive(t, "while full")
			must(t, os.Remove(filler))
			if r := n.waitEnded(t, c, j.id); r.Status != "done" {
				t.Errorf("the job of large results ends %s (%q) once room returned (want done, by itself)", r.Status, r.Error)
			}
			n.checkJob(t, c, j, "room returned")
			n.stopClean(t)
			n.start(t)
			n.checkJob(t, c, j, "after a clean restart")
			n.stopClean(t)
		})
	}
}
