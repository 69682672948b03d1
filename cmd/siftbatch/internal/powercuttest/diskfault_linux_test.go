package powercuttest

import (
	"bufio"
	"io"
	"os/exec"

	"encoding/json"
	"fmt"
	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// Disk faults under serve --durable on the power-cut file system (issues 35
// and 36): an EIO on a log's fsync (fsyncgate), a disk full at open and at
// a value-log rotation, a cut right after one. Written adversarially (branch
// adv3536); each is a fast-tier test.

// faultKey is the one caller's key of these tests (serve refuses keys
// shorter than 16 characters).
const faultKey = "disk-fault-caller-key-0"

// faultHarness is newHarness with faultKey as its keys file.
func faultHarness(t *testing.T, durable bool) *harness {
	h := newHarness(t, durable)
	must(t, os.WriteFile(h.keys, []byte("c0 "+faultKey+"\n"), 0o600))
	return h
}

// faultNewest returns the name, relative to the mount's root, of the newest
// file of the store with the extension ext (".vlog", ".mem").
func faultNewest(t *testing.T, h *harness, ext string) string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(h.backing, "store"))
	must(t, err)
	var names []string
	for _, e := range es {
		if filepath.Ext(e.Name()) == ext {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no %s file in the store", ext)
	}
	sort.Strings(names)
	return "store/" + names[len(names)-1]
}

// faultSubmit submits one job of the given page sizes and delays (ms) as
// key-0 and returns its id; it fails the test on anything but a 202.
func faultSubmit(t *testing.T, h *harness, c *http.Client, sizes []int, delay int) string {
	t.Helper()
	var targets []map[string]string
	for _, size := range sizes {
		targets = append(targets, map[string]string{"url": fmt.Sprintf("%s/p/%d/%d/%d", h.site.URL, h.page.Add(1), size, delay)})
	}
	body, _ := json.Marshal(map[string]any{"targets": targets})
	code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, string(body))
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("submit: %d %v %s", code, err, out)
	}
	var a struct{ ID string }
	must(t, json.Unmarshal(out, &a))
	return a.ID
}

// faultWaitDone polls the job until it is no longer queued or running and
// returns its last reading.
func faultWaitDone(t *testing.T, h *harness, c *http.Client, id string) Reading {
	t.Helper()
	deadline := time.Now().Add(testkit.Deadline)
	for time.Now().Before(deadline) {
		code, r, err := h.read(c, faultKey, id)
		if err == nil && code == http.StatusOK && r.Status != "queued" && r.Status != "running" {
			return r
		}
		time.Sleep(20 * time.Millisecond) // polling a job's status: no signal to wait on across processes
	}
	t.Fatalf("job %s still live after %s", id, testkit.Deadline)
	return Reading{}
}

// gated is the delay that makes faultGatedSite's page wait for release.
const gated = 999

// faultGatedSite replaces the harness's fixture server with one whose pages
// of delay gated signal fetched as serve asks for them, then wait until
// release is closed; other pages are served as servePage does.
func faultGatedSite(t *testing.T, h *harness) (fetched <-chan struct{}, release chan struct{}) {
	f := make(chan struct{}, 16)
	release = make(chan struct{})
	h.site.Close()
	h.site = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, fmt.Sprintf("/%d", gated)) {
			f <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			r.URL.Path = strings.TrimSuffix(r.URL.Path, fmt.Sprintf("/%d", gated)) + "/0"
		}
		servePage(w, r)
	}))
	t.Cleanup(h.site.Close)
	return f, release
}

// faultCut cuts the power under serve as the harness's rounds do: stop
// serve, cut, kill it.
func faultCut(t *testing.T, h *harness, mode powercut.CutMode) {
	t.Helper()
	_ = h.serve.cmd.Process.Signal(syscall.SIGSTOP)
	if err := h.fs.Cut(mode); err != nil {
		t.Fatalf("cut: %v", err)
	}
	_ = h.serve.cmd.Process.Kill()
	<-h.serve.done
}

