package powercuttest

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// Issue 36, written adversarially (branch adv36b) from the issue and the
// public surface only: a full disk never stops serve, reads go on,
// nothing acknowledged is lost, held work goes on by itself. Each test
// mounts a small tmpfs (root) or the power-cut file system (root,
// /dev/fuse) and skips where it cannot, as the tests beside it do.

// held is the delay of a page that is never served: the fetch waits
// until serve gives up or the test ends.
const held = 99999

// advNode is one serve process on a store directory, with its own
// fixture site and keys.
type advNode struct {
	dir   string // the store's directory
	keys  string
	site  *httptest.Server
	serve *serveProc
	args  []string
	page  int64
	mu    sync.Mutex
}

func newAdvNode(t *testing.T, dir string, durable bool, extra ...string) *advNode {
	n := &advNode{dir: dir, keys: filepath.Join(t.TempDir(), "keys")}
	must(t, os.WriteFile(n.keys, []byte("c0 "+faultKey+"\n"), 0o600))
	hold := make(chan struct{})
	n.site = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, fmt.Sprintf("/%d", held)) { // held until the fetch gives up or the test ends
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		servePage(w, r)
	}))
	t.Cleanup(n.site.Close)
	t.Cleanup(func() { close(hold) })
	n.args = []string{"serve", "--addr", "127.0.0.1:0", "--data", dir, "--keys", n.keys, "--allow-private",
		"--max-bytes", "4294967296", "--jobs-per-caller", "8", "--jobs-total", "16", "--retry-wait", "200ms"}
	if durable {
		n.args = append(n.args, "--durable")
	}
	n.args = append(n.args, extra...)
	return n
}

// start starts serve and fails the test unless it listens.
func (n *advNode) start(t *testing.T) {
	t.Helper()
	p, ok := faultStart(t, n.args)
	if !ok {
		t.Fatalf("serve did not start (args %v): %s", n.args, tail(p.stderr.String(), 2000))
	}
	n.serve = p
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's warnings (args %v):\n%s", n.args[8:], tail(warnings(p.stderr.String()), 3000))
		}
	})
}

// alive fails the test if serve has exited, or logged a fault or panic.
func (n *advNode) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case <-n.serve.done:
		t.Fatalf("serve exited %s: %v\n%s", when, n.serve.cmd.ProcessState, tail(n.serve.stderr.String(), 3000))
	default:
	}
	serveDiedOfFault(t, n.serve.stderr.String())
}

// stopClean SIGTERMs serve and requires exit status 0.
func (n *advNode) stopClean(t *testing.T) {
	t.Helper()
	must(t, n.serve.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-n.serve.done:
	case <-time.After(testkit.Deadline):
		t.Fatalf("serve did not stop on SIGTERM: %s", tail(n.serve.stderr.String(), 2000))
	}
	if st := n.serve.cmd.ProcessState; st == nil || st.ExitCode() != 0 {
		t.Errorf("serve's exit on SIGTERM: %v\n%s", st, tail(n.serve.stderr.String(), 2000))
	}
	serveDiedOfFault(t, n.serve.stderr.String())
}

func (n *advNode) kill(t *testing.T) {
	_ = n.serve.cmd.Process.Kill()
	<-n.serve.done
}

// pageURL is a new page of size bytes served after delay ms; its content
// is advContent(num, size).
func (n *advNode) pageURL(size, delay int) (string, int64) {
	n.mu.Lock()
	n.page++
	num := n.page
	n.mu.Unlock()
	return fmt.Sprintf("%s/p/%d/%d/%d", n.site.URL, num, size, delay), num
}

// advContent is what servePage serves for page num of size bytes.
func advContent(num int64, size int) string {
	line := fmt.Sprintf("page %d of %d bytes\n", num, size)
	return strings.Repeat(line, size/len(line)+1)[:size]
}

// advJob is a job acknowledged with a 202: its targets' expected contents.
type advJob struct {
	id   string
	want []string
}

// submit posts a job of pages of the given sizes; it returns the code,
// the body and, on a 202, the job.
func (n *advNode) submit(c *http.Client, sizes []int, delay int) (int, []byte, advJob, error) {
	var targets []map[string]string
	var want []string
	for _, size := range sizes {
		u, num := n.pageURL(size, delay)
		targets = append(targets, map[string]string{"url": u})
		want = append(want, advContent(num, size))
	}
	body, _ := json.Marshal(map[string]any{"targets": targets})
	code, out, err := call(c, http.MethodPost, n.serve.base+"/v1/batch", faultKey, string(body))
	if err != nil || code != http.StatusAccepted {
		return code, out, advJob{}, err
	}
	var a struct{ ID string }
	if err := json.Unmarshal(out, &a); err != nil || a.ID == "" {
		return code, out, advJob{}, fmt.Errorf("202 without an id: %s", out)
	}
	return code, out, advJob{id: a.ID, want: want}, nil
}

// advRead is a job read with its results.
type advRead struct {
	Status  string `json:"status"`
	Error   string `json:"error"`
	Targets []struct {
		Idx    int    `json:"idx"`
		Status string `json:"status"`
		Error  string `json:"error"`
		Result *struct {
			Content string `json:"content"`
		} `json:"result"`
	} `json:"targets"`
}

func (n *advNode) read(c *http.Client, id string) (int, advRead, []byte, error) {
	code, out, err := call(c, http.MethodGet, n.serve.base+"/v1/batch/"+id+"?results=1", faultKey, "")
	var r advRead
	if err == nil && code == http.StatusOK {
		err = json.Unmarshal(out, &r)
	}
	return code, r, out, err
}

