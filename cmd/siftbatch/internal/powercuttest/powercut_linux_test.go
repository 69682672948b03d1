package powercuttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// The power-cut test (docs/RELIABILITY.md, "Power cut"). Each round runs
// clients against a serve process whose store is on a power-cut file
// system (engine/enginetest/powercut), cuts the power at a random moment,
// and restarts serve on what the backing directory then holds:
//
//   - clients: four callers, each with up to two live jobs of 1 to 6
//     targets at a time, submitting, polling (?results=1) and now and
//     then cancelling; the targets are pages of a fixture server, of 200
//     bytes (inline in the store's rows), 3 KB (the value log) or 200 KB
//     (the value log, in chunks), each after 2 to 40 ms;
//   - the cut: serve is stopped (SIGSTOP: it answers nothing more), the
//     file system cut (it freezes, so nothing more reaches the backing
//     directory, drops what was not synced by the round's mode, and
//     unmounts), serve killed (SIGKILL). Answers that arrived after the
//     cut began acknowledge nothing;
//   - the store, copied, is opened by the test (persistence.Open): it
//     must open, repair no index and recount no byte total
//     (Store.Recovery), and its byte total must equal a count of its rows;
//   - serve restarts on a fresh mount and every job acknowledged this
//     round (and up to 40 of earlier rounds) is read back: the checker
//     (Check) holds it to the history of what the clients were answered.
//
// In durable mode (serve --durable) any loss fails the test; in the
// default mode losses are counted (the loss window: targets and seconds),
// and only a store that does not open, a repair, or a job left live fails.
//
// POWERCUT_ROUNDS sets the rounds (10 in make test's durable run, 4 in
// its default-mode run); POWERCUT_SEED the first round's seed (each round
// uses seed+round, its cut mode seed%3, on the store the rounds before
// left): a failing round prints the two that replay its schedule (the
// timing of the processes is the machine's).

const (
	roundsEnv = "POWERCUT_ROUNDS"
	seedEnv   = "POWERCUT_SEED"
	// defaultSeed is make test's: the rounds that found faults (see
	// faultSeeds) are among its rounds or run by TestPowerCut_FoundFaults.
	defaultSeed = 3500
)

// faultSeeds are the rounds that once found a fault, by seed and mode:
// TestPowerCut_FoundFaults runs each again (docs/RELIABILITY.md, "Power
// cut").
// faultSeeds are the runs that once found a fault: first seed, and the
// round (counted from 1) that found it; TestPowerCut_FoundFaults runs each
// again up to that round. Those within make test's own rounds (from
// defaultSeed, 10 durable) are run there and skipped here.
var faultSeeds = []struct {
	seed    int
	rounds  int
	durable bool
	why     string
}{
	// Before 86833ce and 655ddb7: the store's directory, made by Open,
	// was gone after the cut (its entry in the mount never synced), and
	// with it every job; with that fixed, the value-log file Badger made
	// at Open was gone, so every result in it read "store corrupt".
	{3500, 1, true, "the store's directory and a new value-log file's entries not synced"},
	// Before DropUnreadableResults: a target being stored at the cut
	// kept its row (the memtable's log) and lost its value-log bytes;
	// its job's read of all results failed, acknowledged ones included.
	{3500, 2, true, "a result's row replayed without its value-log bytes"},
	{3510, 3, true, "a result's row replayed without its value-log bytes"},
	// (The same run, round 2, seed 3511, under -race with memtables that
	// rotate: every write of a flushed memtable's log lost. Badger
	// truncated the log before removing it, a durable sync of the logs it
	// set aside made the truncation stable, and the cut undid the remove
	// and the table's creation: fixed in persistence/internal/ristretto,
	// TestMmapFileDelete_LeavesTheContent.)
}