// TestDiskFault_FsyncEIOValueLog: an EIO on the value log's fsync drops
// the pages of the result being synced (as Linux does); the store answers
// it ErrNotSynced and writes the result again further on in the same file,
// then acknowledges more results there. A power cut later, Badger's Open
// reads the last value-log file from its start and stops at the hole the
// failed fsync left: every acknowledged result after it must still read.
func TestDiskFault_FsyncEIOValueLog(t *testing.T) {
	faultFsyncEIOValueLog(t, func(h *harness) { faultCut(t, h, powercut.DropAll) })
}

// TestDiskFault_FsyncEIOValueLogCleanRestart: as
// TestDiskFault_FsyncEIOValueLog, with no power cut at all: serve stops
// cleanly (SIGTERM) and the file system unmounts cleanly, after the fault
// has cleared. A disk that failed one fsync must not cost the results
// acknowledged after it.
func TestDiskFault_FsyncEIOValueLogCleanRestart(t *testing.T) {
	faultFsyncEIOValueLog(t, func(h *harness) {
		h.stop(t)
		must(t, h.fs.Unmount())
	})
}

func faultFsyncEIOValueLog(t *testing.T, restart func(h *harness)) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := faultHarness(t, true)
	fetched, release := faultGatedSite(t, h)
	h.mount(t, 3536)
	h.start(t)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	// A first result in the value log, synced.
	first := faultSubmit(t, h, c, []int{3000}, 2)
	before := faultWaitDone(t, h, c, first)

	// The result of a slow 200 KB page meets a failing fsync of the value log.
	vlog := faultNewest(t, h, ".vlog")
	big := faultSubmit(t, h, c, []int{200_000}, gated)
	<-fetched // serve is fetching the page: its result is the next write
	h.fs.FailNextFsync(vlog)
	close(release)
	bigR := faultWaitDone(t, h, c, big)
	if h.fs.Stats().FailedSyncs == 0 {
		t.Fatalf("no fsync failed (the value log is %s)", vlog)
	}
	// More acknowledged results after it, in the same value-log file.
	var later []string
	var laterR []Reading
	for range 4 {
		id := faultSubmit(t, h, c, []int{3000, 3000}, 2)
		later = append(later, id)
		laterR = append(laterR, faultWaitDone(t, h, c, id))
	}
	t.Logf("after the failed fsync: serve's warnings:\n%s", tail(warnings(h.serve.stderr.String()), 2000))
	for l := range strings.Lines(h.logs.String()) {
		if strings.Contains(l, "EIO") || strings.Contains(l, "fail") {
			t.Logf("fs: %s", l)
		}
	}
	if v := faultNewest(t, h, ".vlog"); v != vlog {
		t.Logf("the value log rotated: %s then %s", vlog, v)
	}
	restart(h)

	h.mount(t, 3537)
	h.start(t)
	check := func(id string, want Reading) {
		t.Helper()
		got := h.readJob(t, c, Job{ID: id, Key: faultKey})
		if got.Code != http.StatusOK {
			t.Errorf("job %s (%s before the cut or restart) reads %d after it", id, want.Status, got.Code)
			return
		}
		for idx, sum := range want.Done {
			if got.Done[idx] != sum {
				t.Errorf("job %s target %d: done and read before the cut or restart, after it done=%v unreadable=%v (status %s)",
					id, idx, got.Done[idx] == sum, got.Unreadable[idx], got.Status)
			}
		}
	}
	check(first, before)
	check(big, bigR)
	for i, id := range later {
		check(id, laterR[i])
	}
	if t.Failed() {
		t.Logf("serve's warnings after the restart:\n%s", tail(warnings(h.serve.stderr.String()), 3000))
		t.Logf("the file system's log:\n%s", tail(h.logs.String(), 3000))
	}
	h.stop(t)
	must(t, h.fs.Unmount())
}

