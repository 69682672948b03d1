package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// TestRemoteCommands_Binary runs the built command's submit, wait, get,
// ls and cancel against a real API (httpapi over a runner, on loopback):
// what each prints, its exit code, and what the server has.
func TestRemoteCommands_Binary(t *testing.T) {
	testkit.Long(t)
	release := make(chan struct{})
	b := enginetest.Setup(t, fakeFetch(release), engine.Config{JobsPerCaller: 4}) // jobs one after another
	keys, err := httpapi.ReadKeys(strings.NewReader("alice alice-secret-key\n"))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(b.Runner, keys, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		close(release)
		api.EndWaits()
		srv.Close()
	})
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("alice-secret-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := clitest.Binary(t) // the build the package's other binary tests share; remote's own tests run under -race
	var allErr bytes.Buffer  // every command's stderr
	sb := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--server", srv.URL, "--key-file", keyFile)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		allErr.Write(errOut.Bytes())
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}

	out, stderr, code := sb("", "submit", "https://example.com/a", "https://example.com/fail")
	id := strings.TrimSpace(out)
	if _, ok := b.Runner.Job(id); code != 0 || !ok {
		t.Fatalf("submit: exit %d, %q %q", code, out, stderr)
	}
	out, stderr, code = sb("", "wait", id, "--json")
	var j client.Job
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.Status != engine.StatusPartial || j.TargetsDone != 2 || j.TargetsFailed != 1 {
		t.Fatalf("wait --json: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = sb("", "get", id, "--results")
	if code != 0 || !strings.Contains(out, "--- 0 done https://example.com/a\n<p>page https://example.com/a\n--- 1 failed https://example.com/fail: HTTP 404 Not Found (check the URL)\n") {
		t.Fatalf("get --results: exit %d\n%s", code, out)
	}
	out, _, code = sb("", "ls")
	if code != 0 || !strings.Contains(out, id+"  partial  2/2") {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}
	out, stderr, code = sb(`{"targets":[{"url":"https://example.com/x/hold"}]}`, "submit", "--targets", "-", "--json")
	var sub client.Submitted
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil || sub.Reused {
		t.Fatalf("submit --targets -: exit %d\n%s%s", code, out, stderr)
	}
	if out, _, code = sb("", "cancel", sub.ID); code != 0 || out != "job "+sub.ID+" cancelled\n" {
		t.Fatalf("cancel: exit %d %q", code, out)
	}
	if j := b.WaitSettled(t, sub.ID); j.Status != engine.StatusCancelled {
		t.Fatalf("job %s after cancel", j.Status)
	}

	// Errors: the API's, with its hint, exit 1; a usage error exit 2.
	_, stderr, code = sb("", "get", "00112233445566778899aabbccddeeff")
	if code != exitError || !strings.Contains(stderr, "job not found (404): check the id") {
		t.Fatalf("get of a missing job: exit %d %q", code, stderr)
	}
	_, stderr, code = sb("", "cancel", id)
	if code != exitError || !strings.Contains(stderr, "(409)") {
		t.Fatalf("cancel of an ended job: exit %d %q", code, stderr)
	}
	if _, stderr, code = sb("", "wait"); code != exitUsage || !strings.Contains(stderr, `"siftbatch wait --help"`) {
		t.Fatalf("wait without an id: exit %d %q", code, stderr)
	}
	testkit.RequireNoneOf(t, allErr.String(), "alice-secret-key")
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}
