package engine_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
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

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// The crash test re-runs this test binary as a child that runs a runner on a
// directory store; these variables tell it so.
const (
	envCrashDir   = "SIFTBATCH_CRASH_DIR"
	envCrashSeed  = "SIFTBATCH_CRASH_SEED"
	envCrashRound = "SIFTBATCH_CRASH_ROUND"
	envCrashFill  = "SIFTBATCH_CRASH_FILL" // large results (TestRunner_DiskFull)
	// envCrashDurable runs the child's runner with DurabilitySync.
	envCrashDurable = "SIFTBATCH_CRASH_DURABLE"
)

// crashRounds and the seed of the kill schedule; CRASH_SEED overrides the
// seed to replay or vary a schedule.
const (
	crashRounds      = 25
	crashDefaultSeed = 20260102
	// A quarter of the kills come at most crashEarly after the child
	// started (it is opening the store, reaping, or just begun); the others
	// at most crashLate after it printed "ready".
	crashEarly = 40 * time.Millisecond
	crashLate  = 400 * time.Millisecond
)

// crashExpect is what the child's FetchFunc makes of a URL, a pure function
// of it, so that the parent knows every target's exact outcome: a result
// (some over Badger's value threshold, so that the value log is exercised
// too), a TargetError, or a panic.
func crashExpect(url string) (status string, res *engine.Result, msg, hint string) {
	h := fnv.New32a()
	h.Write([]byte(url))
	sum := h.Sum32()
	if strings.Contains(url, "/path-fill") && sum%10 >= 3 {
		// The disk-full test's jobs: large results, that fill a disk fast.
		return "done", &engine.Result{Content: strings.Repeat(fmt.Sprintf("%08x", sum), 600<<10/8)}, "", ""
	}
	switch sum % 10 {
	case 0:
		return "failed", nil, "internal error", ""
	case 1, 2:
		return "failed", nil, fmt.Sprintf("not found %08x", sum), fmt.Sprintf("try %08x", sum%97)
	case 3:
		return "done", &engine.Result{Content: strings.Repeat(fmt.Sprintf("%08x", sum), 8400), Meta: map[string]any{"n": float64(sum % 1000)}}, "", ""
	}
	return "done", &engine.Result{Content: "content " + strconv.FormatUint(uint64(sum), 16), Meta: map[string]any{"n": float64(sum % 1000), "s": "é\u2028"}}, "", ""
}

// crashFetch does what crashExpect says, slowly.
func crashFetch(delay func() time.Duration) engine.FetchFunc {
	return func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		timer := time.NewTimer(delay())
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), engine.ErrCancelled) {
				return engine.Result{}, ctx.Err()
			}
			<-timer.C // its job was cancelled: its outcome is the URL's all the same
		}
		status, res, msg, hint := crashExpect(tg.URL)
		switch {
		case status == "done":
			return *res, nil
		case msg == "internal error":
			panic(secretPanic + " " + tg.URL)
		}
		return engine.Result{}, &engine.TargetError{Status: 404, Msg: msg, Hint: hint}
	}
}

