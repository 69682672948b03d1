package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// run runs the command line in-process and returns what it printed.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// fillStore stores three finished jobs in dir: alice's "partial" job of two
// targets, alice's "done" job of one, and bob's "done" job of one. It
// returns their ids in that order.
func fillStore(t *testing.T, dir string) []string {
	t.Helper()
	store, err := persistence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	release := make(chan struct{})
	close(release)
	r, err := engine.New(store, fakeFetch(release), engine.Config{JobsPerCaller: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ids []string
	for _, s := range []struct {
		caller string
		urls   []string
	}{
		{"alice", []string{"https://example.com/a", "https://example.com/fail"}},
		{"alice", []string{"https://example.com/b"}},
		{"bob", []string{"https://example.com/c"}},
	} {
		ts := make([]engine.Target, len(s.urls))
		for i, u := range s.urls {
			ts[i] = engine.Target{URL: u}
		}
		id, _, err := r.Submit(context.Background(), &engine.Caller{Name: s.caller}, httpapi.ClassStandard, ts)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		testkit.WaitFor(t, "job "+id, func() bool {
			j, _, ok := r.Status(id)
			return ok && !engine.IsLive(j.Status)
		})
	}
	return ids
}

func TestJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := fillStore(t, dir)
	out, _, err := run(t, "jobs", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 jobs:\n%s", out)
	}
	for _, col := range []string{"ID", "CALLER", "STATUS", "DONE/TOTAL", "FAILED", "CREATED", "LAST ACTIVE"} {
		if !strings.Contains(lines[0], col) {
			t.Fatalf("header %q lacks %s", lines[0], col)
		}
	}
	want := map[string][]string{
		ids[0]: {"alice", "partial", "2/2"},
		ids[1]: {"alice", "done", "1/1"},
		ids[2]: {"bob", "done", "1/1"},
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		w, ok := want[f[0]]
		if !ok || f[1] != w[0] || f[2] != w[1] || f[3] != w[2] {
			t.Errorf("row %q, want %v", l, w)
		}
		delete(want, f[0])
	}
	if len(want) != 0 {
		t.Errorf("jobs missing: %v", want)
	}

	t.Run("empty store", func(t *testing.T) {
		empty := t.TempDir()
		s, err := persistence.Open(empty)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		out, _, err := run(t, "jobs", "--data", empty)
		if err != nil || !strings.HasPrefix(out, "no jobs in ") {
			t.Fatalf("%q %v", out, err)
		}
	})

	t.Run("no such directory", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, _, err := run(t, "jobs", "--data", missing)
		if err == nil || !strings.Contains(err.Error(), "no siftbatch store at") {
			t.Fatalf("got %v", err)
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("jobs created the directory")
		}
	})
}

func TestShow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := fillStore(t, dir)

	var job storedJobJSON
	out, _, err := run(t, "show", "--data", dir, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if job.ID != ids[0] || job.Caller != "alice" || job.Status != "partial" || job.TargetsTotal != 2 || job.TargetsDone != 2 || len(job.Targets) != 2 {
		t.Fatalf("job:\n%s", out)
	}
	if job.Targets[0].URL != "https://example.com/a" || job.Targets[0].Status != "done" || job.Targets[0].Result != nil {
		t.Fatalf("target 0 without --results:\n%s", out)
	}
	if job.Targets[1].Status != "failed" || job.Targets[1].Error != "HTTP 404 Not Found" || job.Targets[1].Hint != "check the URL" {
		t.Fatalf("target 1:\n%s", out)
	}

	// --results, after the id as the usage shows it.
	out, _, err = run(t, "show", "--data", dir, ids[0], "--results")
	if err != nil {
		t.Fatal(err)
	}
	job = storedJobJSON{}
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatal(err)
	}
	if res := job.Targets[0].Result; res == nil || res.Content != "<p>page https://example.com/a" {
		t.Fatalf("result %+v:\n%s", res, out)
	}
	if !strings.Contains(out, `"content": "<p>page`) {
		t.Fatalf("show escapes HTML:\n%s", out)
	}

	if _, _, err := run(t, "show", "--data", dir, "0123456789abcdef0123456789abcdef"); err == nil || !strings.Contains(err.Error(), "no job") {
		t.Fatalf("unknown id: %v", err)
	}
	var ue *cli.UsageError
	if _, _, err := run(t, "show", "--data", dir); !errors.As(err, &ue) {
		t.Fatalf("no id: %v, want a usage error", err)
	}
}

