package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// TestMain checks that no test leaves a goroutine behind: runners,
// servers, connections and progress bars are all stopped.
func TestMain(m *testing.M) { enginetest.Main(m) }

// bundle is a real API on loopback (httpapi over the kit's runner) and a
// key file of alice's.
type bundle struct {
	*enginetest.Bundle
	server  string
	keyFile string
	gate    *testkit.Gate
}

// fakeFetch holds a URL ending in /hold at g, fails one ending in /fail,
// answers one ending in /ansi with terminal escape sequences, and any
// other with "<h1>URL</h1>".
func fakeFetch(g *testkit.Gate) engine.FetchFunc {
	return func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			if err := g.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Msg: "HTTP 404", Hint: "check the URL"}
		case strings.HasSuffix(t.URL, "/ansi"):
			return engine.Result{Content: "\x1b]0;owned\x07red \x1b[31mtext\r\nline\ttab\u009b"}, nil
		}
		return engine.Result{Content: "<h1>" + t.URL + "</h1>"}, nil
	}
}

func setup(t *testing.T) *bundle {
	t.Helper()
	// Room for a few live jobs: the tests submit one after another, and
	// the runner may count a job that has ended a moment after it reads so.
	return setupWith(t, engine.Config{JobsPerCaller: 8})
}