// TestDiskFault_FsyncEIOMemtableLog: an EIO on the memtable log's fsync
// while a job's creation is synced: the submit is answered 503 "nothing
// was created". The jobs acknowledged after it go into the same log (a
// hole there would cut Badger's replay short: they must survive a power
// cut), and the refused job must not come back after the cut: the
// kernel still holds its page and writes it again with the next entries.
func TestDiskFault_FsyncEIOMemtableLog(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := faultHarness(t, true)
	h.mount(t, 3538)
	h.start(t)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	first := faultSubmit(t, h, c, []int{200}, 2)
	before := faultWaitDone(t, h, c, first)

	// A job of 32 targets of long URLs: its creation spans pages of the memtable log.
	mem := faultNewest(t, h, ".mem")
	var targets []map[string]string
	for range 32 {
		targets = append(targets, map[string]string{"url": fmt.Sprintf("%s/p/%d/200/2?%s", h.site.URL, h.page.Add(1), strings.Repeat("q", 700))})
	}
	body, _ := json.Marshal(map[string]any{"targets": targets})
	h.fs.FailNextFsync(mem)
	code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, string(body))
	t.Logf("the large submit, its sync failed: %d %v %.200s", code, err, out)
	var failedID string
	if code == http.StatusAccepted {
		var a struct{ ID string }
		must(t, json.Unmarshal(out, &a))
		failedID = a.ID
	}
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "EIO") {
			t.Logf("fs: %s", l)
		}
	}
	var later []string
	var laterR []Reading
	for range 4 {
		id := faultSubmit(t, h, c, []int{200, 200}, 2)
		later = append(later, id)
		laterR = append(laterR, faultWaitDone(t, h, c, id))
	}
	if failedID != "" {
		later = append(later, failedID)
		laterR = append(laterR, faultWaitDone(t, h, c, failedID))
	}
	if v := faultNewest(t, h, ".mem"); v != mem {
		t.Logf("the memtable rotated: %s then %s", mem, v)
	}
	faultCut(t, h, powercut.DropAll)

	h.mount(t, 3539)
	h.start(t)
	check := func(id string, want Reading) {
		t.Helper()
		got := h.readJob(t, c, Job{ID: id, Key: faultKey})
		if got.Code != http.StatusOK {
			t.Errorf("job %s (202, then %s before the cut or restart) reads %d after it", id, want.Status, got.Code)
			return
		}
		for idx, sum := range want.Done {
			if got.Done[idx] != sum {
				t.Errorf("job %s target %d: done and read before the cut or restart, after it done=%v unreadable=%v (status %s)",
					id, idx, got.Done[idx] == sum, got.Unreadable[idx], got.Status)
			}
		}
	}
	check(first, before)
	for i, id := range later {
		check(id, laterR[i])
	}
	// The submit answered 503 "nothing was created" must not come back.
	known := map[string]bool{first: true}
	for _, id := range later {
		known[id] = true
	}
	for _, j := range faultList(t, h, c) {
		if !known[j.ID] {
			t.Errorf("after the cut, job %s (status %s) is listed: the submit answered 503 \"nothing was created\" came back", j.ID, j.Status)
		}
	}
	if t.Failed() {
		t.Logf("serve's warnings after the restart:\n%s", tail(warnings(h.serve.stderr.String()), 3000))
		t.Logf("the file system's log:\n%s", tail(h.logs.String(), 3000))
	}
	h.stop(t)
	must(t, h.fs.Unmount())
}

type faultHead struct{ ID, Status string }