// waitEnded polls the job until it is no longer queued or running.
func (n *advNode) waitEnded(t *testing.T, c *http.Client, id string) advRead {
	t.Helper()
	var last advRead
	testkit.WaitFor(t, "job "+id+" to end", func() bool {
		code, r, _, err := n.read(c, id)
		last = r
		return err == nil && code == http.StatusOK && r.Status != "queued" && r.Status != "running"
	})
	return last
}

// checkJob requires an acknowledged job to read 200 with every target it
// holds done carrying exactly its page, and returns the reading.
func (n *advNode) checkJob(t *testing.T, c *http.Client, j advJob, when string) advRead {
	t.Helper()
	code, r, out, err := n.read(c, j.id)
	if err != nil || code != http.StatusOK {
		t.Errorf("%s: acknowledged job %s reads %d %v %.300s", when, j.id, code, err, out)
		return r
	}
	if len(r.Targets) != len(j.want) {
		t.Errorf("%s: job %s has %d targets, submitted %d", when, j.id, len(r.Targets), len(j.want))
		return r
	}
	for _, tg := range r.Targets {
		if tg.Status != "done" {
			continue
		}
		if tg.Result == nil || tg.Result.Content != j.want[tg.Idx] {
			got := -1
			if tg.Result != nil {
				got = len(tg.Result.Content)
			}
			t.Errorf("%s: job %s target %d reads done with %d bytes of content, not its page's %d", when, j.id, tg.Idx, got, len(j.want[tg.Idx]))
		}
	}
	return r
}

// fillFrom fills dir's file system from another process to the last
// byte (dd until ENOSPC, by MiB then by 4 KiB) and returns the file;
// removing it gives the room back.
func fillFrom(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(dir, fmt.Sprintf("filler-%d", rand.Int64()))
	for _, bs := range []string{"1M", "4k"} {
		out, err := exec.Command("dd", "if=/dev/zero", "of="+f, "bs="+bs, "oflag=append", "conv=notrunc").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "No space left") {
			t.Fatalf("dd filled nothing: %v %s", err, out)
		}
	}
	return f
}