func setupWith(t *testing.T, cfg engine.Config) *bundle {
	t.Helper()
	b := &bundle{gate: testkit.NewGate()}
	b.Bundle = enginetest.Setup(t, fakeFetch(b.gate), cfg)
	keys, err := httpapi.ReadKeys(strings.NewReader("alice alice-secret-key\n"))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(b.Runner, keys, httpapi.Options{Honoured: []string{"grep", "jq"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		b.gate.Open()
		api.EndWaits()
		srv.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	b.server = srv.URL
	b.keyFile = writeFile(t, "key", "alice-secret-key\n")
	return b
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a command with the bundle's server and key file.
func (b *bundle) run(t *testing.T, cmd func(context.Context, []string, io.Writer, io.Writer) error, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := cmd(context.Background(), append(args, "--server", b.server, "--key-file", b.keyFile), &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestCommands_SessionInTextAndJSON submits, waits, gets, lists and
// cancels through the commands, as text and as JSON, against a real API.
func TestCommands_SessionInTextAndJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, _, err := b.run(t, Submit, "https://example.com/a", "https://example.com/fail")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	if _, ok := b.Runner.Job(id); !ok {
		t.Fatalf("submit printed %q, not a job's id", out)
	}
	out, stderr, err := b.run(t, Submit, "https://example.com/a", "https://example.com/fail", "--json")
	var sub client.Submitted
	if err != nil || json.Unmarshal([]byte(out), &sub) != nil || sub.ID != id || !sub.Reused || sub.Location != "/v1/batch/"+id || stderr != "" {
		t.Fatalf("submit again --json: %q %q %v", out, stderr, err)
	}
	if !strings.Contains(out, `"status": "/v1/batch/`+id+`"`) || !strings.Contains(out, `"location": "/v1/batch/`+id+`"`) {
		t.Fatalf("submit --json: %s, want the API's answer: status and location, the job's path", out)
	}
	var help bytes.Buffer
	if err := Submit(context.Background(), []string{"--help"}, &help, io.Discard); !strings.Contains(help.String(), `"status" is the`+"\n"+`job's path, /v1/batch/ID`) {
		t.Fatalf("submit --help (%v) does not say what --json's status is:\n%s", err, help.String())
	}
	if _, stderr, _ = b.run(t, Submit, "https://example.com/a", "https://example.com/fail"); !strings.Contains(stderr, "reused") {
		t.Fatalf("submit again: stderr %q; want a note that the job was reused", stderr)
	}

	out, _, err = b.run(t, Wait, id)
	if err != nil || !strings.HasPrefix(out, "job "+id+": partial, 2 of 2 stored, 1 failed, created 2026-01-02 03:04:05Z\n") ||
		!strings.Contains(out, "1    failed  https://example.com/fail  HTTP 404 (check the URL)") {
		t.Fatalf("wait: %v\n%s", err, out)
	}
	out, _, err = b.run(t, Wait, id, "--json")
	var j client.Job
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || j.ID != id || j.Status != engine.StatusPartial || len(j.Targets) != 2 {
		t.Fatalf("wait --json: %v\n%s", err, out)
	}
	if out2, _, err := b.run(t, Get, id, "--json"); err != nil || out2 != out {
		t.Fatalf("get --json: %v\n%s\nwant what wait --json printed:\n%s", err, out2, out)
	}
	out, _, err = b.run(t, Get, id, "--results")
	if want := "--- 0 done https://example.com/a\n<h1>https://example.com/a</h1>\n--- 1 failed https://example.com/fail: HTTP 404 (check the URL)\n"; err != nil || out != want {
		t.Fatalf("get --results: %v\n%q\nwant\n%q", err, out, want)
	}
	out, _, err = b.run(t, Get, id, "--results", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || lines[0] != `{"idx":0,"url":"https://example.com/a","status":"done","duration_ms":1,"result":{"content":"<h1>https://example.com/a</h1>"}}` {
		t.Fatalf("get --results --json: %v\n%s", err, out)
	}
	out, _, err = b.run(t, Get, id, "0")
	if err != nil || out != "--- 0 done https://example.com/a\n<h1>https://example.com/a</h1>\n" {
		t.Fatalf("get ID 0: %v\n%q", err, out)
	}
	out, _, err = b.run(t, List)
	if err != nil || !strings.Contains(out, id+"  partial  2/2") {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	out, _, err = b.run(t, List, "--json", "--status", "live")
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("ls --status live --json: %v\n%s", err, out)
	}
	if _, _, err = b.run(t, Cancel, id); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("cancel of an ended job: %v", err)
	}

	out, _, err = b.run(t, Submit, "https://example.com/x/hold", "--json")
	if err != nil || json.Unmarshal([]byte(out), &sub) != nil {
		t.Fatalf("submit: %v %s", err, out)
	}
	if _, _, err := b.run(t, Wait, sub.ID, "--timeout", "10ms"); err == nil || !strings.Contains(err.Error(), "still") {
		t.Fatalf("wait past its timeout: %v; want an error that the job is still live", err)
	}
	out, _, err = b.run(t, Cancel, sub.ID, "--json")
	if err != nil || strings.Join(strings.Fields(out), "") != `{"cancelled":true,"id":"`+sub.ID+`"}` {
		t.Fatalf("cancel --json: %v %s", err, out)
	}
	if j := b.WaitSettled(t, sub.ID); j.Status != engine.StatusCancelled {
		t.Fatalf("job %s after cancel", j.Status)
	}
}

// TestList_LimitsAndSaysThereIsMore lists 3 jobs with --limit 2: the 2
// newest, and a note on stderr.
func TestList_LimitsAndSaysThereIsMore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, u := range []string{"https://example.com/1", "https://example.com/2", "https://example.com/3"} {
		out, _, err := b.run(t, Submit, u)
		if err != nil {
			t.Fatal(err)
		}
		b.WaitSettled(t, strings.TrimSpace(out))
		b.Clock.Advance(1e9)
	}
	out, stderr, err := b.run(t, List, "--limit", "2", "--json")
	var jobs []client.Job
	if err != nil || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 2 || !strings.Contains(stderr, "--limit 0") {
		t.Fatalf("ls --limit 2: %v %q\n%s", err, stderr, out)
	}
	out, stderr, err = b.run(t, List, "--limit", "0", "--json")
	if err != nil || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 3 || stderr != "" {
		t.Fatalf("ls --limit 0: %v %q\n%s", err, stderr, out)
	}
}

// TestSubmit_ReadsATargetsFile submits the targets of a file, as an
// object and as a list, with options; a bad file is an error that names
// it, and nothing is submitted.
func TestSubmit_ReadsATargetsFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, body := range []string{
		`{"targets":[{"url":"https://example.com/f1","options":{"grep":"h1"}}]}`,
		`[{"url":"https://example.com/f2"},{"url":"https://example.com/f3","options":{"jq":"."}}]`,
	} {
		out, _, err := b.run(t, Submit, "--targets", writeFile(t, "t.json", body))
		if err != nil {
			t.Fatal(err)
		}
		_, ts, ok := b.Runner.Targets(strings.TrimSpace(out))
		if !ok || len(ts) == 0 || !strings.HasPrefix(ts[0].URL, "https://example.com/f") {
			t.Fatalf("submitted %+v", ts)
		}
		b.WaitSettled(t, strings.TrimSpace(out))
	}
	for _, body := range []string{``, `{"targets":[{"url":"https://example.com/","options":{"summarize":true}}]}`, `[] []`, `{"targets":`} {
		_, _, err := b.run(t, Submit, "--targets", writeFile(t, "bad.json", body))
		if err == nil || !strings.Contains(err.Error(), "bad.json") {
			t.Fatalf("targets file %q: %v; want an error naming the file", body, err)
		}
	}
	if jobs, _, _ := b.Runner.List("alice", engine.ListOptions{}); len(jobs) != 2 {
		t.Fatalf("%d jobs; want the 2 good files'", len(jobs))
	}
}

// TestCommands_UsageErrors: each mistake of a command line is a usage
// error, and nothing reaches the server.
func TestCommands_UsageErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := writeFile(t, "key", "k\n")
	for _, tc := range []struct {
		cmd  func(context.Context, []string, io.Writer, io.Writer) error
		args []string
	}{
		{Submit, []string{"https://example.com/"}},                                     // no --key-file
		{Submit, []string{"--key-file", key}},                                          // no URL
		{Submit, []string{"--key-file", key, "--targets", "x", "https://example.com"}}, // both
		{Submit, []string{"--key-file", key, "--targets", "x", "--grep", "a"}},
		{Submit, []string{"--key-file", key, "--server", "ftp://x", "https://example.com"}},
		{Get, []string{"--key-file", key}},
		{Get, []string{"--key-file", key, "id", "-1"}},
		{Get, []string{"--key-file", key, "a", "b", "c"}},
		{Wait, []string{"--key-file", key, "id", "--timeout", "-1s"}},
		{List, []string{"--key-file", key, "extra"}},
		{List, []string{"--key-file", key, "--limit", "-1"}},
		{Cancel, []string{"--key-file", key}},
	} {
		var out bytes.Buffer
		err := tc.cmd(ctx, append(tc.args, "--server", "http://127.0.0.1:1"), &out, &out)
		if strings.Contains(strings.Join(tc.args, " "), "ftp://") {
			err = tc.cmd(ctx, tc.args, &out, &out)
		}
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v; want a usage error", tc.args, err)
		}
	}
}

// TestReadKeyFile_TakesTheKeyAlone reads a key with its newline, and
// refuses a file that is empty, has more than the key or is too large,
// without the file's content in the error.
func TestReadKeyFile_TakesTheKeyAlone(t *testing.T) {
	t.Parallel()
	if k, err := ReadKeyFile(writeFile(t, "k", "  s3cret-key\n")); err != nil || k != "s3cret-key" {
		t.Fatalf("%q, %v", k, err)
	}
	for name, content := range map[string]string{
		"empty":     "\n",
		"keys line": "alice s3cret-key\n",
		"two lines": "s3cret-key\ns3cret-key2\n",
		"too large": strings.Repeat("s3cret-key", 1000),
	} {
		_, err := ReadKeyFile(writeFile(t, "k", content))
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v; want an error without the content", name, err)
		}
	}
	if _, err := ReadKeyFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestProgress_DrawsAJobAndFinishes draws wait's bar for a job's
// progress to its end, and one removed by an interrupt; neither hangs
// (mpb's own drawing is package bars' to test).
func TestProgress_DrawsAJobAndFinishes(t *testing.T) {
	t.Parallel()
	for _, interrupted := range []bool{false, true} {
		var out bytes.Buffer
		p := &progress{w: &out}
		p.update(client.Job{ID: "j1", Status: "running", TargetsTotal: 3, TargetsDone: 1})
		if !interrupted {
			p.update(client.Job{ID: "j1", Status: "partial", TargetsTotal: 3, TargetsDone: 3, TargetsFailed: 1})
		}
		done := make(chan struct{})
		go func() {
			p.finish(interrupted)
			close(done)
		}()
		testkit.RequireClosed(t, done)
		if p.bar == nil || p.bar.Shown() != 1 {
			t.Fatal("no bar drawn for the job")
		}
	}
	(&progress{}).finish(false) // never drawn: nothing to stop
}

// TestGet_PrintsPageTextSafeForATerminal: a result's escape sequences and
// control characters are printed as U+FFFD in text, and as they are in
// --json.
func TestGet_PrintsPageTextSafeForATerminal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, _, err := b.run(t, Submit, "https://example.com/ansi")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	b.WaitSettled(t, id)
	out, _, err = b.run(t, Get, id, "0")
	if want := "--- 0 done https://example.com/ansi\n\uFFFD]0;owned\uFFFDred \uFFFD[31mtext\uFFFD\nline\ttab\uFFFD\n"; err != nil || out != want {
		t.Fatalf("get: %v\n%q\nwant\n%q", err, out, want)
	}
	out, _, err = b.run(t, Get, id, "0", "--json")
	var ts client.TargetStatus
	if err != nil || json.Unmarshal([]byte(out), &ts) != nil || ts.Result == nil || ts.Result.Content != "\x1b]0;owned\x07red \x1b[31mtext\r\nline\ttab\u009b" {
		t.Fatalf("get --json: %v\n%s", err, out)
	}
}

