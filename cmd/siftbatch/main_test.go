package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/persistence"
)

// holdStoreEnv, set in a child process of the test binary, makes it hold
// the store directory it names until its standard input closes: a store in
// use by another process.
const holdStoreEnv = "SIFTBATCH_TEST_HOLD_STORE"

func TestMain(m *testing.M) {
	fetcher.RunFilterChild() // the filter processes of the fetchers the tests make
	if os.Getenv(runMainEnv) != "" {
		setFileLimit(os.Getenv(fileLimitEnv))
		main() // the command itself (TestServe_Cluster's nodes); it exits
	}
	if dir := os.Getenv(holdStoreEnv); dir != "" {
		os.Exit(holdStore(dir))
	}
	if cfg := os.Getenv(pollLoadEnv); cfg != "" {
		os.Exit(pollLoad(cfg))
	}
	if cfg := os.Getenv(idleConnsEnv); cfg != "" {
		os.Exit(idleConns(cfg))
	}
	// Nothing may leak: every runner, store, server, client and child
	// process a test starts is stopped by the end of the test. No
	// goroutine is allowed to outlive the tests.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		clitest.Cleanup()
		removeTestCerts()
		os.Exit(code)
	}))
}

// holdStore opens dir, says "held" on stdout, and keeps the store open until
// stdin is closed.
func holdStore(dir string) int {
	s, err := persistence.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold store:", err)
		return 1
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = s.Close()
	return 0
}

// holdStoreInChild holds the store in dir from another process until the
// test ends.
func holdStoreInChild(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdStoreEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("store holder: %v", err)
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	if l := testkit.Recv(t, line); l != "held\n" {
		t.Fatalf("store holder said %q", l)
	}
}

// Test keys: alice and bob are standard callers, carol is restricted.
const testKeys = `# name key [restricted]
alice alice-secret-key
bob   bob-long-secret-key
carol carol-secret-key restricted
`

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// fakeFetch answers from the URL: ".../hold" waits for release (or the
// runner's close), ".../fail" fails with a hint, anything else succeeds.
func fakeFetch(release <-chan struct{}) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			select {
			case <-release:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		return engine.Result{Content: "<p>page " + t.URL, Meta: map[string]any{"status": 200}}, nil
	}
}

// response is an answer, its body read.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", r.code, err, r.body)
	}
	return m
}

// send does req with c and reads the whole answer.
func send(t testing.TB, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

func targetsBody(urls ...string) string {
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	data, _ := json.Marshal(map[string]any{"targets": ts})
	return string(data)
}

func wantCode(t *testing.T, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %d, want %d: %s", r.code, code, r.body)
	}
}

// roundTripFunc is a function that is an [http.RoundTripper].
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// run runs the command line in-process and returns what it printed.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// lineWriter hands each written line to a channel.
type lineWriter struct {
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- string(w.buf[:i]):
		default:
		}
		w.buf = w.buf[i+1:]
	}
}