// TestRunner_CrashAtRandomPoints kills a process running a runner on a
// directory store with SIGKILL at seeded-random moments (while it opens the
// store and reaps, and while it runs jobs with slow fetches), 25 rounds on
// one store directory. The child prints "stored JOB IDX" for every target it
// has read back from the store. After each kill the store opens, New fails
// every live job with "restart", every target the child ever reported is
// readable with its exact outcome, every job's counts agree with its stored
// targets, and no job is left queued or running.
func TestRunner_CrashAtRandomPoints(t *testing.T) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		crashChild(dir)
		return
	}
	testkit.Long(t)
	t.Parallel()
	seed := uint64(crashDefaultSeed)
	if s := os.Getenv("CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	logDir := t.TempDir()

	type target struct {
		id  string
		idx int
	}
	var (
		reported        = map[target]bool{}
		kills, notReady int
		durableRounds   int
		checks, lost    int
		reaped, cleaned int
		logLines        int
		childTime       time.Duration
		start           = time.Now()
	)
	for round := range crashRounds {
		roundStart := time.Now()
		early := rng.IntN(4) == 0
		delay := time.Duration(rng.Int64N(int64(crashLate)))
		if early {
			delay = time.Duration(rng.Int64N(int64(crashEarly)))
		}
		logFile := filepath.Join(logDir, fmt.Sprintf("child-%d.log", round))
		// Both durabilities, every other round, on the same store: a kill
		// in either leaves a store the other reopens.
		durable := round%2 == 1
		if durable {
			durableRounds++
		}
		lines, killedEarly := runCrashChild(t, dir, seed, round, early, durable, delay, logFile)
		kills++
		if killedEarly {
			notReady++
		}
		for _, l := range lines {
			f := strings.Fields(l)
			require.Len(t, f, 3, "child line %q", l)
			idx, err := strconv.Atoi(f[2])
			require.NoError(t, err)
			reported[target{f[1], idx}] = true
		}
		childTime += time.Since(roundStart)
		logs, err := os.ReadFile(logFile)
		require.NoError(t, err)
		require.NotContains(t, string(logs), "DATA RACE")
		logLines += scanLogText(t, string(logs))

		// The store opens; New reaps; every reported target is there.
		store, err := persistence.Open(dir)
		require.NoError(t, err, "round %d: the store opens after SIGKILL", round)
		requireBytesCounted(t, store, "round %d: after SIGKILL", round)
		left, err := store.Unsettled()
		require.NoError(t, err)
		log := &logScanner{}
		r, err := engine.New(store, enginetest.OKFetch, engine.Config{MaxBytes: 1 << 40}, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug - 8})))
		require.NoError(t, err, "round %d", round)
		for _, j := range left {
			got, _, ok := r.Status(j.ID)
			require.True(t, ok)
			if persistence.IsLive(j.Status) {
				require.Equal(t, "failed", got.Status, "a live job is reaped")
				require.Equal(t, "restart", got.Error)
				reaped++
			} else {
				require.Equal(t, j.Status, got.Status, "a job cancelled with a target in flight stays cancelled")
				cleaned++
			}
		}
		byJob := map[string][]int{}
		for tg := range reported {
			byJob[tg.id] = append(byJob[tg.id], tg.idx)
		}
		checks += len(reported)
		lost += checkCrashStore(t, r, store, round, byJob)
		left, err = store.Unsettled()
		require.NoError(t, err)
		require.Empty(t, left, "nothing is left unsettled after New")
		requireBytesCounted(t, store, "round %d: after New reaped", round)
		r.Close()
		require.NoError(t, store.Close())
		logLines += log.check(t)
	}
	t.Logf("crash: %d rounds (%d durable), %d kills (%d before the child was ready), %d targets reported stored, "+
		"%d target checks, %d targets lost, %d live jobs reaped, %d cancelled jobs settled, %d log lines scanned, seed %d, %s (%s in the children)",
		crashRounds, durableRounds, kills, notReady, len(reported), checks, lost, reaped, cleaned, logLines, seed, time.Since(start).Round(time.Millisecond), childTime.Round(time.Millisecond))
	require.Zero(t, lost, "targets lost")
	require.NotEmpty(t, reported)
}

// requireBytesCounted checks that the store's byte total (what MaxBytes
// bounds) is what a count of every row gives: it is written in the
// transactions that write the rows, so a kill leaves it exact.
func requireBytesCounted(t *testing.T, store *persistence.Store, msg string, args ...any) {
	t.Helper()
	n, err := store.CountBytes()
	require.NoError(t, err)
	require.Equal(t, n, store.Bytes(), append([]any{"the byte total is the count of the rows: " + msg}, args...)...)
}