// require507 checks a submit refused for space: 507, a JSON error that
// says disk full and a hint, and Retry-After.
func require507(t *testing.T, n *advNode, c *http.Client) {
	t.Helper()
	u, _ := n.pageURL(200, 0)
	req, _ := http.NewRequest(http.MethodPost, n.serve.base+"/v1/batch", strings.NewReader(`{"targets":[{"url":"`+u+`"}]}`))
	req.Header.Set("Authorization", "Bearer "+faultKey)
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("submit while full: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct{ Error, Hint string }
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(e.Error, "disk full") || e.Hint == "" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("submit while full: %d Retry-After=%q %s (want 507, \"disk full\", a hint, Retry-After)", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// advClient is a fresh HTTP client for one test.
func advClient(t *testing.T) *http.Client {
	c := &http.Client{Timeout: testkit.Deadline, Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestAdv36_FilledMidWriteByAnotherProcess: while two clients submit jobs
// of 1 MB pages, poll them with their results and now and then cancel
// one, another process (dd) fills serve's tmpfs to the last byte. serve
// stays up, every submit is 202 or 507 (with its hint), every read of an
// acknowledged job answers 200 while full, and once the filler is
// removed every acknowledged job ends by itself (no restart) with every
// done target holding exactly its page; a clean restart reads the same.
// Both durabilities, with the default reserve and with --disk-reserve 1
// (nothing kept: the write itself meets the full disk).
//
// What it shows (fails on main 5c04c99 and on main with i36d, 67c11c2):
// with --disk-reserve 1, serve answers submits 507 "disk full" while
// /healthz says {"status":"ok"} and siftbatch_disk_full is 0 (15-16 MB
// free, less than Badger's next files); durable with --disk-reserve 1, a
// DELETE waits 60 s ("cancel refused ... store unavailable"), a read's
// answer is cut short after 30 s, and a job does not end within 30 s of
// the filler's removal. Passes since a write that finds no room makes the
// disk count as full (persistence/diskspace.go, roomAfter).
func TestAdv36_FilledMidWriteByAnotherProcess(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		for _, reserve := range []string{"", "1"} {
			name := "reserve=default"
			if reserve != "" {
				name = "reserve=" + reserve
			}
			t.Run(fmt.Sprintf("durable=%v/%s", durable, name), func(t *testing.T) {
				mnt := testkit.MountTmpfs(t, 200<<20)
				var extra []string
				if reserve != "" {
					extra = []string{"--disk-reserve", reserve}
				}
				n := newAdvNode(t, filepath.Join(mnt, "store"), durable, append(extra, "--workers", "2")...)
				n.start(t)
				c := advClient(t)
				var (
					mu      sync.Mutex
					acked   []advJob
					refused = map[int]int{}
					bad     []string
				)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for w := range 2 {
					rng := rand.New(rand.NewPCG(36, uint64(w)))
					wg.Go(func() {
						var live []advJob
						for {
							select {
							case <-stop:
								return
							default:
							}
							if len(live) < 3 {
								code, out, j, err := n.submit(c, []int{1 << 20, 1 << 20, 3000}, 5)
								mu.Lock()
								switch {
								case err == nil && code == http.StatusAccepted:
									acked = append(acked, j)
									live = append(live, j)
								case err == nil && (code == http.StatusInsufficientStorage || code == http.StatusTooManyRequests):
									refused[code]++
								default:
									bad = append(bad, fmt.Sprintf("submit: %d %v %.200s", code, err, out))
								}
								mu.Unlock()
								if code != http.StatusAccepted {
									// a refused submit: list the jobs (a read while full) before the next try
									lc, lout, lerr := call(c, http.MethodGet, n.serve.base+"/v1/batch?limit=50", faultKey, "")
									if lerr != nil || lc != http.StatusOK {
										mu.Lock()
										bad = append(bad, fmt.Sprintf("list: %d %v %.200s", lc, lerr, lout))
										mu.Unlock()
									}
								}
							}
							if len(live) == 0 {
								continue
							}
							i := rng.IntN(len(live))
							if rng.IntN(15) == 0 {
								code, out, err := call(c, http.MethodDelete, n.serve.base+"/v1/batch/"+live[i].id, faultKey, "")
								if err != nil || (code != http.StatusOK && code != http.StatusConflict) {
									mu.Lock()
									bad = append(bad, fmt.Sprintf("cancel %s: %d %v %.200s", live[i].id, code, err, out))
									mu.Unlock()
								}
							}
							code, r, out, err := n.read(c, live[i].id)
							if err != nil || code != http.StatusOK {
								mu.Lock()
								bad = append(bad, fmt.Sprintf("read %s: %d %v %.200s", live[i].id, code, err, out))
								mu.Unlock()
								continue
							}
							if r.Status != "queued" && r.Status != "running" {
								live = append(live[:i], live[i+1:]...)
							}
						}
					})
				}
				// Let some results land, then fill the disk under the load.
				testkit.WaitFor(t, "four acknowledged jobs", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(acked) >= 4
				})
				filler := fillFrom(t, mnt)
				// The load goes on on the full disk until serve refuses a submit for space.
				testkit.WaitFor(t, "a 507 under the load", func() bool {
					mu.Lock()
					got := refused[http.StatusInsufficientStorage] > 0
					mu.Unlock()
					if got {
						return true
					}
					// The workers submit only below 3 live jobs each, and the
					// full disk holds their jobs live: a probe submits too (a
					// CI run had both at 3 when the disk filled).
					code, _, j, err := n.submit(c, []int{3000}, 0)
					mu.Lock()
					defer mu.Unlock()
					if err == nil && code == http.StatusAccepted {
						acked = append(acked, j)
					}
					return err == nil && code == http.StatusInsufficientStorage
				})
				n.alive(t, "while full")
				require507(t, n, c)
				requireHealthFull(t, n, c, mnt)
				close(stop)
				wg.Wait()
				mu.Lock()
				for _, b := range bad {
					t.Errorf("under the load (full disk from the middle on): %s", b)
				}
				t.Logf("%d jobs acknowledged, refused %v", len(acked), refused)
				jobs := append([]advJob(nil), acked...)
				mu.Unlock()
				// While full: every acknowledged job reads back.
				for _, j := range jobs {
					n.checkJob(t, c, j, "while full")
				}
				n.alive(t, "after reads while full")
				must(t, os.Remove(filler))
				// Room is back: every job ends by itself.
				for _, j := range jobs {
					r := n.waitEnded(t, c, j.id)
					if r.Status == "failed" || r.Status == "partial" {
						t.Errorf("job %s ended %s (%s) after the disk was full: a full disk must hold targets, not fail them: %+v", j.id, r.Status, r.Error, r.Targets)
					}
				}
				for _, j := range jobs {
					n.checkJob(t, c, j, "after room returned")
				}
				_, _, j, err := n.submit(c, []int{3000}, 0)
				if err != nil || j.id == "" {
					t.Errorf("submit once room returned: %v", err)
				} else if r := n.waitEnded(t, c, j.id); r.Status != "done" {
					t.Errorf("a job submitted once room returned ends %s", r.Status)
				}
				n.alive(t, "after room returned")
				n.stopClean(t)
				n.start(t)
				for _, j := range jobs {
					n.checkJob(t, c, j, "after a clean restart")
				}
				n.stopClean(t)
			})
		}
	}
}

// requireHealthFull checks, right after serve has answered a submit 507
// "disk full", that /healthz and /metrics say the disk is full too (the
// operator's view must agree with the clients'). If they do not, it says
// how long they take to agree, if ever.
func requireHealthFull(t *testing.T, n *advNode, c *http.Client, mnt string) {
	t.Helper()
	code, out, err := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
	if err == nil && code == http.StatusOK && strings.Contains(string(out), "disk full") {
		return
	}
	_, m, _ := call(c, http.MethodGet, n.serve.base+"/metrics", "", "")
	var disk []string
	for l := range strings.Lines(string(m)) {
		if strings.HasPrefix(l, "siftbatch_disk") {
			disk = append(disk, strings.TrimSpace(l))
		}
	}
	t.Errorf("serve answers submits 507 \"disk full\", and /healthz: %d %v %s (want 200 saying disk full); statfs free %d bytes; metrics %v",
		code, err, strings.TrimSpace(string(out)), testkit.FreeBytes(t, mnt), disk)
	for i := 0; i < 50; i++ {
		_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
		if strings.Contains(string(out), "disk full") {
			t.Logf("/healthz says disk full after %d more reads", i+1)
			return
		}
		_, _, _ = call(c, http.MethodGet, n.serve.base+"/v1/batch?limit=1", faultKey, "") // pace the reads with a list
	}
	t.Logf("/healthz still does not say disk full after 50 more reads")
}

// TestAdv36_RestartOnFullDiskAfterKill: serve is killed (SIGKILL: a crash,
// an OOM kill) while a job runs, and another process fills its disk to
// the last byte before it comes back. Issue 36: a full disk never stops
// the node; reads are served. serve must start, answer every acknowledged
// job's read with its results, refuse a submit 507 with its hint, say
// "disk full" on /healthz; and once the filler is removed, take a new job
// and run it, with no restart. Both durabilities.
//
// What it shows: fails on main 5c04c99 (serve exits "open store: no space
// left on device (and it cannot be opened read-only: ... store not closed
// cleanly: a memtable log)"); passes with i36d.
func TestAdv36_RestartOnFullDiskAfterKill(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			mnt := testkit.MountTmpfs(t, 160<<20)
			n := newAdvNode(t, filepath.Join(mnt, "store"), durable)
			n.start(t)
			c := advClient(t)
			code, out, done, err := n.submit(c, []int{3000, 200_000, 200}, 0)
			if err != nil || code != http.StatusAccepted {
				t.Fatalf("submit: %d %v %s", code, err, out)
			}
			n.waitEnded(t, c, done.id)
			code, out, live, err := n.submit(c, []int{3000, 3000, 3000}, held) // its first page never comes: live at the kill
			if err != nil || code != http.StatusAccepted {
				t.Fatalf("submit: %d %v %s", code, err, out)
			}
			n.kill(t)
			filler := fillFrom(t, mnt)
			p, ok := faultStart(t, n.args)
			if !ok {
				t.Fatalf("serve does not start after a crash on a full disk (free %d bytes), so it serves no read:\n%s",
					testkit.FreeBytes(t, mnt), tail(p.stderr.String(), 1500))
			}
			n.serve = p
			n.checkJob(t, c, done, "restarted on a full disk")
			n.checkJob(t, c, live, "restarted on a full disk")
			require507(t, n, c)
			code, out, err = call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
			if err != nil || code != http.StatusOK || !strings.Contains(string(out), "disk full") {
				t.Errorf("/healthz restarted on a full disk: %d %v %s (want 200 saying disk full)", code, err, out)
			}
			must(t, os.Remove(filler))
			var j advJob
			testkit.WaitFor(t, "a submit to be taken once room returned", func() bool {
				code, _, jj, err := n.submit(c, []int{3000}, 0)
				j = jj
				return err == nil && code == http.StatusAccepted
			})
			if r := n.waitEnded(t, c, j.id); r.Status != "done" {
				t.Errorf("a job submitted once room returned ends %s", r.Status)
			}
			if r := n.waitEnded(t, c, live.id); r.Status == "queued" || r.Status == "running" {
				t.Errorf("the job live at the kill is still %s", r.Status)
			}
			n.checkJob(t, c, done, "room returned")
			n.alive(t, "room returned")
			n.stopClean(t)
		})
	}
}

