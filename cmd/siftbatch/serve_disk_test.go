package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// The full-disk tests of serve (issue 36): real serve processes, both
// durabilities, on a small tmpfs of their own (root; each skips with one
// line where it cannot mount one). TestServe_DiskFull is the fast tier
// (make test); SIFTBATCH_DISK_ROUNDS=N runs N rounds of each (make
// test/disk ROUNDS=N).

// diskServe is a serve process whose log the test reads.
type diskServe struct {
	*serveProcess
	logs   *testkit.SyncBuffer
	exited chan error // serve's exit, once it has exited
}

// startDiskServe starts serve on store dir with args; its stop (SIGTERM)
// at cleanup must find it alive and see it exit 0.
func startDiskServe(t *testing.T, dir string, args ...string) *diskServe {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(clitest.Binary(t), append([]string{"serve", "--addr", "127.0.0.1:0", "--data", dir, "--keys", keys,
		"--allow-private", "--log-level", "info", "--max-bytes", strconv.FormatInt(1<<40, 10),
		"--jobs-per-caller", "8", "--jobs-total", "16", "--workers", "2", "--retry-wait", "200ms"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	s := &diskServe{logs: logs, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	transport := &http.Transport{}
	// sync.Once, not sync.OnceFunc: a t.Fatal in it (testkit.Recv's
	// deadline) is a Goexit, which OnceFunc turns into a panic.
	var once sync.Once
	stop := func() {
		once.Do(func() {
			transport.CloseIdleConnections()
			select {
			case err := <-s.exited:
				t.Errorf("serve had exited before the stop: %v; its log ends:\n%s", err, tailLines(logs.String(), 20))
				return
			default:
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := testkit.Recv(t, s.exited); err != nil {
				t.Errorf("serve: %v; its log ends:\n%s", err, tailLines(logs.String(), 20))
			}
			if l := logs.String(); strings.Contains(l, "SIGBUS") || strings.Contains(l, "fatal error") || strings.Contains(l, "panic") {
				t.Errorf("serve's log has a fault:\n%s", tailLines(l, 40))
			}
		})
	}
	t.Cleanup(stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's log ends:\n%s", tailLines(logs.String(), 60))
		}
	})
	s.serveProcess = &serveProcess{pid: cmd.Process.Pid, c: &http.Client{Transport: transport, Timeout: 2 * time.Minute}, stop: stop}
	var ok bool
	if _, s.base, ok = strings.Cut(strings.TrimSpace(testkit.Recv(t, line)), "listening on "); !ok {
		t.Fatalf("serve did not say where it listens:\n%s", logs.String())
	}
	return s
}

// alive fails the test if serve has exited.
func (s *diskServe) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-s.exited:
		s.exited <- err
		t.Fatalf("serve died %s: %v; its log ends:\n%s", when, err, tailLines(s.logs.String(), 30))
	default:
	}
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// diskJob is a job a 202 acknowledged.
type diskJob struct {
	id, key string
}

// diskHistory is what a round acknowledged, and its checks.
type diskHistory struct {
	jobs     []diskJob
	refused  int // 507s, and (the disk failed) 503s
	n        int // submits tried
	resultSz int
}

// submit submits a job of 2 targets of the 4 MiB page as one of two
// callers: a 202 is recorded, a 507 counted (and checked); a 429 (the caps)
// waits for a job to end. It returns the code.
func (h *diskHistory) submit(t *testing.T, s *diskServe, site string) int {
	t.Helper()
	key := []string{"alice-secret-key", "bob-long-secret-key"}[h.n%2]
	body := fmt.Sprintf(`{"targets":[{"url":"%s/json?j=%d&i=0"},{"url":"%s/json?j=%d&i=1"}]}`, site, h.n, site, h.n)
	h.n++
	r := s.do(t, http.MethodPost, "/v1/batch", key, body)
	switch r.code {
	case http.StatusAccepted:
		h.jobs = append(h.jobs, diskJob{r.json(t)["id"].(string), key})
	case http.StatusInsufficientStorage:
		h.refused++
		m := r.json(t)
		if m["error"] != "disk full" || !strings.Contains(fmt.Sprint(m["hint"]), "reserve") || r.header.Get("Retry-After") == "" {
			t.Fatalf("a 507 says why and when to retry: %v %v", m, r.header)
		}
	case http.StatusServiceUnavailable:
		h.refused++ // the disk failed to sync the job: nothing was created
		if m := r.json(t); m["error"] != "disk failed" {
			t.Fatalf("a 503 on submit says why: %v", m)
		}
	case http.StatusTooManyRequests:
		// The caps: wait for the oldest job to change.
		j := h.jobs[0]
		s.do(t, http.MethodGet, "/v1/batch/"+j.id+"?wait=1s", j.key, "")
	default:
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	return r.code
}

// check reads every acknowledged job back: it has ended (done, or
// cancelled), and each target done reads back with its whole result. It
// returns the targets read.
func (h *diskHistory) check(t *testing.T, s *diskServe) int {
	t.Helper()
	read := 0
	for _, j := range h.jobs {
		m := s.wait(t, j.key, j.id)
		if st := m["status"]; st != "done" && st != "cancelled" {
			t.Fatalf("job %s acknowledged with a 202 ended %v: %v", j.id, st, m["error"])
		}
		for i, tg := range m["targets"].([]any) {
			st := tg.(map[string]any)["status"]
			if st != "done" {
				if m["status"] == "done" {
					t.Fatalf("job %s target %d: %v", j.id, i, st)
				}
				continue
			}
			r := s.do(t, http.MethodGet, fmt.Sprintf("/v1/batch/%s/%d", j.id, i), j.key, "")
			if r.code != http.StatusOK || len(r.body) < h.resultSz {
				t.Fatalf("job %s target %d reads %d, %d bytes", j.id, i, r.code, len(r.body))
			}
			read++
		}
	}
	return read
}

// liveDone sums targets_done over the jobs that were live.
func liveDone(t *testing.T, s *diskServe, jobs []diskJob) int {
	t.Helper()
	n := 0
	for _, j := range jobs {
		m := s.do(t, http.MethodGet, "/v1/batch/"+j.id, j.key, "").json(t)
		n += int(m["targets_done"].(float64))
	}
	return n
}

// requireDiskFullServed: while the disk is below its reserve, /healthz,
// /metrics, reads, the list, the dashboard and a cancel answer.
func requireDiskFullServed(t *testing.T, s *diskServe, h *diskHistory) {
	t.Helper()
	testkit.WaitFor(t, "/healthz to say the disk is full", func() bool {
		r := s.do(t, http.MethodGet, "/healthz", "", "")
		return r.code == http.StatusOK && strings.Contains(string(r.body), `"status":"disk full"`)
	})
	if r := s.do(t, http.MethodGet, "/metrics", "", ""); !strings.Contains(string(r.body), "\nsiftbatch_disk_full 1\n") {
		t.Fatalf("/metrics does not say the disk is full:\n%s", r.body)
	}
	for _, j := range h.jobs {
		if r := s.do(t, http.MethodGet, "/v1/batch/"+j.id, j.key, ""); r.code != http.StatusOK {
			t.Fatalf("a read on a full disk: %d %s", r.code, r.body)
		}
	}
	if r := s.do(t, http.MethodGet, "/v1/batch", "alice-secret-key", ""); r.code != http.StatusOK {
		t.Fatalf("the list on a full disk: %d %s", r.code, r.body)
	}
	if r := s.do(t, http.MethodGet, "/ui/", "", ""); r.code != http.StatusOK {
		t.Fatalf("the dashboard on a full disk: %d", r.code)
	}
	for i := len(h.jobs) - 1; i >= 0; i-- { // the newest live job is cancelled
		j := h.jobs[i]
		if st := s.do(t, http.MethodGet, "/v1/batch/"+j.id, j.key, "").json(t)["status"]; st != "running" && st != "queued" {
			continue
		}
		// 409: it ended meanwhile. 507: a durable serve whose disk has no
		// room for a write refuses a cancel at once, nothing changed
		// (docs/RELIABILITY.md, "A cancel on a full disk"); it waited for
		// room before, and answered 409 after a minute.
		// Never 503 "not confirmed" after the runner's one-minute
		// timeout: a durable job whose running row met the full disk
		// waited inside the held write and answered no cancel (every
		// run of 3 rounds, until 5ef2bb4: docs/RELIABILITY.md, "A cancel
		// on a full disk").
		start := time.Now()
		r := s.do(t, http.MethodDelete, "/v1/batch/"+j.id, j.key, "")
		refused := r.code == http.StatusInsufficientStorage && strings.Contains(string(r.body), "the cancel was not stored")
		if r.code != http.StatusOK && r.code != http.StatusConflict && !refused {
			t.Fatalf("a cancel on a full disk: %d %s", r.code, r.body)
		}
		t.Logf("a cancel on a full disk: %d in %.1f s", r.code, time.Since(start).Seconds())
		break
	}
	if !strings.Contains(s.logs.String(), "disk below its reserve") {
		t.Fatalf("no log line says the disk is below its reserve:\n%s", tailLines(s.logs.String(), 20))
	}
}

// diskRounds is SIFTBATCH_DISK_ROUNDS, 1 by default.
func diskRounds(t *testing.T) int {
	n, err := strconv.Atoi(os.Getenv("SIFTBATCH_DISK_ROUNDS"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// TestServe_DiskFull: serve on a 160 MiB tmpfs, in both durabilities.
// "jobs": the jobs' own 4 MiB results fill it to the reserve; submits
// answer 507, the jobs are held, everything else answers; the tmpfs is
// grown, and the held jobs go on by themselves. "other": another process
// fills the tmpfs to the last byte while serve writes: the writes that
// find no room fail and are held (never a SIGBUS), submits answer 507;
// the filler is removed and the held writes land. In both, serve is alive
// throughout and exits 0 at the end, and every job acknowledged with a
// 202 reads back ended, with every stored result whole.
func TestServe_DiskFull(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	site := filterSite(t)
	for _, fill := range []string{"jobs", "other"} {
		for _, durable := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/durable=%v", fill, durable), func(t *testing.T) {
				t.Parallel()
				for round := range diskRounds(t) {
					diskRound(t, site.URL, fill, durable, round)
				}
			})
		}
	}
}

// diskRound is one round of TestServe_DiskFull.
func diskRound(t *testing.T, site, fill string, durable bool, round int) {
	// "jobs": the store opens 53 MiB of files, 34 MiB of results take it
	// to the reserve (73.6 MiB). "other": room for all its jobs once the
	// filler is gone.
	size := int64(160 << 20)
	if fill == "other" {
		size = 320 << 20
	}
	mnt := testkit.MountTmpfs(t, size)
	args := []string{}
	if durable {
		args = append(args, "--durable")
	}
	s := startDiskServe(t, filepath.Join(mnt, "store"), args...)
	h := &diskHistory{resultSz: 4 << 20}
	var filler string
	switch fill {
	case "jobs":
		for h.refused == 0 {
			if h.n > 200 {
				t.Fatal("the disk never went below its reserve")
			}
			h.submit(t, s, site)
			s.alive(t, "while its jobs filled the disk")
		}
	case "other":
		for range 6 {
			h.submit(t, s, site)
		}
		testkit.WaitFor(t, "a first target stored", func() bool { return liveDone(t, s, h.jobs) > 0 })
		filler = testkit.FillDisk(t, mnt, 0) // mid-write: the jobs are fetching and storing
		// Until serve's watch measures (every second, or at once when a
		// write finds no room) its preallocated files take small writes:
		// submits may still be taken. Once /healthz says so, none is.
		testkit.WaitFor(t, "/healthz to say the disk is full", func() bool {
			r := s.do(t, http.MethodGet, "/healthz", "", "")
			return r.code == http.StatusOK && strings.Contains(string(r.body), `"status":"disk full"`)
		})
		if code := h.submit(t, s, site); code != http.StatusInsufficientStorage {
			t.Fatalf("a submit once /healthz says the disk is full: %d, want 507", code)
		}
		s.alive(t, "on a disk filled by another process")
	}
	requireDiskFullServed(t, s, h)
	s.alive(t, "while the disk was full")

	before := liveDone(t, s, h.jobs)
	start := time.Now()
	if fill == "jobs" {
		if out, err := exec.Command("mount", "-o", "remount,size=512m", mnt).CombinedOutput(); err != nil {
			t.Fatalf("grow the tmpfs: %v: %s", err, out)
		}
	} else if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var resumed time.Duration
	allEnded := func() bool {
		for _, j := range h.jobs {
			if st := s.do(t, http.MethodGet, "/v1/batch/"+j.id, j.key, "").json(t)["status"]; st == "queued" || st == "running" {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, "a held target stored once there is room", func() bool {
		if liveDone(t, s, h.jobs) > before || allEnded() {
			resumed = time.Since(start)
			return true
		}
		return false
	})
	read := h.check(t, s)
	s.alive(t, "after the disk had room again")
	testkit.WaitFor(t, "/healthz ok again", func() bool {
		return strings.Contains(string(s.do(t, http.MethodGet, "/healthz", "", "").body), `"status":"ok"`)
	})
	after := &diskHistory{resultSz: h.resultSz, n: 1000}
	after.submit(t, s, site)
	if len(after.jobs) != 1 || after.check(t, s) != 2 {
		t.Fatal("a job submitted once there is room does not run")
	}
	s.stop()
	stats, _ := json.Marshal(map[string]any{"fill": fill, "durable": durable, "round": round, "acknowledged": len(h.jobs),
		"refused_507": h.refused, "targets_read": read, "lost": 0, "deaths": 0, "resume_seconds": resumed.Seconds()})
	t.Logf("disk round: %s", stats)
}

// TestServe_DiskFaults: serve on the power-cut file system (a FUSE mount:
// root and /dev/fuse; it skips with one line without them), both
// durabilities, SIFTBATCH_DISK_ROUNDS rounds of each. In each round, while
// jobs run: ENOSPC past a random byte budget (statfs reports no more than
// is left), and in durable rounds EIO on a random share of the fsyncs;
// the reserve is the default or 1 MiB (so that the budget runs out between
// two measures, as a disk filled by another process does). Then the
// faults clear. History checked: every job acknowledged with a 202 reads
// back ended with its stored results whole, nothing is live once the
// faults have cleared, a submit refused is refused with 507 naming the
// disk, serve is alive throughout and exits 0.
func TestServe_DiskFaults(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skipf("the power-cut file system: %v", err)
	}
	t.Parallel()
	page := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, page) }))
	t.Cleanup(site.Close)
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			for round := range diskRounds(t) {
				faultRound(t, site.URL, durable, round)
			}
		})
	}
}

