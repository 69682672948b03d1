package nohooktest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
)

// lateHookEnv makes this test binary the program that calls the hook late
// (TestFetcher_FilterHookCalledLate runs it so).
const lateHookEnv = "SIFTBATCH_NOHOOKTEST_LATE"

// markerDir is where a copy of this test binary started as a filter
// process leaves a mark named after its parent and itself. The fetcher
// empties its environment, so the directory is named after what every
// process of one run can find out alone: the run's first process of this
// executable (the one go test started), its oldest ancestor of the same
// executable. Two runs at once never share it; the first process removes
// it when its tests end. Its name has testkit.RunDir's shape
// (PREFIX-PID-SUFFIX), so that testkit.ReapRunDirs removes one a killed
// run left.
var markerDir = filepath.Join(os.TempDir(), "siftbatch-nohooktest-"+strconv.Itoa(runRoot())+"-marks")

// TestMain deliberately does NOT call fetcher.RunFilterChild first: this
// is the embedder who forgot the hook, or calls it late. Started by the
// fetcher as a filter process (its parent is the same executable, and its
// environment has no lateHookEnv), it runs "main" as such a program
// would: it leaves a mark, says it started on its standard output (as a
// program's main prints), and then works on (here: waits for its input to
// close), without ever saying it is ready; it never runs the tests, so
// that a missing guard in the fetcher cannot turn into a fork bomb. The
// fetcher knows it for what it is by what it wrote, however long it took
// to start.
func TestMain(m *testing.M) {
	if os.Getenv(lateHookEnv) == "" && runRoot() != os.Getpid() {
		_ = os.MkdirAll(markerDir, 0o700)
		_ = os.WriteFile(filepath.Join(markerDir, strconv.Itoa(os.Getppid())+"-"+strconv.Itoa(os.Getpid())), []byte(strings.Join(os.Args, " ")), 0o600)
		_, _ = os.Stdout.WriteString("nohooktest: main started\n") // after the mark: the fetcher kills it once it reads this
		_, _ = io.Copy(io.Discard, os.Stdin)                       // until the fetcher kills it, or its parent ends
		os.Exit(3)
	}
	if runRoot() == os.Getpid() {
		testkit.ReapRunDirs("siftbatch-nohooktest")      // left by earlier runs, killed before they removed theirs
		_ = os.RemoveAll(markerDir)                      // left by an earlier run whose process had this pid, killed
		goleak.VerifyTestMain(removeAfter{m, markerDir}) // enginetest.Main's check, then the removal
	}
	enginetest.Main(m)
}

// removeAfter runs the tests, then removes dir.
type removeAfter struct {
	*testing.M
	dir string
}

func (r removeAfter) Run() int {
	code := r.M.Run()
	_ = os.RemoveAll(r.dir)
	return code
}

// TestFetcher_FilterWithoutHook: in a program that has not called
// fetcher.RunFilterChild, New makes a fetcher that fetches as usual, but a
// target with jq or grep fails at once "filters unavailable: the program
// does not call fetcher.RunFilterChild at the top of main", with a hint,
// and no filter process is started (none could run anything but this
// program's main).
func TestFetcher_FilterWithoutHook(t *testing.T) {
	t.Parallel()
	if os.Getenv(lateHookEnv) != "" {
		t.Skip("the late-hook copy of this program")
	}
	f, site := fetchesUnfiltered(t)
	for _, o := range []engine.Options{{JQ: ".a"}, {Grep: "a"}} {
		_, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: site, Options: o})
		var te *engine.TargetError
		if !errors.As(err, &te) || te.Msg != "filters unavailable: the program does not call fetcher.RunFilterChild at the top of main" || te.Hint == "" {
			t.Errorf("filtered fetch %+v without the hook: %v (%+v), want a failed target naming the hook, with a hint", o, err, te)
		}
	}
	if marks, _ := filepath.Glob(filepath.Join(markerDir, strconv.Itoa(os.Getpid())+"-*")); len(marks) > 0 {
		t.Errorf("a filter process ran this program's main: %v", marks)
	}
}

// TestFetcher_FilterHookCalledLate checks the damage of a hook called
// late (after main's work began) is bounded: in a copy of this program
// that calls fetcher.RunFilterChild only once its tests run, a filtered
// target's filter process runs "main" (leaves its mark, then prints),
// never says it is ready, and is killed, for what it printed, and reaped
// by the fetcher before the fetch returns (no wait here but on the fetch); the target fails
// "filters unavailable: the program does not call fetcher.RunFilterChild
// at the top of main" with a hint; unfiltered targets are fetched as
// usual.
func TestFetcher_FilterHookCalledLate(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("no /proc")
	}
	if os.Getenv(lateHookEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFetcher_FilterHookCalledLate$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), lateHookEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("the late-hook copy of this program:\n%s", out)
		if err != nil {
			t.Fatalf("the late-hook copy of this program: %v", err)
		}
		return
	}
	fetcher.RunFilterChild() // late: this program's "main" (TestMain) ran before it
	f, site := fetchesUnfiltered(t)
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: site, Options: engine.Options{JQ: ".a"}})
		done <- err
	}()
	err := testkit.Recv(t, done) // fails on a hang, never bounds how long it takes
	var te *engine.TargetError
	if !errors.As(err, &te) || te.Msg != "filters unavailable: the program does not call fetcher.RunFilterChild at the top of main" || te.Hint == "" {
		t.Errorf("filtered fetch with the hook called late: %v (%+v), want a failed target naming the hook, with a hint", err, te)
	}
	marks, _ := filepath.Glob(filepath.Join(markerDir, strconv.Itoa(os.Getpid())+"-*"))
	if len(marks) == 0 {
		t.Errorf("no filter process ran this program's main: the test does not test what it says")
	}
	for _, m := range marks {
		_, pid, _ := strings.Cut(filepath.Base(m), "-")
		if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("filter process %s, which ran this program's main, is not reaped", pid)
		}
		os.Remove(m)
	}
}

// runRoot returns the pid of this process's oldest ancestor that runs the
// same executable, or its own pid if its parent runs another (or /proc
// cannot tell).
func runRoot() int {
	root := os.Getpid()
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return root
	}
	for pid := os.Getppid(); pid > 1; {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil || exe != self {
			return root
		}
		root = pid
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return root
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if len(f) < 2 {
			return root
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return root
}

// fetchesUnfiltered starts a site serving {"a":1} and a fetcher with one
// filter process, both closed when t ends, and checks the fetcher fetches
// the site without filters; it returns the fetcher and the site's URL.
func fetchesUnfiltered(t *testing.T) (*fetcher.Fetcher, string) {
	t.Helper()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"a":1}`))
	}))
	t.Cleanup(site.Close)
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true, FilterProcs: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	res, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: site.URL})
	if err != nil || res.Content != `{"a":1}` {
		t.Fatalf("unfiltered: %q %v", res.Content, err)
	}
	return f, site.URL
}