// TestShow_SameFieldsAsAPI: every field show and the API's GET
// /v1/batch/{id}?results=1 share has the same name, type and value (times
// in unix seconds, results as objects, HTML not escaped); show adds the
// store's own: caller, lease, result_bytes.
func TestShow_SameFieldsAsAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := fillStore(t, dir)

	// The API's answer, from a runner on the same store.
	store, err := persistence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.New(store, fakeFetch(nil), engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(r, keys, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+ids[0]+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	r.Close()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("API: %d %s", rec.Code, rec.Body)
	}
	var api map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &api); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, "show", "--data", dir, ids[0], "--results")
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]any
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, `\u003c`) {
		t.Errorf("show escapes HTML:\n%s", out)
	}
	for _, extra := range []string{"caller", "lease", "result_bytes"} {
		if _, ok := shown[extra].(string); extra != "caller" && ok {
			t.Errorf("show's %s is a string, want a number", extra)
		}
		if _, ok := shown[extra]; !ok {
			t.Errorf("show has no %s", extra)
		}
	}
	for k, v := range api {
		if k == "targets" {
			continue
		}
		if got, ok := shown[k]; !ok || fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", v, v) {
			t.Errorf("%s: show has %T %v, the API %T %v", k, got, got, v, v)
		}
	}
	at, st := api["targets"].([]any), shown["targets"].([]any)
	if len(at) != 2 || len(st) != 2 {
		t.Fatalf("targets: API %d, show %d", len(at), len(st))
	}
	for i := range at {
		for k, v := range at[i].(map[string]any) {
			got := st[i].(map[string]any)[k]
			if a, b := mustJSON(t, got), mustJSON(t, v); a != b {
				t.Errorf("target %d %s: show %s, the API %s", i, k, a, b)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestJobs_StoreInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, dir)
	holdStoreInChild(t, dir)

	for _, args := range [][]string{{"jobs", "--data", dir}, {"show", "--data", dir, "0123456789abcdef0123456789abcdef"}} {
		_, _, err := run(t, args...)
		if !errors.Is(err, persistence.ErrInUse) {
			t.Fatalf("%s: %v, want ErrInUse", args[0], err)
		}
		var msg bytes.Buffer
		if code := report(err, &msg); code != exitError {
			t.Fatalf("exit %d, want 1", code)
		}
		if want := "siftbatch: store " + dir + " is in use by another process (a running siftbatch serve?); stop it first\n"; msg.String() != want {
			t.Fatalf("printed %q, want %q", msg.String(), want)
		}
	}

	// The real binary: exit 1, one line, promptly.
	bin := clitest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "jobs", "--data", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want code 1; stderr %q", err, stderr.String())
	}
	if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "is in use by another process") {
		t.Fatalf("stderr %q, want one line", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("stdout %q", stdout.String())
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "help")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("help does not list %s:\n%s", c.name, out)
		}
	}
	flags := map[string][]string{
		"demo": {"jobs", "targets", "workers", "data"},
		"serve": {"addr", "data", "keys", "allow-private", "ttl", "targets-per-job", "jobs-per-caller", "jobs-total", "workers", "max-bytes", "retry-wait", "retry-for", "fetch-timeout", "max-body", "filter-memory", "max-answer-bytes", "ui-session", "tls-proxy", "log-level",
			"cluster", "node", "cluster-addr", "advertise-addr", "manage-addr", "peers", "cluster-provider",
			"cluster-ca", "cluster-cert", "cluster-key", "cluster-insecure"},
		"cluster-certs": {"dir", "nodes", "hosts"},
		"jobs":          {"data"},
		"show":          {"data", "results"},
	}
	for name, want := range flags {
		for _, args := range [][]string{{name, "--help"}, {"help", name}} {
			out, _, err := run(t, args...)
			if !errors.Is(err, cli.ErrHelpShown) && err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if report(err, io.Discard) != exitOK {
				t.Fatalf("%v does not exit 0", args)
			}
			if !strings.Contains(out, "Usage: siftbatch "+name) {
				t.Fatalf("%v:\n%s", args, out)
			}
			for _, f := range want {
				// Each flag has its own line with a description under it.
				i := strings.Index(out, "  -"+f)
				if i < 0 {
					t.Fatalf("%v lacks -%s:\n%s", args, f, out)
				}
				rest := strings.SplitN(out[i:], "\n", 3)
				if len(rest) < 2 || strings.TrimSpace(rest[1]) == "" {
					t.Fatalf("%v: -%s has no description:\n%s", args, f, out)
				}
			}
		}
	}
	for _, tc := range []struct {
		args []string
		hint string
	}{
		{nil, `"siftbatch help"`},
		{[]string{"frobnicate"}, `"siftbatch help"`},
		{[]string{"help", "nope"}, `"siftbatch help"`},
		{[]string{"demo", "--nope"}, `"siftbatch demo --help"`},
		{[]string{"demo", "--jobs", "0"}, `"siftbatch demo --help"`},
		{[]string{"jobs", "extra"}, `"siftbatch jobs --help"`},
		{[]string{"serve"}, `"siftbatch serve --help"`},
		{[]string{"show"}, `"siftbatch show --help"`},
	} {
		_, _, err := run(t, tc.args...)
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Fatalf("%v: %v, want a usage error", tc.args, err)
		}
		var msg bytes.Buffer
		if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), tc.hint) {
			t.Fatalf("%v: exit %d %q, want 2 and a hint naming %s", tc.args, code, msg.String(), tc.hint)
		}
	}
	// help's own --help lists the commands.
	for _, args := range [][]string{{"help", "--help"}, {"help", "-h"}, {"--help"}} {
		out, _, err := run(t, args...)
		if err != nil || !strings.Contains(out, "Commands:") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
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

// TestServe runs the serve command: it listens, serves a job through the
// real fetcher, and on cancel (SIGINT) stops cleanly with the store closed.
func TestServe(t *testing.T) {
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("served"))
	}))
	defer site.Close()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineWriter{lines: make(chan string, 16)}
	var logs testkit.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--keys", keys, "--allow-private", "--log-level", "debug"}, out, &logs)
	}()
	var base string
	select {
	case l := <-out.lines:
		_, addr, ok := strings.Cut(l, "listening on ")
		if !ok {
			t.Fatalf("first line %q", l)
		}
		base = addr
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(testkit.Deadline):
		t.Fatal("serve did not start")
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	do := func(method, path, body string) response {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{code: resp.StatusCode, header: resp.Header, body: b}
	}
	if r := do(http.MethodGet, "/healthz", ""); r.code != http.StatusOK {
		t.Fatalf("healthz %d", r.code)
	}
	r := do(http.MethodPost, "/v1/batch", targetsBody(site.URL+"/x"))
	if r.code != http.StatusAccepted {
		t.Fatalf("submit %d %s", r.code, r.body)
	}
	id := r.json(t)["id"].(string)
	testkit.WaitFor(t, "the job", func() bool {
		return do(http.MethodGet, "/v1/batch/"+id, "").json(t)["status"] == "done"
	})
	if r := do(http.MethodGet, "/v1/batch/"+id+"/0", ""); !strings.Contains(string(r.body), `"content":"served"`) {
		t.Fatalf("target %s", r.body)
	}
	// The fetcher's options: honoured (grep, jq) or refused.
	r = do(http.MethodPost, "/v1/batch", `{"targets":[{"url":"`+site.URL+`/y","options":{"grep":"^nothing"}}]}`)
	if r.code != http.StatusAccepted {
		t.Fatalf("submit with grep: %d %s", r.code, r.body)
	}
	grepID := r.json(t)["id"].(string)
	if r := do(http.MethodGet, "/v1/batch/"+grepID+"?wait=10s", ""); r.json(t)["status"] != "done" {
		t.Fatalf("the grep job: %s", r.body)
	}
	if r := do(http.MethodGet, "/v1/batch/"+grepID+"/0", ""); !strings.Contains(string(r.body), `"content":""`) {
		t.Fatalf("grep kept lines it does not match: %s", r.body)
	}
	if r := do(http.MethodPost, "/v1/batch", `{"targets":[{"url":"`+site.URL+`/z","options":{"mode":"summary"}}]}`); r.code != http.StatusUnprocessableEntity {
		t.Fatalf("mode: %d %s", r.code, r.body)
	}
	transport.CloseIdleConnections()

	cancel()
	if err := testkit.Recv(t, done); err != nil || report(err, io.Discard) != exitOK {
		t.Fatalf("serve stopped with %v", err)
	}
	// The store was closed: it opens again, with the job in it.
	s, err := persistence.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if j, err := s.Job(id); err != nil || j.Status != persistence.StatusDone {
		t.Fatalf("stored job %+v %v", j, err)
	}
	l := logs.String()
	if !strings.Contains(l, "stopped") || strings.Contains(l, "127.0.0.1:"+strings.TrimPrefix(site.URL, "http://127.0.0.1:")) || strings.Contains(l, "alice-key") {
		t.Fatalf("logs:\n%s", l)
	}
}