// runCrashChild starts the child, kills it delay after it started (early)
// or after it printed "ready", and returns the "stored" lines it printed in
// full, and whether it was killed before it printed "ready".
func runCrashChild(t *testing.T, dir string, seed uint64, round int, early, durable bool, delay time.Duration, logFile string) ([]string, bool) {
	t.Helper()
	logOut, err := os.Create(logFile)
	require.NoError(t, err)
	defer logOut.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunner_CrashAtRandomPoints$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashSeed+"="+strconv.FormatUint(seed, 10), envCrashRound+"="+strconv.Itoa(round))
	if durable {
		cmd.Env = append(cmd.Env, envCrashDurable+"=1")
	}
	cmd.Stderr = logOut
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	kill := time.NewTimer(delay)
	defer kill.Stop()
	if !early {
		kill.Stop() // armed at "ready"
	}

	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		rd := bufio.NewReader(stdout)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return // a line cut short by the kill is not a report
			}
			lines <- strings.TrimSuffix(l, "\n")
		}
	}()
	var stored []string
	ready, killed := false, false
	for !killed {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				out, _ := os.ReadFile(logFile)
				t.Fatalf("round %d: the child ended by itself: %v\n%s", round, cmd.ProcessState, tail(string(out), 4000))
			}
			if l == "ready" {
				ready = true
				if !early {
					kill.Reset(delay)
				}
			} else if strings.HasPrefix(l, "stored ") {
				stored = append(stored, l)
			} else {
				t.Fatalf("round %d: the child printed %q", round, l)
			}
		case <-kill.C:
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
		}
	}
	for l := range lines { // what it printed before it died
		if strings.HasPrefix(l, "stored ") {
			stored = append(stored, l)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "round %d: %v", round, err)
	ws, _ := exit.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "round %d: the child died of SIGKILL, not %v", round, err)
	return stored, !ready
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// checkCrashTarget checks one stored target against crashExpect.
func checkCrashTarget(got engine.TargetStatus) error {
	if !strings.HasSuffix(got.URL, fmt.Sprintf("/%d?token=s3cr3t", got.Idx)) {
		return fmt.Errorf("the stored URL is not this target's")
	}
	status, res, msg, hint := crashExpect(got.URL)
	if got.Status != status || got.Error != msg || got.Hint != hint {
		return fmt.Errorf("stored %s %q %q, want %s %q %q", got.Status, got.Error, got.Hint, status, msg, hint)
	}
	if res == nil {
		if got.Result != nil {
			return errors.New("a failed target has a result")
		}
		return nil
	}
	if got.Result == nil || got.Result.Content != res.Content || fmt.Sprint(got.Result.Meta) != fmt.Sprint(res.Meta) {
		return errors.New("the stored result is not the one fetched")
	}
	return nil
}

// checkCrashStore checks every stored job, one Status each: none is live,
// each one's counts agree with its stored targets (a target and its job's
// row are written in one transaction), and each reported target (reported:
// job → idxs) has its exact outcome. It returns the reported targets lost.
func checkCrashStore(t *testing.T, r *engine.Runner, store *persistence.Store, round int, reported map[string][]int) (lost int) {
	t.Helper()
	var ids []string
	require.NoError(t, store.Jobs(func(j persistence.JobRecord) bool {
		ids = append(ids, j.ID)
		return true
	}))
	for _, id := range ids {
		j, ts, ok := r.Status(id)
		require.True(t, ok)
		require.False(t, persistence.IsLive(j.Status), "job %s is %s after New", id, j.Status)
		if idxs, ok := reported[id]; ok {
			for _, idx := range idxs {
				err := fmt.Errorf("the job has %d targets", len(ts))
				if idx < len(ts) {
					err = checkCrashTarget(ts[idx])
				}
				if err != nil {
					lost++
					t.Errorf("round %d: job %s target %d: %v", round, id, idx, err)
				}
			}
		}
		stored, failed := 0, 0
		for _, tg := range ts {
			switch tg.Status {
			case "done":
				stored++
			case "failed":
				stored++
				failed++
			case "pending":
			default:
				t.Fatalf("job %s: target %d is %s after New", id, tg.Idx, tg.Status)
			}
		}
		require.Equal(t, j.TargetsDone, stored, "job %s: TargetsDone agrees with its stored targets", id)
		switch j.Status {
		case "done":
			require.Zero(t, failed)
			require.Equal(t, j.TargetsTotal, stored)
		case "partial":
			require.Equal(t, j.TargetsTotal, stored)
			require.NotZero(t, failed)
			require.Less(t, failed, stored)
		case "failed":
			if j.Error == "" {
				require.Equal(t, j.TargetsTotal, failed)
			} else {
				require.Equal(t, "restart", j.Error)
			}
		}
	}
	for id, idxs := range reported {
		if _, err := store.Job(id); err != nil {
			lost += len(idxs)
			t.Errorf("round %d: job %s with %d reported targets: %v", round, id, len(idxs), err)
		}
	}
	return lost
}