// TestAdv36_RestartOnFullDiskAfterPowerCut: serve --durable on the
// power-cut file system; the power is cut while a job runs, and the disk
// comes back with no room (write budget 0). serve must start and serve
// the acknowledged job's read; once room returns it takes a new job.
//
// What it shows: fails on main 5c04c99 as TestAdv36_RestartOnFullDiskAfterKill;
// passes with i36d.
func TestAdv36_RestartOnFullDiskAfterPowerCut(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := faultHarness(t, true)
	h.mount(t, 36361)
	h.start(t)
	c := advClient(t)
	done := faultSubmit(t, h, c, []int{3000, 200}, 2)
	want := faultWaitDone(t, h, c, done)
	_ = faultSubmit(t, h, c, []int{3000, 3000}, 60_000) // live at the cut
	faultCut(t, h, powercut.DropAll)
	h.mount(t, 36362)
	h.fs.SetWriteBudget(0)
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
		"--allow-private", "--durable"}
	p, ok := faultStart(t, args)
	if !ok {
		t.Fatalf("serve does not start after a power cut on a full disk, so it serves no read:\n%s", tail(p.stderr.String(), 1500))
	}
	h.serve = p
	got := h.readJob(t, c, Job{ID: done, Key: faultKey})
	if got.Code != http.StatusOK || len(got.Done) != len(want.Done) {
		t.Errorf("read after the cut, disk full: %d, %d of %d targets read", got.Code, len(got.Done), len(want.Done))
	}
	h.fs.SetWriteBudget(-1)
	body := fmt.Sprintf(`{"targets":[{"url":"%s/p/%d/3000/2"}]}`, h.site.URL, h.page.Add(1))
	var id string
	testkit.WaitFor(t, "a submit to be taken once room returned", func() bool {
		code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, body)
		var a struct{ ID string }
		if err == nil && code == http.StatusAccepted && json.Unmarshal(out, &a) == nil {
			id = a.ID
			return true
		}
		return false
	})
	if r := faultWaitDone(t, h, c, id); r.Status != "done" {
		t.Errorf("a job submitted once room returned ends %s", r.Status)
	}
	serveDiedOfFault(t, h.serve.stderr.String())
	h.stop(t)
	must(t, h.fs.Unmount())
}