// TestReadKeyFile_TakesAKeySavedByAnotherEditor reads a key file as
// Windows' Notepad saves it (a UTF-8 byte order mark, CRLF): the key is
// the key, not the key behind an invisible U+FEFF that every server
// answers 401. And a serve --keys line whose words are apart by a
// non-ASCII space (U+00A0, U+3000) is refused as more than the key, as
// one with an ASCII space is.
func TestReadKeyFile_TakesAKeySavedByAnotherEditor(t *testing.T) {
	t.Parallel()
	if k, err := ReadKeyFile(writeFile(t, "k", "\ufeffs3cret-key\r\n")); err != nil || k != "s3cret-key" {
		t.Errorf("a BOM and CRLF: %q, %v; want the key alone", k, err)
	}
	for name, content := range map[string]string{
		"no-break space":    "alice\u00a0s3cret-key\n",
		"ideographic space": "alice\u3000s3cret-key\n",
		"zero-width space":  "alice\u200bs3cret-key\n",
	} {
		if k, err := ReadKeyFile(writeFile(t, "k", content)); err == nil {
			t.Errorf("%s: took %q; want an error: more than the key", name, k)
		}
	}
}

// TestSummary_CountsTargetsThatWillNotRun: the summary line's counts add
// up: a job that ended with targets pending counts them "not run".
func TestSummary_CountsTargetsThatWillNotRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		j    client.Job
		want string
	}{
		{client.Job{ID: "j", Status: "failed", Error: "restart", TargetsTotal: 3, TargetsDone: 1}, "job j: failed, 1 of 3 stored, 0 failed, 2 not run, created 1970-01-01 00:00:00Z (restart)"},
		{client.Job{ID: "j", Status: "cancelled", TargetsTotal: 2}, "job j: cancelled, 0 of 2 stored, 0 failed, 2 not run, created 1970-01-01 00:00:00Z"},
		{client.Job{ID: "j", Status: "running", TargetsTotal: 3, TargetsDone: 1}, "job j: running, 1 of 3 stored, 0 failed, created 1970-01-01 00:00:00Z"},
		{client.Job{ID: "j", Status: "partial", TargetsTotal: 2, TargetsDone: 2, TargetsFailed: 1}, "job j: partial, 2 of 2 stored, 1 failed, created 1970-01-01 00:00:00Z"},
	}
	for _, tt := range tests {
		if got := summary(tt.j); got != tt.want {
			t.Errorf("summary(%+v) = %q, want %q", tt.j, got, tt.want)
		}
	}
}