// crashChild is the child process: it runs jobs until it is killed, and
// prints "ready" once New has returned and "stored JOB IDX" for every target
// it has read back from the store as done or failed (one write each, so that
// a line is whole in the pipe or not there at all).
func crashChild(dir string) {
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "crash child: %s: %v\n", what, err)
		os.Exit(3)
	}
	seed, _ := strconv.ParseUint(os.Getenv(envCrashSeed), 10, 64)
	round, _ := strconv.Atoi(os.Getenv(envCrashRound))
	prefix := "r"
	if os.Getenv(envCrashFill) != "" {
		prefix = "fill"
	}
	store, err := persistence.Open(dir)
	if err != nil {
		fail("open", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
	var fetchMu sync.Mutex
	fetchRng := rand.New(rand.NewPCG(seed, uint64(round)<<8|1))
	stored := make(chan struct{}, 1)
	ended := make(chan struct{}, 1)
	signal := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	cfg := engine.Config{Workers: 2, JobsPerCaller: 2, JobsTotal: 6, MaxBytes: 1 << 40, Durability: crashDurability(), Hooks: engine.Hooks{
		Target: func(error, time.Duration, int) { signal(stored) },
		Job: func(o string) {
			if o != "created" && o != "reused" {
				signal(ended)
			}
		},
	}}
	r, err := engine.New(store, crashFetch(func() time.Duration {
		fetchMu.Lock()
		defer fetchMu.Unlock()
		return time.Duration(1+fetchRng.IntN(12)) * time.Millisecond
	}), cfg, log)
	if err != nil {
		fail("new runner", err)
	}
	say := func(s string) {
		if _, err := io.WriteString(os.Stdout, s); err != nil {
			fail("print", err)
		}
	}
	say("ready\n")

	var mu sync.Mutex
	var watch []string // jobs with targets not yet reported
	go func() {
		rng := rand.New(rand.NewPCG(seed, uint64(round)<<8|2))
		var ids []string
		for k := 0; ; k++ {
			name := fmt.Sprintf("%s%d-j%d", prefix, round, k)
			ts := make([]engine.Target, 2+rng.IntN(7))
			for i := range ts {
				ts[i] = engine.Target{URL: secretURL(name, i), Options: engine.Options{Mode: "m" + strconv.Itoa(i%3)}}
			}
			c := &engine.Caller{Name: fmt.Sprintf("caller-%d", k%4), KeySHA256: secretKey}
			for {
				id, _, err := r.Submit(context.Background(), c, "", ts)
				if errors.Is(err, engine.ErrCallerBusy) || errors.Is(err, engine.ErrBusy) {
					<-ended
					continue
				}
				if errors.Is(err, engine.ErrDiskFull) { // TestRunner_DiskFull: a client's back-off
					<-time.After(20 * time.Millisecond)
					continue
				}
				if err != nil {
					fail("submit", err)
				}
				ids = append(ids, id)
				mu.Lock()
				watch = append(watch, id)
				mu.Unlock()
				break
			}
			if rng.IntN(6) == 0 {
				r.Cancel(ids[rng.IntN(len(ids))])
			}
		}
	}()

	reported := map[string]map[int]bool{}
	for range stored {
		mu.Lock()
		ids := append([]string(nil), watch...)
		mu.Unlock()
		var keep []string
		for _, id := range ids {
			j, ts, ok := r.Status(id)
			if !ok {
				fail("status", errors.New("a submitted job is not found"))
			}
			if reported[id] == nil {
				reported[id] = map[int]bool{}
			}
			for _, tg := range ts {
				if (tg.Status == "done" || tg.Status == "failed") && !reported[id][tg.Idx] {
					reported[id][tg.Idx] = true
					say(fmt.Sprintf("stored %s %d\n", id, tg.Idx))
				}
			}
			// A job that ended by itself has nothing in flight; a cancelled
			// one may still store its last target.
			if !(j.Status == "done" || j.Status == "partial" || j.Status == "failed") || len(reported[id]) < j.TargetsDone {
				keep = append(keep, id)
			}
		}
		mu.Lock()
		watch = append(keep, watch[len(ids):]...)
		mu.Unlock()
	}
}

func TestRunner_Restart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := enginetest.OpenStore(t, dir)
	// A first run: one job finished its first target and was cut off.
	started := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	// a1's write lands after the worker has moved on to q1 (the store is
	// asynchronous), so wait for the hook that follows the write.
	stored := make(chan struct{}, 1)
	first, err := engine.New(store, func(ctx context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		if calls.Add(1) == 2 {
			close(started)
			<-release
		}
		return engine.Result{Content: "stored " + tg.URL}, nil
	}, engine.Config{JobsPerCaller: 3, Hooks: engine.Hooks{Target: func(error, time.Duration, int) {
		select {
		case stored <- struct{}{}:
		default:
		}
	}}}, nil)
	require.NoError(t, err)
	// One worker: a1 is stored, then q1 is held in flight, b stays queued.
	running, _, err := first.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("a", 3))
	require.NoError(t, err)
	inflight, _, err := first.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("q", 1))
	require.NoError(t, err)
	<-started
	<-stored
	queued, _, err := first.Submit(context.Background(), enginetest.Caller("alice"), "", enginetest.Targets("b", 1))
	require.NoError(t, err)
	// Simulate a crash: the rows as a killed process leaves them (the job
	// actor's writes have landed; nothing else runs). Copy them into a fresh
	// store directory by hand through the store's own API.
	rec, ts, err := store.JobWithTargets(running)
	require.NoError(t, err)
	qrec, qts, err := store.JobWithTargets(queued)
	require.NoError(t, err)
	irec, its, err := store.JobWithTargets(inflight)
	require.NoError(t, err)
	close(release)
	first.Close()
	require.NoError(t, store.Close())
	require.Equal(t, "running", rec.Status)
	require.Equal(t, "queued", qrec.Status)

	dir2 := t.TempDir()
	crashed := enginetest.OpenStore(t, dir2)
	require.NoError(t, crashed.CreateJob(&rec, ts))
	require.NoError(t, crashed.CreateJob(&qrec, qts))
	require.NoError(t, crashed.CreateJob(&irec, its))
	require.NoError(t, crashed.SaveTarget(&rec, &ts[0]))
	require.NoError(t, crashed.Close())

	reopened := enginetest.OpenStore(t, dir2)
	b := enginetest.SetupOn(t, reopened, enginetest.OKFetch, engine.Config{})
	j, got, ok := b.Runner.Status(running)
	require.True(t, ok)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, "restart", j.Error)
	require.Equal(t, "done", got[0].Status)
	require.Equal(t, "stored http://h/a/0", got[0].Result.Content, "finished targets stay readable")
	require.Equal(t, "pending", got[1].Status)
	require.Contains(t, got[1].Hint, "not run: the server restarted", "a target the restart left says it will not run")
	require.Equal(t, "", got[0].Hint)
	require.Equal(t, 2, engine.NotRun(j.Status, j.TargetsTotal, j.TargetsDone), "failed, 1 of 3 stored, 0 failed, 2 not run")
	for _, id := range []string{queued, inflight} {
		j, ts, ok := b.Runner.Status(id)
		require.True(t, ok)
		require.Equal(t, "failed", j.Status)
		require.Equal(t, "restart", j.Error)
		require.Equal(t, "pending", ts[0].Status)
	}
	left, err := reopened.Unsettled()
	require.NoError(t, err)
	require.Empty(t, left)
}

// crashDurability is the crash child's Durability: DurabilitySync when
// the test set envCrashDurable.
func crashDurability() engine.Durability {
	if os.Getenv(envCrashDurable) != "" {
		return engine.DurabilitySync
	}
	return engine.DurabilityProcess
}