// TestAdv36_CancelAndReadsWhileFull: a job is running (its page is being
// fetched) when another process fills the disk, to below the reserve
// (16 MiB left) or to the last byte. Issue 36: cancels and reads keep
// working. A DELETE must answer (200, or an error that names the disk)
// within the client's deadline, and while it is in flight another job's
// read, the list and /healthz must answer 200; a 200 cancel must read
// cancelled, and still after a clean restart once room returns. Both
// durabilities.
//
// What it shows: fails on main 5c04c99 in durable mode (the DELETE does not
// answer within 30 s, with 16 MiB free or none, and a list or a read
// beside it times out too); passes with i36d (the cancel answers 507
// "disk full: the cancel was not stored" at once, also with 16 MiB free).
func TestAdv36_CancelAndReadsWhileFull(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		for _, leave := range []int64{16 << 20, 0} {
			t.Run(fmt.Sprintf("durable=%v/leave=%d", durable, leave), func(t *testing.T) {
				mnt := testkit.MountTmpfs(t, 160<<20)
				n := newAdvNode(t, filepath.Join(mnt, "store"), durable)
				n.start(t)
				c := advClient(t)
				code, out, done, err := n.submit(c, []int{3000, 200_000}, 0)
				if err != nil || code != http.StatusAccepted {
					t.Fatalf("submit: %d %v %s", code, err, out)
				}
				n.waitEnded(t, c, done.id)
				code, out, live, err := n.submit(c, []int{3000, 3000}, held)
				if err != nil || code != http.StatusAccepted {
					t.Fatalf("submit: %d %v %s", code, err, out)
				}
				testkit.WaitFor(t, "the job to run", func() bool {
					_, r, _, _ := n.read(c, live.id)
					return r.Status == "running"
				})
				var filler string
				if leave == 0 {
					filler = fillFrom(t, mnt)
				} else {
					filler = testkit.FillDisk(t, mnt, leave)
				}
				testkit.WaitFor(t, "/healthz to say disk full", func() bool {
					_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
					return strings.Contains(string(out), "disk full")
				})
				type answer struct {
					code int
					out  []byte
					err  error
				}
				cancelled := make(chan answer, 1)
				go func() {
					code, out, err := call(c, http.MethodDelete, n.serve.base+"/v1/batch/"+live.id, faultKey, "")
					cancelled <- answer{code, out, err}
				}()
				// Reads while the cancel is in flight (or done).
				for i := range 5 {
					n.checkJob(t, c, done, fmt.Sprintf("read %d during the cancel", i))
					if code, out, err := call(c, http.MethodGet, n.serve.base+"/v1/batch?limit=10", faultKey, ""); err != nil || code != http.StatusOK {
						t.Errorf("list during the cancel: %d %v %.200s", code, err, out)
					}
				}
				a := testkit.Recv(t, cancelled)
				t.Logf("cancel while full: %d %v %.200s", a.code, a.err, a.out)
				if a.err != nil {
					t.Fatalf("cancel while full (leave %d bytes) did not answer: %v", leave, a.err)
				}
				switch a.code {
				case http.StatusOK:
					_, r, out, err := n.read(c, live.id)
					if err != nil || r.Status != "cancelled" {
						t.Errorf("cancel answered 200, the job reads %q %v %.200s", r.Status, err, out)
					}
				case http.StatusInsufficientStorage, http.StatusServiceUnavailable:
					if !strings.Contains(string(a.out), "disk") {
						t.Errorf("cancel refused without naming the disk: %d %s", a.code, a.out)
					}
				default:
					t.Errorf("cancel while full: %d %s (want 200, or 507/503 naming the disk)", a.code, a.out)
				}
				n.alive(t, "after the cancel")
				must(t, os.Remove(filler))
				if a.code != http.StatusOK {
					// Refused while full: retry it once there is room, as its hint says (its page never comes).
					testkit.WaitFor(t, "the cancel, retried once room returned, to answer 200", func() bool {
						code, _, err := call(c, http.MethodDelete, n.serve.base+"/v1/batch/"+live.id, faultKey, "")
						return err == nil && code == http.StatusOK
					})
					a.code = http.StatusOK
				}
				r := n.waitEnded(t, c, live.id)
				if a.code == http.StatusOK && r.Status != "cancelled" {
					t.Errorf("cancel answered 200, the job ends %s", r.Status)
				}
				n.stopClean(t)
				n.start(t)
				if a.code == http.StatusOK {
					if _, r, out, err := n.read(c, live.id); err != nil || r.Status != "cancelled" {
						t.Errorf("cancel answered 200 while full, after a clean restart the job reads %q %v %.200s", r.Status, err, out)
					}
				}
				n.checkJob(t, c, done, "after the restart")
				n.stopClean(t)
			})
		}
	}
}