// TestCommands_CancelledJobSaysWhatWillNotRun: a job cancelled with a
// target in flight and one pending reads, in get and ls, 1 not run, and
// the pending target's hint says it will not run because of the cancel.
func TestCommands_CancelledJobSaysWhatWillNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out, _, err := b.run(t, Submit, "https://example.com/a", "https://example.com/x/hold", "https://example.com/c")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	testkit.Recv(t, b.gate.Entered())
	if _, _, err := b.run(t, Cancel, id); err != nil {
		t.Fatal(err)
	}
	b.gate.Open()
	testkit.WaitFor(t, "the target in flight at the cancel stored", func() bool {
		j, ok := b.Runner.Job(id)
		return ok && j.TargetsDone == 2
	})
	out, _, err = b.run(t, Get, id)
	if err != nil || !strings.HasPrefix(out, "job "+id+": cancelled, 2 of 3 stored, 1 failed, 1 not run, created ") ||
		!strings.Contains(out, "context canceled (the job was cancelled while this target was fetched") ||
		!strings.Contains(out, "2    pending  https://example.com/c       not run: the job was cancelled before this target started") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	out, _, err = b.run(t, List)
	if err != nil || !strings.Contains(out, "NOT RUN") || !strings.Contains(out, id+"  cancelled  2/3         1       1 ") {
		t.Fatalf("ls: %v\n%s", err, out)
	}
}