// TestPowerCut_Durable: serve --durable loses nothing acknowledged to a
// power cut, in any cut mode.
func TestPowerCut_Durable(t *testing.T) {
	s := runRounds(t, true, envInt(t, roundsEnv, 10), envInt(t, seedEnv, defaultSeed))
	s.report(t)
	requireRotations(t, s)
	if s.lost() > 0 {
		t.Errorf("durable mode lost acknowledged work: %d losses", s.lost())
	}
}

// TestPowerCut_Default measures what the default mode (no --durable)
// loses to a power cut: expected loss (docs/RELIABILITY.md), not a
// failure; the store must still open every time.
func TestPowerCut_Default(t *testing.T) {
	s := runRounds(t, false, envInt(t, roundsEnv, 4), envInt(t, seedEnv, defaultSeed))
	s.report(t)
	requireRotations(t, s)
}

// TestPowerCut_FoundFaults runs again each run that once found a fault.
func TestPowerCut_FoundFaults(t *testing.T) {
	for _, f := range faultSeeds {
		t.Run(fmt.Sprintf("seed=%d/rounds=%d", f.seed, f.rounds), func(t *testing.T) {
			if f.durable && f.seed == defaultSeed && f.rounds <= 10 {
				t.Skipf("rounds of TestPowerCut_Durable")
			}
			s := runRounds(t, f.durable, f.rounds, f.seed)
			if f.durable && s.lost() > 0 {
				t.Errorf("%s: lost %d", f.why, s.lost())
			}
		})
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// summary adds up the rounds.
type summary struct {
	durable                   bool
	rounds, cuts              int
	submits, targets, cancels int // acknowledged before a cut, checked after it
	losses                    map[string]int
	maxAge                    time.Duration // the oldest loss's age at its cut
	lostWindow                time.Duration // the sum over cuts of the oldest loss's age
	recovered                 persistence.Recovery
	seedsLost                 []int64
	// unreadable: targets that read done after the restart but whose
	// result does not read (never acknowledged, or they would be losses).
	unreadable int
	// dropped: results the restart dropped as unreadable (serve's log).
	dropped int
	rot     rotations // Badger's files made within rounds (rotation_linux_test.go)
}

func (s *summary) lost() int {
	n := 0
	for _, v := range s.losses {
		n += v
	}
	return n
}

func (s *summary) report(t *testing.T) {
	mode := "default"
	if s.durable {
		mode = "durable"
	}
	t.Logf("POWERCUT %s: %d rounds, %d cuts; acknowledged and checked: %d submits, %d targets shown done, %d cancels; lost: %d %v; oldest loss %s before its cut, loss window summed %s; Open recovered %d unlisted tables (%d lost with their logs), %d empty logs; %d targets read done but unreadable; %d jobs with results dropped as unreadable at the restart; %s; seeds with a loss %v",
		mode, s.rounds, s.cuts, s.submits, s.targets, s.cancels, s.lost(), s.losses, s.maxAge.Round(time.Millisecond), s.lostWindow.Round(time.Millisecond),
		s.recovered.UnlistedTables, s.recovered.LostTables, s.recovered.EmptyLogs, s.unreadable, s.dropped, s.rot, s.seedsLost)
}

// runRounds runs rounds rounds on one store, from seed seed.
func runRounds(t *testing.T, durable bool, rounds, seed int) *summary {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	h := newHarness(t, durable)
	s := &summary{durable: durable, losses: map[string]int{}}
	var older []Job // acknowledged in earlier rounds
	h.mount(t, int64(seed))
	h.start(t)
	for r := range rounds {
		rs := int64(seed + r)
		rng := rand.New(rand.NewPCG(uint64(rs), 35))
		mode := powercut.CutMode(rs % 3)
		t.Logf("round %d: seed %d, mode %s (replay: %s=%d %s=%d)", r, rs, mode, seedEnv, seed, roundsEnv, r+1)
		hist := &History{}
		started := newestFiles(t, h.store())
		at := cutAt{d: time.Duration(300+rng.IntN(2200)) * time.Millisecond, after: rotationOf(r), started: started}
		cut := h.load(t, hist, rng, at, mode)
		mem, vlog, sst := s.rot.add(started, h.atCut)
		s.rot.waited(at.after, h.rotated)
		s.rounds++
		s.cuts++
		stored := h.copyStore(t)
		if keep := os.Getenv("POWERCUT_KEEP"); keep != "" && stored != "" { // a copy of each round's store as the cut left it
			_ = exec.Command("cp", "-a", "--sparse=always", stored, filepath.Join(keep, fmt.Sprintf("store-%d", rs))).Run()
		}
		s.checkStore(t, stored, rs)
		h.mount(t, rs+1)
		h.start(t)
		jobs := hist.Jobs()
		after := h.readBack(t, jobs)
		losses := Check(hist, cut, after)
		// Earlier rounds' jobs: nothing acknowledged then may be lost now
		// (a later cut must not undo a flush, say).
		sample := older
		if len(sample) > 40 {
			sample = sample[len(sample)-40:]
		}
		for id, r := range h.readBack(t, sample) {
			if r.Code != 200 && h.durable {
				losses = append(losses, Loss{RuleSubmitLost, id, -1, 0})
			}
		}
		for _, r := range after {
			s.unreadable += len(r.Unreadable)
		}
		s.dropped += strings.Count(h.serve.stderr.String(), "dropped results a power cut left unreadable")
		sub, tg, c := hist.Counts(cut)
		s.submits, s.targets, s.cancels = s.submits+sub, s.targets+tg, s.cancels+c
		var oldest time.Duration
		for _, l := range losses {
			s.losses[l.Rule]++
			oldest = max(oldest, l.Age)
			if h.durable || l.Rule == RuleLive {
				t.Errorf("seed %d (%s, %s): %s", rs, mode, modeName(durable), l)
			}
		}
		if len(losses) > 0 {
			s.seedsLost = append(s.seedsLost, rs)
			if h.durable {
				t.Logf("serve's warnings after the restart:\n%s", tail(warnings(h.serve.stderr.String()), 3000))
				t.Logf("the file system's log:\n%s", tail(h.logs.String(), 3000))
			}
		}
		s.maxAge = max(s.maxAge, oldest)
		s.lostWindow += oldest
		t.Logf("round %d: %d submits, %d targets, %d cancels acknowledged; %d lost; made %d memtables, %d value-log files, %d tables", r, sub, tg, c, len(losses), mem, vlog, sst)
		for _, j := range jobs {
			if after[j.ID].Code == 200 {
				older = append(older, j)
			}
		}
		if t.Failed() {
			break
		}
	}
	h.stop(t)
	must(t, h.fs.Unmount())
	return s
}

func modeName(durable bool) string {
	if durable {
		return "durable"
	}
	return "default"
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkStore opens a copy of the store as the cut left it: it must open,
// and agree with its rows without a repair.
func (s *summary) checkStore(t *testing.T, dir string, seed int64) {
	t.Helper()
	if dir == "" {
		s.losses["store-gone"]++
		t.Errorf("seed %d: the cut took the store's directory", seed)
		return
	}
	defer os.RemoveAll(dir)
	o := roundSizes
	o.Durable = s.durable // a durable store refuses a table lost with its log; the default mode's counts it
	st, err := persistence.OpenWith(dir, o)
	if err != nil {
		s.losses["store-open"]++
		t.Errorf("seed %d: the store does not open after the cut: %v", seed, err)
		return
	}
	defer func() { must(t, st.Close()) }()
	rec := st.Recovery()
	s.recovered.UnlistedTables += rec.UnlistedTables
	s.recovered.EmptyLogs += rec.EmptyLogs
	s.recovered.LostTables += rec.LostTables
	if rec.IndexKeys > 0 || rec.BytesCounted {
		s.losses["store-repaired"]++
		t.Errorf("seed %d: Open repaired the store: %+v", seed, rec)
	}
	n, err := st.CountBytes()
	must(t, err)
	if n != st.Bytes() {
		s.losses["store-bytes"]++
		t.Errorf("seed %d: byte total %d, rows count %d", seed, st.Bytes(), n)
	}
}

// harness is a backing directory, its file system, a fixture server and
// the serve process on them.
type harness struct {
	durable bool
	backing string // the file system's backing directory
	mnt     string
	keys    string
	site    *httptest.Server
	fs      *powercut.FS
	serve   *serveProc
	page    atomic.Int64 // numbers the pages: each target's page is new
	logs    *lines
	atCut   fileIDs // the store's newest files when serve stopped for the cut
	rotated bool    // the round's cut came after the rotation it waited for (waitCut)
}

const callers = 4

func newHarness(t *testing.T, durable bool) *harness {
	h := &harness{durable: durable, backing: t.TempDir(), mnt: t.TempDir(), logs: &lines{}}
	h.keys = filepath.Join(t.TempDir(), "keys")
	var keys strings.Builder
	for c := range callers {
		fmt.Fprintf(&keys, "c%d powercut-key-%04d\n", c, c)
	}
	must(t, os.WriteFile(h.keys, []byte(keys.String()), 0o600))
	h.site = httptest.NewServer(http.HandlerFunc(servePage))
	t.Cleanup(h.site.Close)
	return h
}

// servePage serves /p/N/SIZE/DELAY: SIZE bytes that only N and SIZE
// determine, after DELAY ms.
func servePage(w http.ResponseWriter, r *http.Request) {
	var n, size, delay int
	if _, err := fmt.Sscanf(r.URL.Path, "/p/%d/%d/%d", &n, &size, &delay); err != nil {
		http.NotFound(w, r)
		return
	}
	time.Sleep(time.Duration(delay) * time.Millisecond) // a slow page, so that jobs stay live
	w.Header().Set("Content-Type", "text/plain")
	line := fmt.Sprintf("page %d of %d bytes\n", n, size)
	_, _ = io.WriteString(w, strings.Repeat(line, size/len(line)+1)[:size])
}

// mount mounts a new file system over the backing directory.
func (h *harness) mount(t *testing.T, seed int64) {
	f, err := powercut.Mount(h.backing, h.mnt, powercut.Options{Seed: seed, Logf: h.logs.add})
	must(t, err)
	h.fs = f
	t.Cleanup(func() { _ = f.Cut(powercut.DropAll) }) // if the test ends early; ErrClosed once cut
}

// store is the store's directory in the backing directory.
func (h *harness) store() string { return filepath.Join(h.backing, "store") }

// copyStore copies the store the cut left (sparse files stay sparse) for
// checkStore, so that serve recovers the store itself.
// A store the cut took whole (its directory's entry not synced) is "".
func (h *harness) copyStore(t *testing.T) string {
	src := filepath.Join(h.backing, "store")
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return ""
	}
	dst := filepath.Join(t.TempDir(), "store")
	out, err := exec.Command("cp", "-a", "--sparse=always", src, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("copy the store: %v: %s", err, out)
	}
	return dst
}

// serveProc is a serve process.
type serveProc struct {
	cmd    *exec.Cmd
	base   string
	stderr *lines
	done   chan struct{}
}

// start starts serve on the mount's store.
func (h *harness) start(t *testing.T) {
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
		"--allow-private", "--log-level", "info", "--workers", "2", "--jobs-per-caller", "2", "--jobs-total", "8",
		"--max-bytes", strconv.Itoa(4 << 30)} // no eviction: every job stays to be read back
	if h.durable {
		args = append(args, "--durable")
	}
	cmd := exec.Command(clitest.Binary(t), args...)
	cmd.Env = append(os.Environ(), sizesEnv())
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
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var ok bool
	select {
	case l := <-line:
		_, p.base, ok = strings.Cut(strings.TrimSpace(l), "listening on ")
	case <-p.done:
	}
	if !ok {
		h.keepFailed(t)
		t.Fatalf("serve did not start: %s", headTail(p.stderr.String(), 3000))
	}
	if strings.Contains(p.stderr.String(), "store repaired at open") {
		t.Errorf("serve repaired the store at open: %s", p.stderr.String())
	}
	h.serve = p
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
}

// stop stops serve cleanly.
func (h *harness) stop(t *testing.T) {
	_ = h.serve.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.serve.done:
	case <-time.After(testkit.Deadline):
		t.Fatal("serve did not stop")
	}
}