// TestAdv36_DiskReserveHostile: --disk-reserve values an operator may
// mistype. Each either starts serve, which then takes a submit on its
// empty disk, or makes serve exit non-zero naming the flag; never a
// panic, never a serve that starts and answers 507 "disk full" for ever
// on a disk that only its own store uses.
//
// What it shows (fails on main and with i36d): --disk-reserve 100663296
// on a 128 MiB file system serve alone uses starts, and the first submit
// on its empty store is 507 "disk full" (66 MB free after its own new
// files): a reserve it can never keep, accepted because it is smaller
// than the file system. Passes since WatchDisk weighs the reserve against
// the file system less the store's own files.
func TestAdv36_DiskReserveHostile(t *testing.T) {
	testkit.Long(t)
	for _, v := range []string{"-1", "-9223372036854775808", "9223372036854775807", "18446744073709551616", "0", "1", "abc", "1e9", "73.6MiB", "",
		"100663296", // 96 MiB on a 128 MiB disk: less than the disk, more than the disk less the store's own new files
	} {
		t.Run("reserve="+v, func(t *testing.T) {
			mnt := testkit.MountTmpfs(t, 128<<20)
			n := newAdvNode(t, filepath.Join(mnt, "store"), false, "--disk-reserve", v)
			p, ok := faultStart(t, n.args)
			out := p.stderr.String()
			serveDiedOfFault(t, out)
			if !ok {
				t.Logf("serve exited: %v: %s", p.cmd.ProcessState, tail(out, 300))
				if p.cmd.ProcessState.ExitCode() == 0 {
					t.Errorf("serve exited 0 on --disk-reserve %q", v)
				}
				if !strings.Contains(out, "disk-reserve") {
					t.Errorf("serve exited on --disk-reserve %q without naming the flag: %s", v, tail(out, 1000))
				}
				return
			}
			n.serve = p
			c := advClient(t)
			code, body, j, err := n.submit(c, []int{3000}, 0)
			t.Logf("serve started with --disk-reserve %q (free %d bytes); a submit: %d %.200s", v, testkit.FreeBytes(t, mnt), code, body)
			if err != nil || code != http.StatusAccepted {
				// It may be refused once; it must not be refused for ever.
				_, m, _ := call(c, http.MethodGet, n.serve.base+"/metrics", "", "")
				var disk []string
				for l := range strings.Lines(string(m)) {
					if strings.HasPrefix(l, "siftbatch_disk") {
						disk = append(disk, strings.TrimSpace(l))
					}
				}
				t.Errorf("serve started with --disk-reserve %q and refuses a submit on an empty disk of its own: %d %v %s; %v (a reserve it can never keep: every submit 507 for ever)", v, code, err, body, disk)
			} else if r := n.waitEnded(t, c, j.id); r.Status != "done" {
				t.Errorf("--disk-reserve %q: a job ends %s", v, r.Status)
			}
			n.stopClean(t)
		})
	}
}

// mcpCall makes one JSON-RPC tools/call to serve's /mcp and returns the
// answer's text (JSON or an SSE event).
func mcpCall(c *http.Client, base, tool string, args map[string]any) (int, string, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args}})
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+faultKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), err
}

