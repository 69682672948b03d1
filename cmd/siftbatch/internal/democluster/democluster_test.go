package democluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/cmd/siftbatch/internal/fixture"
	"github.com/sift/batch/engine/enginetest/testkit"
)

func TestMain(m *testing.M) {
	// Every node process, poller and server a test starts is stopped by
	// its end.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		clitest.Cleanup()
		os.Exit(code)
	}))
}

// testOptions are demo-cluster's options in a test: --once, no pause, the
// nodes the siftbatch command built for the tests, with protoactor-go's
// race suppressions.
func testOptions(t *testing.T, targets int) Options {
	t.Helper()
	return Options{Once: true, Targets: targets, Exe: clitest.RaceBinary(t), Env: clitest.Env()}
}

// TestDemoCluster_Once runs demo-cluster --once with the fewest targets its
// flag allows (their jobs on n3 once ended before the kill): it ends by
// itself, with success; its output shows the kill, the survivors' 503s,
// the restart and the jobs failed "restart"; its nodes speak mutual TLS;
// every process it started has exited, its temporary directory is gone,
// and neither its output nor its nodes' logs hold a key or a fetched
// page's address.
func TestDemoCluster_Once(t *testing.T) {
	testkit.Long(t)
	o := testOptions(t, MinTargets)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errOut testkit.SyncBuffer
	var logs map[string]string
	o.Inspect = func(dir string) {
		logs = map[string]string{}
		for _, n := range []string{"n1", "n2", "n3"} {
			data, err := os.ReadFile(filepath.Join(dir, n+".log"))
			if err != nil {
				t.Errorf("%s's log: %v", n, err)
			}
			logs[n] = string(data)
		}
	}
	err := Run(context.Background(), o, &out, &errOut)
	text := out.String()
	if err != nil {
		t.Fatalf("demo-cluster --once: %v\nstdout:\n%s\nstderr:\n%s\nlogs:\n%v", err, text, errOut.String(), logs)
	}
	t.Logf("output:\n%s", text)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`killed n3 with SIGKILL \(pid \d+\)`),
		regexp.MustCompile(`job\d+ +\w+ +@n3 .* n1:503 +n2:503 `),
		regexp.MustCompile(`n1 and n2 answer 503 "node unavailable" for n3's jobs`),
		regexp.MustCompile(`admitted again on n[12]`),
		regexp.MustCompile(`restarted n3 on its store \(pid \d+\)`),
		regexp.MustCompile(`job\d+ +\w+ +@n3 .*failed "restart" +n1:200 +n2:200 +n3:200`),
		regexp.MustCompile(`n3's jobs .* read failed "restart" on every node`),
		regexp.MustCompile(`(?m)^job\d+ +\w+ +n3 +failed "restart"`),
		regexp.MustCompile(`kill → n1 and n2 answer 503 "node unavailable" for its jobs: \d+\.\ds`),
		regexp.MustCompile(`restart → its jobs readable from every node`),
	} {
		if !want.MatchString(text) {
			t.Errorf("the output lacks %s:\n%s", want, text)
		}
	}
	// Every process it started (n3 twice) has exited.
	checkStopped(t, text, 4)
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Errorf("the demo left %v in its temporary directory (%v)", entries, err)
	}
	// No key, and no fetched page's address, in its output or its nodes'
	// logs; no data race in a node.
	for _, l := range []string{text, errOut.String(), logs["n1"], logs["n2"], logs["n3"]} {
		testkit.RequireNoneOf(t, l, "sbdemo-", "/"+fixture.Slow+"/", "/"+fixture.Fast+"/", "/"+fixture.Hold+"/", "DATA RACE")
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if !strings.Contains(logs[n], "cluster node started") {
			t.Errorf("%s's log lacks its start:\n%s", n, logs[n])
		}
		// The nodes speak mutual TLS, with the demo's own certificates.
		if !strings.Contains(logs[n], "cluster traffic is mutually authenticated and encrypted") || strings.Contains(logs[n], "plaintext") {
			t.Errorf("%s's log does not say it runs mutual TLS:\n%s", n, logs[n])
		}
	}
}

// checkStopped checks that the demo's output names n processes stopped, and
// that each has exited: reaped, its pid is no one's.
func checkStopped(t *testing.T, text string, n int) {
	t.Helper()
	stopped := regexp.MustCompile(`Stopped every node process: (.*)\.`).FindStringSubmatch(text)
	if stopped == nil {
		t.Fatalf("no line of the stopped processes:\n%s", text)
	}
	pids := regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(stopped[1], -1)
	if len(pids) != n {
		t.Errorf("stopped %s, want %d processes", stopped[1], n)
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d is still there (%v)", pid, err)
		}
	}
}

// TestPages: for every --targets the command allows, a job of the victim's
// first page is one that answers (its progress shows before the kill) and
// its last is held, so that it is still running when the victim is killed;
// the others' pages all answer.
func TestPages(t *testing.T) {
	for n := MinTargets; n <= MaxTargets; n++ {
		held := pages(n, true)
		if len(held) != n || held[0] == fixture.Hold || held[n-1] != fixture.Hold {
			t.Errorf("--targets %d: the victim's pages %v: want %d, the first answering, the last held", n, held, n)
		}
		for _, kind := range pages(n, false) {
			if kind != fixture.Slow && kind != fixture.Fast {
				t.Errorf("--targets %d: a survivor's page %s: want slow or fast", n, kind)
			}
		}
	}
}