// load runs the clients until the moment at says (waitCut), then cuts the
// power with mode; it returns when the cut began.
func (h *harness) load(t *testing.T, hist *History, rng *rand.Rand, at cutAt, mode powercut.CutMode) time.Time {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range callers {
		crng := rand.New(rand.NewPCG(rng.Uint64(), uint64(c)))
		wg.Go(func() { h.client(hist, fmt.Sprintf("powercut-key-%04d", c), crng, stop) })
	}
	h.rotated = h.waitCut(at)
	cut := time.Now()
	_ = h.serve.cmd.Process.Signal(syscall.SIGSTOP) // serve answers nothing more
	close(stop)
	h.atCut = newestFiles(t, h.store()) // the mount applies new names to the backing directory at once
	if err := h.fs.Cut(mode); err != nil {
		t.Fatalf("cut: %v", err)
	}
	_ = h.serve.cmd.Process.Kill()
	<-h.serve.done
	wg.Wait()
	return cut
}

// client submits, polls and cancels as key until stop is closed.
func (h *harness) client(hist *History, key string, rng *rand.Rand, stop <-chan struct{}) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	var live []string
	for {
		select {
		case <-stop:
			return
		default:
		}
		if len(live) < 2 && rng.IntN(3) == 0 {
			if id, ok := h.submit(c, hist, key, rng); ok {
				live = append(live, id)
			}
			continue
		}
		if len(live) == 0 {
			continue
		}
		i := rng.IntN(len(live))
		if rng.IntN(60) == 0 {
			code, _, _ := call(c, http.MethodDelete, h.serve.base+"/v1/batch/"+live[i], key, "")
			if code == http.StatusOK {
				hist.AddCancel(Cancel{Key: key, ID: live[i], At: time.Now()})
			}
		}
		code, j, err := h.read(c, key, live[i])
		if err != nil || code != http.StatusOK {
			continue
		}
		at := time.Now()
		for idx, sum := range j.Done {
			hist.AddShown(Shown{Key: key, ID: live[i], Idx: idx, Sum: sum, At: at})
		}
		if j.Status != "queued" && j.Status != "running" {
			live = append(live[:i], live[i+1:]...)
		}
	}
}