// lineWriter is a stderr that signals each line written to it.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // not a whole line yet
			return len(p), nil
		}
		select {
		case w.lines <- strings.TrimSuffix(line, "\n"):
		default:
		}
	}
}

// TestSubmit_SaysWhyItWaitsOrAnswersAtOnce: a submit answered 429 (the
// caller at its cap) says on stderr, in one line, why it waits and when
// it tries again, before the wait; with --no-retry it answers the 429 at
// once.
func TestSubmit_SaysWhyItWaitsOrAnswersAtOnce(t *testing.T) {
	t.Parallel()
	b := setupWith(t, engine.Config{JobsPerCaller: 1})
	if _, _, err := b.run(t, Submit, "https://example.com/hold"); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := b.run(t, Submit, "https://example.com/second", "--no-retry")
	if !errors.Is(err, engine.ErrCallerBusy) || out != "" || stderr != "" {
		t.Fatalf("submit --no-retry at the cap: %v, stdout %q, stderr %q; want busy (429) at once, nothing printed", err, out, stderr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &lineWriter{lines: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- Submit(ctx, []string{"https://example.com/second", "--server", b.server, "--key-file", b.keyFile}, io.Discard, w)
	}()
	line := testkit.Recv(t, w.lines)
	cancel() // no need to wait it out
	if err := testkit.Recv(t, done); !errors.Is(err, context.Canceled) {
		t.Errorf("submit interrupted during its wait: %v", err)
	}
	for _, want := range []string{"siftbatch submit: the server answered busy (429)", "trying again in ", "(attempt 2 of 4)", "--no-retry answers at once"} {
		if !strings.Contains(line, want) {
			t.Errorf("the note before the wait: %q; want it to hold %q", line, want)
		}
	}
}

// TestCommands_HintWhenNothingListens: a refused connection (no serve at
// --server) is the error with a hint that names the address and --server.
func TestCommands_HintWhenNothingListens(t *testing.T) {
	t.Parallel()
	addr := testkit.RefusedAddr(t)
	key := writeFile(t, "key", "alice-key\n")
	for name, cmd := range map[string]func(context.Context, []string, io.Writer, io.Writer) error{"submit": Submit, "ls": List} {
		args := []string{"--server", addr, "--key-file", key}
		if name == "submit" {
			args = append(args, "https://example.com/a")
		}
		err := cmd(context.Background(), args, io.Discard, io.Discard)
		hint := cli.HintOf(err)
		if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(hint, "nothing listens at "+addr) ||
			!strings.Contains(hint, "is siftbatch serve running there?") || !strings.Contains(hint, "--server") {
			t.Errorf("%s with nothing at %s: %v, hint %q", name, addr, err, hint)
		}
	}
}

// TestRetryNote_IsOneLine: the note names the command, the answer, the
// wait rounded and the time it tries again, in one line whatever the
// server's text holds.
func TestRetryNote_IsOneLine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := client.Retry{Err: &client.Error{Status: 503, Message: "node\nunavailable", Hint: "retry\x1b[31m", RetryAfter: 2 * time.Second},
		Wait: 2345 * time.Millisecond, Attempt: 3, MaxAttempts: 4}
	got := retryNote("get", r, now)
	want := "siftbatch get: the server answered node unavailable (503): retry\ufffd[31m; trying again in 2.3s, at 03:04:07 (attempt 3 of 4)"
	if got != want {
		t.Errorf("note\n%q\nwant\n%q", got, want)
	}
}