// TestAdv36_ReadCrowdWhileFull: the disk is below the reserve (another
// process left 16 MiB, or nothing) with finished jobs and one running job; a crowd
// of 24 clients of one key reads at once: jobs with their results, a
// target, the list, /healthz, /metrics, MCP's batch_status and
// batch_list, the dashboard's sign-in page. Every read answers 200 (a
// 429 "reads queued" is the fairness limit, counted, never more than a
// few), MCP's batch_submit is a tool error naming the disk, and serve
// lives. Both durabilities.
func TestAdv36_ReadCrowdWhileFull(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []bool{false, true} {
		for _, leave := range []int64{16 << 20, 0} {
			t.Run(fmt.Sprintf("durable=%v/leave=%d", durable, leave), func(t *testing.T) {
				mnt := testkit.MountTmpfs(t, 160<<20)
				n := newAdvNode(t, filepath.Join(mnt, "store"), durable)
				n.start(t)
				c := advClient(t)
				var jobs []advJob
				for range 3 {
					code, out, j, err := n.submit(c, []int{200_000, 3000}, 0)
					if err != nil || code != http.StatusAccepted {
						t.Fatalf("submit: %d %v %s", code, err, out)
					}
					n.waitEnded(t, c, j.id)
					jobs = append(jobs, j)
				}
				code, out, live, err := n.submit(c, []int{3000, 3000}, held)
				if err != nil || code != http.StatusAccepted {
					t.Fatalf("submit: %d %v %s", code, err, out)
				}
				var filler string
				if leave == 0 {
					filler = fillFrom(t, mnt)
				} else {
					filler = testkit.FillDisk(t, mnt, leave)
				}
				testkit.WaitFor(t, "/healthz to say disk full", func() bool {
					_, out, _ := call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
					return strings.Contains(string(out), "disk full")
				})
				code, text, err := mcpCall(c, n.serve.base, "batch_submit", map[string]any{"targets": []map[string]any{{"url": n.site.URL + "/p/1/200/0"}}})
				if err != nil || code != http.StatusOK || !strings.Contains(text, "isError") || !strings.Contains(text, "disk full") {
					t.Errorf("MCP batch_submit while full: %d %v %.400s (want a tool error naming the disk)", code, err, text)
				}
				var mu sync.Mutex
				counts := map[string]int{}
				var bad []string
				var wg sync.WaitGroup
				for w := range 24 {
					wg.Go(func() {
						for i := range 12 {
							var what string
							var code int
							var out []byte
							var err error
							j := jobs[(w+i)%len(jobs)]
							switch (w + i) % 8 {
							case 0:
								what = "job with results"
								code, _, out, err = n.read(c, j.id)
							case 1:
								what = "a target"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/v1/batch/"+j.id+"/0", faultKey, "")
							case 2:
								what = "the list"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/v1/batch?limit=20", faultKey, "")
							case 3:
								what = "/healthz"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/healthz", "", "")
							case 4:
								what = "/metrics"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/metrics", "", "")
							case 5:
								what = "MCP batch_status"
								var s string
								code, s, err = mcpCall(c, n.serve.base, "batch_status", map[string]any{"id": j.id})
								out = []byte(s)
								if err == nil && strings.Contains(s, `"isError":true`) {
									code = -code
								}
							case 6:
								what = "the dashboard"
								code, out, err = call(c, http.MethodGet, n.serve.base+"/ui/", "", "")
							case 7:
								what = "the live job"
								code, _, out, err = n.read(c, live.id)
							}
							mu.Lock()
							counts[fmt.Sprintf("%s %d", what, code)]++
							if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
								bad = append(bad, fmt.Sprintf("%s: %d %v %.200s", what, code, err, out))
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				t.Logf("reads while full: %v", counts)
				for _, b := range bad {
					t.Errorf("read while full: %s", b)
				}
				for _, j := range jobs {
					n.checkJob(t, c, j, "after the crowd, still full")
				}
				n.alive(t, "after the crowd")
				must(t, os.Remove(filler))
				n.stopClean(t)
			})
		}
	}
}

// advStartH starts serve on the harness's mount as harness.start does
// (its small store sizes: many rotations), with extra flags.
func advStartH(t *testing.T, h *harness, extra ...string) {
	t.Helper()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
		"--allow-private", "--workers", "2", "--jobs-per-caller", "2", "--jobs-total", "8", "--retry-wait", "200ms",
		"--max-bytes", "4294967296"}
	if h.durable {
		args = append(args, "--durable")
	}
	t.Setenv("SIFTBATCH_TEST_STORE_SIZES", strings.TrimPrefix(sizesEnv(), "SIFTBATCH_TEST_STORE_SIZES="))
	p, ok := faultStart(t, append(args, extra...))
	if !ok {
		t.Fatalf("serve did not start: %s", tail(p.stderr.String(), 2000))
	}
	h.serve = p
}

// TestAdv36_RandomFaultsHistory: four callers submit, poll (with results)
// and cancel against serve on the power-cut file system while, three
// times in a round, the disk runs out at a random byte budget (0-6 MiB)
// and, in durable mode, a random share (10-60%) of the fsyncs fail with
// EIO; each fault lasts until it has been met (or for a while), then
// clears. serve must live throughout; once the faults have cleared every
// acknowledged job ends by itself; then (durable) the power is cut, or
// (default) serve stops and the file system unmounts cleanly, and the
// history checker reads every 202, every target read done and every 200
// cancel back: nothing lost. ADV36_SEED and ADV36_ROUNDS replay a run.
//
// What it shows (ADV36_SEED=36903 ADV36_ROUNDS=1, -run
// 'TestAdv36_RandomFaultsHistory/durable=false'; fails on main and with
// i36d): serve dies, exit 1 "Assert failed" (Badger) after "cannot create
// new mem table ... fallocate .../00002.mem: no space left on device" and
// "handler panicked" on GET /v1/batch/{id}. On main, once (seed 37900,
// ADV36_ROUNDS=4), serve did not start after the cut: "store corrupt:
// manifest: manifest has checksum mismatch". Passes since Badger patch 4
// (a new memtable before the full one is flushed) and Open's repair of a
// MANIFEST hole (persistence/manifest.go).
func TestAdv36_RandomFaultsHistory(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	seed := int64(envInt(t, "ADV36_SEED", 36900))
	rounds := envInt(t, "ADV36_ROUNDS", 2)
	for _, durable := range []bool{false, true} {
		for r := range rounds {
			rs := seed + int64(r)
			if durable {
				rs += 1000
			}
			t.Run(fmt.Sprintf("durable=%v/seed=%d", durable, rs), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(rs), 36))
				var extra []string
				if rng.IntN(2) == 0 {
					extra = []string{"--disk-reserve", "1"}
				}
				t.Logf("seed %d (replay: ADV36_SEED=%d ADV36_ROUNDS=%d), durable=%v, %v", rs, seed, r+1, durable, extra)
				h := newHarness(t, durable)
				h.mount(t, rs)
				advStartH(t, h, extra...)
				t.Cleanup(func() {
					if !t.Failed() {
						return
					}
					c := &http.Client{Timeout: 5 * time.Second}
					code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", "powercut-key-0000", `{"targets":[{"url":"`+h.site.URL+`/p/1/200/0"}]}`)
					t.Logf("on failure, a submit: %d %v %.300s", code, err, out)
					code, out, err = call(c, http.MethodGet, h.serve.base+"/healthz", "", "")
					t.Logf("on failure, /healthz: %d %v %.300s; fs %+v", code, err, out, h.fs.Stats())
					t.Logf("on failure, serve's warnings:\n%s", tail(warnings(h.serve.stderr.String()), 3000))
				})
				hist := &History{}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for ci := range callers {
					crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(ci)))
					wg.Go(func() { h.client(hist, fmt.Sprintf("powercut-key-%04d", ci), crng, stop) })
				}
				died := func() bool {
					select {
					case <-h.serve.done:
						t.Fatalf("serve died (seed %d, durable=%v, %v): %v\n%s\n...\n%s", rs, durable, extra, h.serve.cmd.ProcessState, deathLines(h.serve.stderr.String()), tail(h.serve.stderr.String(), 1500))
					default:
					}
					return false
				}
				submits := func() int { s, _, _ := hist.Counts(time.Now().Add(time.Hour)); return s }
				for f := range 3 {
					at := submits() + 2 + rng.IntN(4)
					testkit.WaitFor(t, fmt.Sprintf("%d acknowledged submits before fault %d", at, f), func() bool { return died() || submits() >= at })
					before := h.fs.Stats()
					budget := rng.Int64N(6 << 20)
					h.fs.SetWriteBudget(budget)
					p := 0.0
					if durable {
						p = 0.1 + 0.5*rng.Float64()
						h.fs.FailFsyncs(p)
					}
					// Hold the fault until it has been met 1-5 times, or for 400 looks at the file system's counts.
					looks, times := 0, int64(1+rng.IntN(5))
					testkit.WaitFor(t, fmt.Sprintf("fault %d met or 400 looks", f), func() bool {
						died()
						st := h.fs.Stats()
						looks++
						return st.NoSpace-before.NoSpace+st.FailedSyncs-before.FailedSyncs >= times || looks >= 400
					})
					h.fs.SetWriteBudget(-1)
					h.fs.FailFsyncs(0)
					st := h.fs.Stats()
					t.Logf("fault %d: budget %d, EIO rate %.2f: ENOSPC %d, failed fsyncs %d", f, budget, p, st.NoSpace-before.NoSpace, st.FailedSyncs-before.FailedSyncs)
					select {
					case <-h.serve.done:
						t.Fatalf("serve died under fault %d (seed %d): %s", f, rs, tail(h.serve.stderr.String(), 3000))
					default:
					}
				}
				close(stop)
				wg.Wait()
				serveDiedOfFault(t, h.serve.stderr.String())
				// The faults are over: every acknowledged job ends by itself.
				c := advClient(t)
				for _, j := range hist.Jobs() {
					testkit.WaitFor(t, "job "+j.ID+" to end after the faults cleared", func() bool {
						code, r, err := h.read(c, j.Key, j.ID)
						return err == nil && code == http.StatusOK && r.Status != "queued" && r.Status != "running"
					})
				}
				cut := time.Now()
				if durable {
					faultCut(t, h, powercut.DropAll)
				} else {
					h.stop(t)
					must(t, h.fs.Unmount())
				}
				h.mount(t, rs+500)
				advStartH(t, h, extra...)
				after := h.readBack(t, hist.Jobs())
				sub, tg, cn := hist.Counts(cut)
				losses := Check(hist, cut, after)
				t.Logf("seed %d: %d submits, %d targets shown done, %d cancels acknowledged; %d lost; fs %+v", rs, sub, tg, cn, len(losses), h.fs.Stats())
				for _, l := range losses {
					t.Errorf("seed %d: %s", rs, l)
				}
				if t.Failed() {
					t.Logf("serve's warnings:\n%s", tail(warnings(h.serve.stderr.String()), 3000))
				}
				serveDiedOfFault(t, h.serve.stderr.String())
				h.stop(t)
				must(t, h.fs.Unmount())
			})
		}
	}
}