// submit submits a job of 1 to 6 new pages.
func (h *harness) submit(c *http.Client, hist *History, key string, rng *rand.Rand) (string, bool) {
	n := 1 + rng.IntN(6)
	var targets []map[string]string
	for range n {
		size := 200
		switch p := rng.IntN(10); {
		case p == 0:
			size = 200_000
		case p < 4:
			size = 3000
		case p < 7:
			size = 900 // inline, as 200: the memtable fills within seconds
		}
		targets = append(targets, map[string]string{"url": fmt.Sprintf("%s/p/%d/%d/%d", h.site.URL, h.page.Add(1), size, 2+rng.IntN(38))})
	}
	body, _ := json.Marshal(map[string]any{"targets": targets})
	code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", key, string(body))
	if err != nil || code != http.StatusAccepted {
		return "", false
	}
	var a struct{ ID string }
	if json.Unmarshal(out, &a) != nil || a.ID == "" {
		return "", false
	}
	hist.AddSubmit(Submit{Key: key, ID: a.ID, Targets: n, At: time.Now()})
	return a.ID, true
}

// read reads a job with its results.
func (h *harness) read(c *http.Client, key, id string) (int, Reading, error) {
	code, out, err := call(c, http.MethodGet, h.serve.base+"/v1/batch/"+id+"?results=1", key, "")
	if err != nil || code != http.StatusOK {
		return code, Reading{Code: code}, err
	}
	var j struct {
		Status  string
		Targets []struct {
			Idx    int
			Status string
			Result *struct{ Content string }
		}
	}
	if err := json.Unmarshal(out, &j); err != nil {
		return code, Reading{Code: code}, err
	}
	r := Reading{Code: code, Status: j.Status, Done: map[int]Sum{}}
	for _, tg := range j.Targets {
		if tg.Status == "done" && tg.Result != nil {
			r.Done[tg.Idx] = SumOf(tg.Result.Content)
		}
	}
	return code, r, nil
}