// faultList lists key-0's jobs.
func faultList(t *testing.T, h *harness, c *http.Client) []faultHead {
	t.Helper()
	code, out, err := call(c, http.MethodGet, h.serve.base+"/v1/batch?limit=100", faultKey, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("list: %d %v %s", code, err, out)
	}
	var l struct {
		Jobs []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"jobs"`
	}
	must(t, json.Unmarshal(out, &l))
	var hs []faultHead
	for _, j := range l.Jobs {
		hs = append(hs, faultHead{j.ID, j.Status})
	}
	return hs
}

// TestDiskFault_FullAtOpen: a fresh store on a disk with almost no room
// (the power-cut file system's write budget, with --disk-reserve 1 so
// that the reserve does not stand in the way: another process filled the
// disk). serve either starts and refuses writes with 507, or exits with an
// error naming the space; it never dies of a fault or a panic, and once
// room returns a job submitted then runs to its end.
func TestDiskFault_FullAtOpen(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, budget := range []int64{0, 4096, 1 << 20, 24 << 20, 56 << 20, 76 << 20} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			h := faultHarness(t, true)
			h.mount(t, 3540+budget)
			h.fs.SetWriteBudget(budget)
			args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
				"--allow-private", "--durable", "--disk-reserve", "1"}
			p, ok := faultStart(t, args)
			if !ok {
				out := p.stderr.String()
				t.Logf("serve exited at open: %s", tail(out, 300))
				if strings.Contains(out, "fatal error") || strings.Contains(out, "panic") || strings.Contains(out, "SIGBUS") {
					t.Fatalf("serve died of the full disk at open:\n%s", tail(out, 3000))
				}
				if !strings.Contains(strings.ToLower(out), "space") && !strings.Contains(out, "disk full") {
					t.Errorf("serve exited at open without naming the space:\n%s", tail(out, 2000))
				}
				return
			}
			h.serve = p
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			body := fmt.Sprintf(`{"targets":[{"url":"%s/p/1/3000/2"}]}`, h.site.URL)
			code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, body)
			t.Logf("submit while full: %d %v %.200s", code, err, out)
			if err != nil || (code != http.StatusAccepted && code != http.StatusInsufficientStorage) {
				t.Errorf("submit while full: %d %v %s (want 202 or 507)", code, err, out)
			}
			h.fs.SetWriteBudget(-1)
			deadline := time.Now().Add(testkit.Deadline)
			var id string
			for id == "" && time.Now().Before(deadline) {
				code, out, err = call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, body)
				if err == nil && code == http.StatusAccepted {
					var a struct{ ID string }
					must(t, json.Unmarshal(out, &a))
					id = a.ID
					break
				}
				time.Sleep(50 * time.Millisecond) // the disk watch measures every second: no signal across processes
			}
			if id == "" {
				t.Fatalf("room returned, and submits still answer %d %v %s", code, err, out)
			}
			if r := faultWaitDone(t, h, c, id); r.Status != "done" {
				t.Errorf("job submitted once room returned ends %s", r.Status)
			}
			h.stop(t)
			if out := h.serve.stderr.String(); strings.Contains(out, "fatal error") || strings.Contains(out, "panic") {
				t.Errorf("serve's log: %s", tail(out, 3000))
			}
			must(t, h.fs.Unmount())
		})
	}
}

// faultStart starts serve with args and waits for it to listen (ok) or to
// exit (not ok).
func faultStart(t *testing.T, args []string) (*serveProc, bool) {
	t.Helper()
	cmd := exec.Command(clitest.Binary(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	p := &serveProc{cmd: cmd, stderr: &lines{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	must(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		var ok bool
		_, p.base, ok = strings.Cut(strings.TrimSpace(l), "listening on ")
		if ok {
			return p, true
		}
		<-p.done
	case <-p.done:
	case <-time.After(testkit.Deadline):
		// Where it is stuck: its goroutines (SIGQUIT ends it with them).
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(testkit.Deadline):
		}
		var stacks []string
		for _, g := range strings.Split(p.stderr.String(), "\n\n") {
			if strings.Contains(g, "goroutine ") && (strings.Contains(g, "badger") || strings.Contains(g, "sift/batch/")) && !strings.Contains(g, "[IO wait") {
				stacks = append(stacks, headTail(g, 2000))
			}
		}
		t.Fatalf("serve neither listens nor exits on a full disk: %s\nits goroutines at SIGQUIT:\n%s", tail(p.stderr.String(), 1500), strings.Join(stacks[:min(len(stacks), 12)], "\n--\n"))
	}
	return p, false
}

// TestDiskFault_RestartOnFullDisk: serve restarts (a deploy, a crash) while
// its disk is full (another process filled it). Issue 36: a full disk never
// stops the node: reads are served. serve must start on its existing store
// and answer a read of an acknowledged job, and refuse a submit with 507.
func TestDiskFault_RestartOnFullDisk(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			h := faultHarness(t, durable)
			h.mount(t, 3550)
			h.start(t)
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			id := faultSubmit(t, h, c, []int{3000, 200}, 2)
			want := faultWaitDone(t, h, c, id)
			h.stop(t)
			must(t, h.fs.Unmount())

			h.mount(t, 3551)
			h.fs.SetWriteBudget(0)
			args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
				"--allow-private"}
			if durable {
				args = append(args, "--durable")
			}
			p, ok := faultStart(t, args)
			if !ok {
				t.Fatalf("serve does not start on its store while the disk is full, so it serves no read: %s", tail(p.stderr.String(), 400))
			}
			h.serve = p
			got := h.readJob(t, c, Job{ID: id, Key: faultKey})
			if got.Code != http.StatusOK || len(got.Done) != len(want.Done) {
				t.Errorf("read while full: %d, %d of %d targets read", got.Code, len(got.Done), len(want.Done))
			}
			body := fmt.Sprintf(`{"targets":[{"url":"%s/p/1/3000/2"}]}`, h.site.URL)
			code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, body)
			if err != nil || code != http.StatusInsufficientStorage {
				t.Errorf("submit while full: %d %v %s (want 507)", code, err, out)
			}
			h.fs.SetWriteBudget(-1)
			h.stop(t)
			must(t, h.fs.Unmount())
		})
	}
}

// TestDiskFault_CancelFsyncEIO: a cancel whose sync meets an EIO on the
// memtable log (its pages dropped, as Linux drops them). Whatever serve
// answers, a 200 must read cancelled after a power cut, and a job must
// not be left live.
func TestDiskFault_CancelFsyncEIO(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := faultHarness(t, true)
	fetched, release := faultGatedSite(t, h)
	h.mount(t, 3560)
	h.start(t)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	id := faultSubmit(t, h, c, []int{3000, 3000}, gated)
	<-fetched // the job is running, its first target being fetched
	h.fs.FailNextFsync(faultNewest(t, h, ".mem"))
	code, out, err := call(c, http.MethodDelete, h.serve.base+"/v1/batch/"+id, faultKey, "")
	t.Logf("cancel, its sync failed: %d %v %.300s", code, err, out)
	close(release)
	r := faultWaitDone(t, h, c, id)
	t.Logf("before the cut: %s", r.Status)
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "EIO") {
			t.Logf("fs: %s", l)
		}
	}
	// Later acknowledged writes, in the same log.
	later := faultSubmit(t, h, c, []int{200}, 2)
	laterR := faultWaitDone(t, h, c, later)
	faultCut(t, h, powercut.DropAll)

	h.mount(t, 3561)
	h.start(t)
	got := h.readJob(t, c, Job{ID: id, Key: faultKey})
	t.Logf("after the cut: %d %s", got.Code, got.Status)
	if code == http.StatusOK && got.Status != "cancelled" {
		t.Errorf("cancel answered 200 reads %d %q after the cut", got.Code, got.Status)
	}
	if got.Status == "queued" || got.Status == "running" {
		t.Errorf("job %s is live after the restart", id)
	}
	if g := h.readJob(t, c, Job{ID: later, Key: faultKey}); g.Code != http.StatusOK || len(g.Done) != len(laterR.Done) {
		t.Errorf("job acknowledged after the failed sync reads %d, %d of %d targets", g.Code, len(g.Done), len(laterR.Done))
	}
	h.stop(t)
	must(t, h.fs.Unmount())
}

// TestDiskFault_CutAfterValueLogRotation: the power is cut right after the
// first results acknowledged into a value-log file Badger has just
// created (its directory entry is what issue 35 syncs), torn last pages.
// Every result read done before the cut reads the same after it.
func TestDiskFault_CutAfterValueLogRotation(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := faultHarness(t, true)
	h.mount(t, 3570)
	h.start(t)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	first := faultNewest(t, h, ".vlog")
	var ids []string
	var rs []Reading
	for i := 0; faultNewest(t, h, ".vlog") == first; i++ {
		if i > 40 {
			t.Fatalf("the value log did not rotate after %d jobs of 1.6 MB", i)
		}
		id := faultSubmit(t, h, c, []int{200_000, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000}, 0)
		ids, rs = append(ids, id), append(rs, faultWaitDone(t, h, c, id))
	}
	t.Logf("the value log rotated after %d jobs: %s", len(ids), faultNewest(t, h, ".vlog"))
	for range 2 {
		id := faultSubmit(t, h, c, []int{3000, 200_000}, 0)
		ids, rs = append(ids, id), append(rs, faultWaitDone(t, h, c, id))
	}
	faultCut(t, h, powercut.TearLast)

	h.mount(t, 3571)
	h.start(t)
	for i, id := range ids {
		got := h.readJob(t, c, Job{ID: id, Key: faultKey})
		if got.Code != http.StatusOK {
			t.Errorf("job %s reads %d after the cut", id, got.Code)
			continue
		}
		for idx, sum := range rs[i].Done {
			if got.Done[idx] != sum {
				t.Errorf("job %s target %d: read done before the cut, not after it (unreadable=%v)", id, idx, got.Unreadable[idx])
			}
		}
	}
	h.stop(t)
	must(t, h.fs.Unmount())
}

// TestDiskFault_NoSpaceAtValueLogRotation: the disk fills (another process:
// --disk-reserve 1) just as Badger must create its next value-log file.
// The results that meet it are held; once room returns they are stored,
// and after a clean restart every result read done reads the same.
func TestDiskFault_NoSpaceAtValueLogRotation(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := faultHarness(t, true)
	h.mount(t, 3580)
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
		"--allow-private", "--durable", "--disk-reserve", "1", "--workers", "2", "--max-bytes", "4294967296", "--jobs-per-caller", "8", "--jobs-total", "16"}
	p, ok := faultStart(t, args)
	if !ok {
		t.Fatalf("serve did not start: %s", p.stderr.String())
	}
	h.serve = p
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	eight := []int{200_000, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000}
	var ids []string
	var rs []Reading
	for range 9 { // 14.4 MB of the value-log file's 16 MiB
		id := faultSubmit(t, h, c, eight, 0)
		ids, rs = append(ids, id), append(rs, faultWaitDone(t, h, c, id))
	}
	first := faultNewest(t, h, ".vlog")
	h.fs.SetWriteBudget(1 << 20)
	var pending []string
	for range 4 {
		var targets []map[string]string
		for range 8 {
			targets = append(targets, map[string]string{"url": fmt.Sprintf("%s/p/%d/200000/0", h.site.URL, h.page.Add(1))})
		}
		body, _ := json.Marshal(map[string]any{"targets": targets})
		code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, string(body))
		t.Logf("submit on the filling disk: %d %v %.160s", code, err, out)
		if code == http.StatusAccepted {
			var a struct{ ID string }
			must(t, json.Unmarshal(out, &a))
			pending = append(pending, a.ID)
		}
	}
	// Wait for the disk to be met (ENOSPC) before room returns.
	deadline := time.Now().Add(testkit.Deadline)
	for h.fs.Stats().NoSpace == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the fault is met in another process
	}
	if h.fs.Stats().NoSpace == 0 {
		t.Fatalf("the write budget was never met (value log %s)", faultNewest(t, h, ".vlog"))
	}
	t.Logf("ENOSPC met %d times; value log %s", h.fs.Stats().NoSpace, faultNewest(t, h, ".vlog"))
	h.fs.SetWriteBudget(-1)
	for _, id := range pending {
		ids, rs = append(ids, id), append(rs, faultWaitDone(t, h, c, id))
	}
	for _, r := range rs[9:] {
		t.Logf("a job submitted on the filling disk ended %s, %d targets done", r.Status, len(r.Done))
	}
	t.Logf("value log %s then %s", first, faultNewest(t, h, ".vlog"))
	if err := h.serve.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		<-h.serve.done
	}
	must(t, h.fs.Unmount())

	h.mount(t, 3581)
	h.start(t)
	for i, id := range ids {
		got := h.readJob(t, c, Job{ID: id, Key: faultKey})
		if got.Code != http.StatusOK {
			t.Errorf("job %s reads %d after the restart", id, got.Code)
			continue
		}
		for idx, sum := range rs[i].Done {
			if got.Done[idx] != sum {
				t.Errorf("job %s target %d: read done before the restart, not after it (unreadable=%v)", id, idx, got.Unreadable[idx])
			}
		}
	}
	h.stop(t)
	must(t, h.fs.Unmount())
}
