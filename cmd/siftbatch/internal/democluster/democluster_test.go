package democluster

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemoCluster runs demo-cluster --once, its nodes this test binary run
// as the command: it ends by itself, with success, within its bound; its
// output shows the kill, the survivors' 503s, the restart and the jobs
// failed "restart"; its nodes speak mutual TLS; every process it started has exited, its temporary
// directory is gone, and neither its output nor its nodes' logs hold a key
// or a fetched page's address.
func TestDemoCluster(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errOut syncBuffer
	var logs map[string]string
	o := dcTestOptions(t)
	o.inspect = func(dir string) {
		logs = map[string]string{}
		for _, n := range []string{"n1", "n2", "n3"} {
			data, err := os.ReadFile(filepath.Join(dir, n+".log"))
			if err != nil {
				t.Errorf("%s's log: %v", n, err)
			}
			logs[n] = string(data)
		}
	}
	start := time.Now()
	err := demoCluster(ctx, o, &out, &errOut)
	took := time.Since(start)
	text := out.String()
	if err != nil {
		t.Fatalf("demo-cluster --once: %v (after %s)\nstdout:\n%s\nstderr:\n%s\nlogs:\n%v", err, took, text, errOut.String(), logs)
	}
	t.Logf("demo-cluster --once took %s", took.Round(time.Millisecond))

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
	for name, l := range map[string]string{"stdout": text, "stderr": errOut.String(), "n1.log": logs["n1"], "n2.log": logs["n2"], "n3.log": logs["n3"]} {
		for _, leak := range []string{"sbdemo-", "/" + pageSlow + "/", "/" + pageFast + "/", "DATA RACE"} {
			if strings.Contains(l, leak) {
				t.Errorf("%s holds %q:\n%s", name, leak, l)
			}
		}
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

// dcTestOptions are demo-cluster's options in a test: --once, its nodes
// this test binary run as the command, with the race suppressions of
// protoactor-go.
func dcTestOptions(t *testing.T) dcOptions {
	t.Helper()
	supp, err := filepath.Abs(raceSuppressions)
	if err != nil {
		t.Fatal(err)
	}
	return dcOptions{
		once:    true,
		targets: 8,
		exe:     os.Args[0],
		env:     []string{runMainEnv + "=1", "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" suppressions="+supp)},
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

// TestDemoCluster_Interrupt cancels demo-cluster (Ctrl-C) once its cluster
// has formed: it returns context.Canceled promptly, every node has stopped
// on SIGTERM, and its temporary directory is gone. (Just after the kill, a
// node takes ~10s to stop: protoactor's shutdown retries the dead peer.)
func TestDemoCluster_Interrupt(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	ended := make(chan error, 1)
	go func() { ended <- demoCluster(ctx, dcTestOptions(t), &out, io.Discard) }()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(out.String(), "the cluster has formed") {
		select {
		case err := <-ended:
			t.Fatalf("demo-cluster ended before its cluster formed: %v\n%s", err, out.String())
		case <-deadline.C:
			cancel()
			t.Fatalf("no cluster after 60s:\n%s (ended: %v)", out.String(), <-ended)
		case <-tick.C:
		}
	}
	cancel()
	cancelled := time.Now()
	select {
	case err := <-ended:
		t.Logf("stopped %s after the cancel", time.Since(cancelled).Round(time.Millisecond))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("demo-cluster did not stop within 30s of its cancel:\n%s", out.String())
	}
	checkStopped(t, out.String(), 3)
	if strings.Contains(out.String(), "Killed (SIGKILL)") {
		t.Errorf("a node did not stop on SIGTERM:\n%s", out.String())
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Errorf("the demo left %v in its temporary directory (%v)", entries, err)
	}
}

// TestDemoCluster_Flags: its --help lists its flags; a bad --targets is a
// usage error naming it, before anything starts.
func TestDemoCluster_Flags(t *testing.T) {
	out, _, err := run(t, "demo-cluster", "--help")
	if !errors.Is(err, errHelpShown) {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage: siftbatch demo-cluster", "  -once\n", "  -targets int\n", "Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"--targets", "1"}, {"--targets", "33"}, {"extra"}} {
		_, _, err := run(t, append([]string{"demo-cluster"}, args...)...)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(ue.hint(), "siftbatch demo-cluster --help") {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