// faultRound is one round of TestServe_DiskFaults.
func faultRound(t *testing.T, site string, durable bool, round int) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(round)))
	backing, mnt := t.TempDir(), t.TempDir()
	fsys, err := powercut.Mount(backing, mnt, powercut.Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	var s *diskServe
	defer func() {
		if s != nil {
			s.stop() // before the file system goes
		}
		if err := fsys.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	reserve := "1048576"
	if rng.IntN(3) == 0 {
		reserve = strconv.Itoa(engine.DefaultDiskReserve)
	}
	args := []string{"--disk-reserve", reserve}
	if durable {
		args = append(args, "--durable")
	}
	s = startDiskServe(t, filepath.Join(mnt, "store"), args...)
	h := &diskHistory{resultSz: 1 << 20}
	for range 3 {
		h.submit(t, s, site)
	}
	budget := rng.Int64N(24 << 20) // the 15 jobs want 30 MiB: past the 16 MiB of a value-log file, whose next one takes 32
	fsys.SetWriteBudget(budget)
	p := 0.0
	if durable {
		p = 0.2 + 0.6*rng.Float64()
		fsys.FailFsyncs(p)
	}
	for range 12 {
		h.submit(t, s, site)
		s.alive(t, "under the faults")
	}
	// The faults stay until they have been met (a write past the budget,
	// a failed fsync, the disk below its reserve) or the jobs have ended:
	// each pass waits on a job's long-poll.
	for end := time.Now().Add(45 * time.Second); time.Now().Before(end); {
		st := fsys.Stats()
		if st.NoSpace > 0 || st.FailedSyncs > 2 || s.Runner(t).diskFull {
			break
		}
		live := h.live(t, s)
		if live == nil {
			break
		}
		s.do(t, http.MethodGet, "/v1/batch/"+live.id+"?wait=1s", live.key, "")
	}
	s.alive(t, "under the faults")
	fsys.SetWriteBudget(-1)
	fsys.FailFsyncs(0)
	read := h.check(t, s)
	s.alive(t, "after the faults cleared")
	s.stop()
	st := fsys.Stats()
	stats, _ := json.Marshal(map[string]any{"durable": durable, "round": round, "seed": seed, "budget": budget, "eio_p": p,
		"reserve": reserve, "acknowledged": len(h.jobs), "refused": h.refused, "targets_read": read, "lost": 0, "deaths": 0,
		"fs": fmt.Sprintf("%+v", st)})
	t.Logf("fault round: %s", stats)
}

// live returns a job of h still queued or running, or nil.
func (h *diskHistory) live(t *testing.T, s *diskServe) *diskJob {
	t.Helper()
	for i := range h.jobs {
		j := &h.jobs[i]
		if st := s.do(t, http.MethodGet, "/v1/batch/"+j.id, j.key, "").json(t)["status"]; st == "queued" || st == "running" {
			return j
		}
	}
	return nil
}

// diskHealth is what /healthz says of the disk.
type diskHealth struct{ diskFull bool }

// Runner asks serve's /healthz whether its disk is below the reserve.
func (s *diskServe) Runner(t *testing.T) diskHealth {
	t.Helper()
	return diskHealth{strings.Contains(string(s.do(t, http.MethodGet, "/healthz", "", "").body), `"disk full"`)}
}
