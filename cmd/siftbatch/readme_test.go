package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestREADME_Session extracts the session of README.md (the bash block
// after the "session" marker) and runs it as a person pasting it would,
// from the repository's root, so that the README cannot rot. It needs
// bash, curl and python3: .ci/run installs them, and CI fails without them.
func TestREADME_Session(t *testing.T) {
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
	_, rest, ok := strings.Cut(string(readme), "<!-- session:")
	if ok {
		_, rest, ok = strings.Cut(rest, "```bash\n")
	}
	block, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 {
		t.Fatal("README.md has no session block")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", block)
	cmd.Dir = root
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	// The session starts servers in the background: on a timeout, or
	// should its last line not stop them, the whole group goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing, if the session stopped all it started
	}
	if err != nil {
		t.Fatalf("the session failed: %v\n%s", err, out)
	}
	text := string(out)
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
	// Nothing landed in the repository.
	for _, name := range []string{"keys.txt", "site", "siftbatch", "data"} {
		if _, err := os.Stat(filepath.Join(root, name)); err == nil {
			t.Errorf("the session left %s in the repository", name)
		}
	}
	t.Logf("session output:\n%s", text)
}