// readBack reads every job of jobs from the restarted serve: the job
// (without results), then each of its done targets alone, so that a
// target that does not read (Reading.Unreadable) spoils no other.
func (h *harness) readBack(t *testing.T, jobs []Job) map[string]Reading {
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	after := map[string]Reading{}
	for _, j := range jobs {
		after[j.ID] = h.readJob(t, c, j)
	}
	return after
}

// readJob reads one job back; a request that keeps failing reads as code
// 0 (the job) or unreadable (a target).
func (h *harness) readJob(t *testing.T, c *http.Client, j Job) Reading {
	get := func(path string) (int, []byte) {
		for range 5 {
			code, out, err := call(c, http.MethodGet, h.serve.base+path, j.Key, "")
			if err == nil && code != http.StatusTooManyRequests {
				return code, out
			}
			t.Logf("read %s back: %d %v", path, code, err)
		}
		return 0, nil
	}
	code, out := get("/v1/batch/" + j.ID)
	r := Reading{Code: code}
	if code != http.StatusOK {
		return r
	}
	var job struct {
		Status  string
		Targets []struct {
			Idx    int
			Status string
		}
	}
	if err := json.Unmarshal(out, &job); err != nil {
		t.Fatalf("job %s: %v", j.ID, err)
	}
	r.Status, r.Done, r.Unreadable = job.Status, map[int]Sum{}, map[int]bool{}
	for _, tg := range job.Targets {
		if tg.Status != "done" {
			continue
		}
		code, out := get(fmt.Sprintf("/v1/batch/%s/%d", j.ID, tg.Idx))
		var one struct{ Result *struct{ Content string } }
		if code != http.StatusOK || json.Unmarshal(out, &one) != nil || one.Result == nil {
			r.Unreadable[tg.Idx] = true
			continue
		}
		r.Done[tg.Idx] = SumOf(one.Result.Content)
	}
	return r
}

// call makes one request as key, and reads the answer whole.
func call(c *http.Client, method, url, key, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, errors.Join(errors.New("answer cut short"), err)
	}
	return resp.StatusCode, out, nil
}

// warnings are the lines of a serve log at WARN or ERROR, each once.
func warnings(log string) string {
	var b strings.Builder
	seen := map[string]bool{}
	for l := range strings.Lines(log) {
		if (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) && !seen[l[min(len(l), 30):]] {
			seen[l[min(len(l), 30):]] = true
			b.WriteString(l)
		}
	}
	return b.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// lines collects a process's or the file system's output. Safe for
// concurrent use.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) add(format string, args ...any) { _, _ = fmt.Fprintf(l, format+"\n", args...) }

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// grepLines is the lines of log that contain s.
func grepLines(log, s string) string {
	var b strings.Builder
	for l := range strings.Lines(log) {
		if strings.Contains(l, s) {
			b.WriteString(l)
		}
	}
	return b.String()
}