// TestAdv36_NoSpaceAtMemtableRotation: with --disk-reserve 1 (nothing
// kept: another process took the room), the disk has no byte left
// (write budget 0) while four callers keep writing, so the memtable
// fills and Badger must open its next memtable log on a full disk.
// serve must live (a full disk never stops the node), keep answering
// reads, and once room returns, end every acknowledged job by itself.
// Both durabilities.
//
// What it shows (fails on main 2 of 2, with i36d 1 of 3, default mode):
// serve dies, exit 1 "Assert failed" or exit 2 (a panic in the store's
// write loop under Badger's Txn.Get), once Badger cannot fallocate its
// next memtable log. A run where ENOSPC is met 0 times (the store's own
// check refused first) proves nothing either way. Passes since Badger
// patch 4 (persistence/internal/badger/PATCH.md).
func TestAdv36_NoSpaceAtMemtableRotation(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			h := newHarness(t, durable)
			h.mount(t, 36700)
			advStartH(t, h, "--disk-reserve", "1")
			hist := &History{}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			rng := rand.New(rand.NewPCG(367, 0))
			for ci := range callers {
				crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(ci)))
				wg.Go(func() { h.client(hist, fmt.Sprintf("powercut-key-%04d", ci), crng, stop) })
			}
			defer func() {
				select {
				case <-stop:
				default:
					close(stop)
				}
				wg.Wait()
			}()
			died := func() bool {
				select {
				case <-h.serve.done:
					t.Fatalf("serve died on the full disk: %v\n%s\n...\n%s", h.serve.cmd.ProcessState, deathLines(h.serve.stderr.String()), tail(h.serve.stderr.String(), 1500))
				default:
				}
				return false
			}
			submits := func() int { s, _, _ := hist.Counts(time.Now().Add(time.Hour)); return s }
			testkit.WaitFor(t, "10 acknowledged submits", func() bool { return died() || submits() >= 10 })
			h.fs.SetWriteBudget(0)
			looks := 0
			testkit.WaitFor(t, "ENOSPC met 5 times, or 600 looks", func() bool {
				died()
				looks++
				return h.fs.Stats().NoSpace >= 5 || looks >= 600
			})
			t.Logf("ENOSPC met %d times", h.fs.Stats().NoSpace)
			died()
			h.fs.SetWriteBudget(-1)
			close(stop)
			wg.Wait()
			died()
			c := advClient(t)
			for _, j := range hist.Jobs() {
				testkit.WaitFor(t, "job "+j.ID+" to end once room returned", func() bool {
					died()
					code, r, err := h.read(c, j.Key, j.ID)
					return err == nil && code == http.StatusOK && r.Status != "queued" && r.Status != "running"
				})
			}
			cut := time.Now()
			h.stop(t)
			must(t, h.fs.Unmount())
			h.mount(t, 36701)
			advStartH(t, h, "--disk-reserve", "1")
			for _, l := range Check(hist, cut, h.readBack(t, hist.Jobs())) {
				t.Errorf("after a clean restart: %s", l)
			}
			h.stop(t)
			must(t, h.fs.Unmount())
		})
	}
}

// deathLines are the lines of a log that say how a process died.
func deathLines(log string) string {
	var b strings.Builder
	for l := range strings.Lines(log) {
		for _, s := range []string{"panic:", "fatal", "Assert failed", "[running]", "signal"} {
			if strings.Contains(l, s) && b.Len() < 3000 {
				b.WriteString(l)
				break
			}
		}
	}
	return b.String()
}