// TestServe_FlagBounds: every number and duration flag of serve is checked
// before anything starts: out of bounds is a usage error (exit 2) that
// names the flag and its allowed range, and creates nothing.
func TestServe_FlagBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"workers", "0", "--workers must be 1 or 2 (got 0)"},
		{"workers", "3", "--workers must be 1 or 2 (got 3)"},
		{"workers", "-1", "--workers must be 1 or 2 (got -1)"},
		{"targets-per-job", "0", "--targets-per-job must be 1 to 65535 (got 0)"},
		{"targets-per-job", "65536", "--targets-per-job must be 1 to 65535 (got 65536)"},
		{"jobs-per-caller", "0", "--jobs-per-caller must be at least 1 (got 0)"},
		{"jobs-total", "-2", "--jobs-total must be at least 1 (got -2)"},
		{"max-bytes", "0", "--max-bytes must be at least 1 (bytes) (got 0)"},
		{"max-body", "0", "--max-body must be 1 to 16777216 (16 MiB) (got 0)"},
		{"max-body", "16777217", "--max-body must be 1 to 16777216 (16 MiB) (got 16777217)"},
		{"filter-memory", "1000000", "--filter-memory must be at least 33554432 (32 MiB) (got 1000000)"},
		{"max-answer-bytes", "0", "--max-answer-bytes must be at least 1 (bytes) (got 0)"},
		{"ttl", "0s", "--ttl must be a positive duration such as 24h (got 0s)"},
		{"retry-wait", "-1s", "--retry-wait must be a positive duration such as 2s (got -1s)"},
		{"retry-for", "0s", "--retry-for must be a positive duration such as 10m (got 0s)"},
		{"fetch-timeout", "-1s", "--fetch-timeout must be a positive duration such as 3m30s (got -1s)"},
		{"ui-session", "0s", "--ui-session must be a positive duration such as 12h (got 0s)"},
		{"log-level", "loud", `--log-level must be debug, info, warn or error (got "loud")`},
		{"workers", "two", `invalid value "two" for flag -workers`},
		{"addr", "nowhere", `--addr "nowhere" is not an address to listen on`},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			_, _, err := run(t, "serve", "--keys", keys, "--data", data, "--addr", "127.0.0.1:0", "--"+tc.flag, tc.value)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
			var msg bytes.Buffer
			if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), `"siftbatch serve --help"`) {
				t.Fatalf("exit %d, %q", code, msg.String())
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("serve created --data before refusing its flags")
			}
		})
	}
	// Within bounds, at both ends: serve starts, and stops at once (its
	// context is done).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	if err := Run(ctx, []string{"serve", "--keys", keys, "--data", "", "--addr", "127.0.0.1:0", "--workers", "2", "--max-body", "16777216",
		"--targets-per-job", "1", "--ttl", "1ns", "--max-answer-bytes", "1"}, &out, &errOut); err != nil {
		t.Fatalf("bounds: %v\n%s", err, errOut.String())
	}
}

// TestServe_PortInUse: a port in use is one line with a hint, exit 1, and
// nothing created: no store, no runner (no log line).
func TestServe_PortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	_, stderr, err := run(t, "serve", "--keys", keys, "--data", data, "--addr", ln.Addr().String())
	var msg bytes.Buffer
	if code := report(err, &msg); code != exitError {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	want := "siftbatch: cannot listen on " + ln.Addr().String() + ": the port is in use (another serve?); stop it, or pick another port with --addr\n"
	if msg.String() != want {
		t.Fatalf("printed %q, want %q", msg.String(), want)
	}
	if stderr != "" {
		t.Fatalf("logged %q before refusing", stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("serve created --data before it could listen")
	}
}

func TestServe_StoreInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	holdStoreInChild(t, data)
	_, _, err := run(t, "serve", "--addr", "127.0.0.1:0", "--data", data, "--keys", keys)
	if !errors.Is(err, persistence.ErrInUse) {
		t.Fatalf("got %v, want ErrInUse", err)
	}
}
