package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// readmeBlock returns the bash block of README.md after the marker
// "<!-- NAME:", and the repository's root. The tools a block needs (bash,
// curl, python3, go) must be installed: .ci/run installs them, and CI fails
// without them; elsewhere the test skips.
func readmeBlock(t *testing.T, name string) (block, root string) {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "python3", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed; .ci/run should have installed it", tool)
			}
			t.Skipf("%s is not installed (.ci/run installs it)", tool)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- "+name+":")
	if ok {
		_, rest, ok = strings.Cut(rest, "```bash\n")
	}
	block, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 {
		t.Fatalf("README.md has no %s block", name)
	}
	return block, root
}

// runBlock runs block with bash from the repository's root, as a person
// pasting it would, TMPDIR a directory of the test's, and returns its
// output. It checks that the block removed its temporary directory and
// left nothing in the repository.
func runBlock(t *testing.T, block, root string) string {
	t.Helper()
	return runBlockIn(t, block, root, nil)
}

// runBlockIn is runBlock with the block's bash run by wrap (its name
// and arguments, before bash's), as in a network namespace.
func runBlockIn(t *testing.T, block, root string, wrap []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append(slices.Clone(wrap), "bash", "-c", block)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = root
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	// The block starts servers in the background: on a timeout, or should
	// its last line not stop them, the whole group goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing, if the block stopped all it started
	}
	if err != nil {
		t.Fatalf("the block failed: %v\n%s", err, out)
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Errorf("the block left %v in its temporary directory (%v)", entries, err)
	}
	for _, name := range []string{"keys.txt", "site", "siftbatch", "data", "data1", "certs"} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			t.Errorf("the block left %s in the repository", name)
		}
	}
	t.Logf("output:\n%s", out)
	return string(out)
}

// TestREADME_Session runs the session of README.md (the bash block after
// the "session" marker), so that the README cannot rot: a job of two
// targets, read back every way, cancelled too late, counted in /metrics;
// its directory is removed at the end.
func TestREADME_Session(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	block, root := readmeBlock(t, "session")
	text := runBlock(t, block, root)
	for _, want := range []string{
		`"status":"partial"`, `"targets_done":2`, `"targets_failed":1`,
		`"content":"<h1>hello</h1>`, `"error":"job already finished"`,
		`siftbatch_jobs_total{outcome="created"} 1`, `siftbatch_jobs_total{outcome="partial"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the session's output lacks %s:\n%s", want, text)
		}
	}
	if !regexp.MustCompile(`(?m)^job [0-9a-f]{32}$`).MatchString(text) {
		t.Errorf("the session did not capture the job's id:\n%s", text)
	}
}

// TestREADME_Cluster runs the cluster block of README.md as pasted on a
// clean clone: it builds the command, writes its keys and certificates,
// starts three nodes speaking mutual TLS, reads n1's job through n3, stops
// every node and removes its directory.
func TestREADME_Cluster(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	block, root := readmeBlock(t, "cluster")
	// The block's manage ports are fixed (the nodes' --peers): it runs in
	// a network namespace of its own, where they are free and nothing
	// else can take them, with its loopback up; where the test cannot
	// make one (not root, no unshare or ip), in the machine's.
	wrap := netnsWrap(t)
	if wrap != nil {
		block = "ip link set lo up || exit 1\n" + block
	}
	text := runBlockIn(t, block, root, wrap)
	// Each node picked its API's and its cluster's ports (port 0) and
	// said where they are.
	for _, n := range []string{"n1", "n3"} {
		if !regexp.MustCompile(`(?m)^siftbatch serve: listening on http://127\.0\.0\.1:[1-9][0-9]*$`).MatchString(text) ||
			!regexp.MustCompile(`(?m)^siftbatch serve: cluster node `+n+` at 127\.0\.0\.1:[1-9][0-9]*$`).MatchString(text) {
			t.Errorf("%s did not say where its API and its cluster port listen:\n%s", n, text)
		}
	}
	m := regexp.MustCompile(`(?m)^job ([0-9a-f]{32}), on n1$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the block did not capture the job's id:\n%s", text)
	}
	if !strings.HasPrefix(m[1], tagHex("n1")) {
		t.Errorf("job %s is not of n1's tag %s", m[1], tagHex("n1"))
	}
	if !strings.Contains(text, `{"id":"`+m[1]+`","status":"done","targets_total":1,"targets_done":1`) {
		t.Errorf("n3 did not answer n1's job, done:\n%s", text)
	}
}

// TestREADME_CLI runs the CLI block of README.md as pasted on a machine
// without internet: it builds the command, serves pages with python and
// starts serve on ports they pick, submits, waits, gets, lists and
// cancels through the commands, stops both and removes its directory.
func TestREADME_CLI(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	block, root := readmeBlock(t, "cli")
	text := runBlock(t, block, root)
	m := regexp.MustCompile(`(?m)^job ([0-9a-f]{32}): partial, 3 of 3 stored, 1 failed, created `).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("wait did not print the job, partial:\n%s", text)
	}
	for _, want := range []string{
		"--- 0 done http://127.0.0.1:", "<h1>a</h1>", "<h1>b</h1>", "--- 2 failed http://127.0.0.1:", "HTTP 404",
		"ID  ", m[1], "job already finished",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the CLI block's output lacks %q:\n%s", want, text)
		}
	}
}

// netnsWrap returns the command that runs a program in a new network
// namespace (unshare --net as root; as another user, in a user namespace
// too), or nil, said in the log, where none can be made here.
func netnsWrap(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no ip command: .ci/run installs iproute2")
		}
		t.Log("no ip command (iproute2): the block runs in this machine's network namespace")
		return nil
	}
	for _, wrap := range [][]string{{"unshare", "--net", "--"}, {"unshare", "--user", "--map-root-user", "--net", "--"}} {
		if exec.Command(wrap[0], append(wrap[1:], "ip", "link", "set", "lo", "up")...).Run() == nil {
			return wrap
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("cannot make a network namespace (CI runs as root, with iproute2: .ci/run installs it)")
	}
	t.Log("cannot make a network namespace here: the block runs in this machine's")
	return nil
}
