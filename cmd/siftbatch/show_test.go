package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

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

// TestShow_ShortIDs: show takes the start of an id (4 digits or more, any
// case): of its short id (its first 8 digits, or digits 9 to 16 for a job
// of a cluster node whose tag the store holds), or of the whole id; a start more than one job has lists them, newest first, and
// fails; none is "no job".
func TestShow_ShortIDs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := persistence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{
		"abcd0000000000000000000000000001",
		"abcd1000000000000000000000000002",
		"5e1f7a90c0ffee000000000000000003", // a node's: its short id is c0ffee00
	}
	if err := store.PutNodeTag([4]byte{0x5e, 0x1f, 0x7a, 0x90}, "node-a"); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		j := persistence.JobRecord{ID: id, Caller: "alice", Status: persistence.StatusDone, TargetsTotal: 1, TargetsDone: 1,
			Created: int64(i+1) * 1e9, Lease: int64(i+1) * 1e9, Settled: true}
		j.Key[0] = byte(i)
		if err := store.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/" + id}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{
		"abcd0": ids[0], "ABCD1": ids[1], "abcd10000000": ids[1], ids[0]: ids[0],
		"c0ffee00": ids[2], "c0ff": ids[2], "5e1f7a90c0": ids[2],
	} {
		out, _, err := run(t, "show", "--data", dir, arg)
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		var job storedJobJSON
		if err := json.Unmarshal([]byte(out), &job); err != nil || job.ID != want {
			t.Fatalf("%s: %v %s, want %s", arg, err, job.ID, want)
		}
	}
	_, _, err = run(t, "show", "--data", dir, "abcd")
	if err == nil {
		t.Fatal("abcd: two jobs, no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "2 jobs") || strings.Index(msg, ids[1]) > strings.Index(msg, ids[0]) || !strings.Contains(msg, ids[0]) {
		t.Fatalf("abcd: %q, want both candidates, newest first", msg)
	}
	for _, arg := range []string{"ffff", "abc", "c0ffee001", "zzzz"} {
		if _, _, err := run(t, "show", "--data", dir, arg); err == nil || !strings.Contains(err.Error(), "no job") {
			t.Fatalf("%s: %v, want no job", arg, err)
		}
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
	req.Header.Set("Authorization", "Bearer alice-secret-key")
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

// TestShow_ShortIDOfAPlainStore: in a store of no cluster node (no node
// tag stored), a job's short id is its first 8 digits, as jobs and the
// dashboard show it: show opens the job by it, and another job whose
// digits 9 to 16 happen to be the same is not a candidate (its short id,
// as every list shows it, is another).
func TestShow_ShortIDOfAPlainStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := persistence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{
		"abcd1234000000000000000000000001", // short id abcd1234
		"77777777abcd12340000000000000002", // short id 77777777: no node tag is stored
	}
	for i, id := range ids {
		j := persistence.JobRecord{ID: id, Caller: "alice", Status: persistence.StatusDone, TargetsTotal: 1, TargetsDone: 1,
			Created: int64(i+1) * 1e9, Lease: int64(i+1) * 1e9, Settled: true}
		j.Key[0] = byte(i)
		if err := store.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/" + id}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if got := engine.ShortID(ids[1]); got != "77777777" {
		t.Fatalf("ShortID(%s) = %s: a tag of this process matches", ids[1], got)
	}
	out, _, err := run(t, "show", "--data", dir, engine.ShortID(ids[0]))
	if err != nil {
		t.Fatalf("show %s, the short id jobs lists: %v", engine.ShortID(ids[0]), err)
	}
	var job storedJobJSON
	if err := json.Unmarshal([]byte(out), &job); err != nil || job.ID != ids[0] {
		t.Fatalf("show %s: %v %s, want %s", engine.ShortID(ids[0]), err, job.ID, ids[0])
	}
}

// TestShowAndJobs_CountTargetsThatWillNotRun: a job a restart failed with
// 1 of 3 targets stored reads, in jobs, 1/3 stored, 0 failed, 2 not run;
// show gives each of the 2 a hint that says why it will not run, and
// prints options as they were given (a grep of "<h1>", not "\u003ch1\u003e").
func TestShowAndJobs_CountTargetsThatWillNotRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := persistence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const id = "feed0000000000000000000000000001"
	j := persistence.JobRecord{ID: id, Caller: "alice", Status: persistence.StatusFailed, Error: "restart", TargetsTotal: 3,
		Created: 1e9, Lease: 1e9, Settled: true}
	opts, err := json.Marshal(engine.Options{Grep: "<h1>"}) // as the engine stores them
	if err != nil {
		t.Fatal(err)
	}
	ts := []persistence.TargetRecord{{Idx: 0, URL: "https://example.com/a", Options: opts}, {Idx: 1, URL: "https://example.com/b"}, {Idx: 2, URL: "https://example.com/c"}}
	if err := store.CreateJob(&j, ts); err != nil {
		t.Fatal(err)
	}
	ts[0].Status, ts[0].Result, ts[0].Stored = persistence.TargetDone, []byte(`{"content":"x"}`), 2e9
	j.TargetsDone = 1
	if err := store.SaveTarget(&j, &ts[0]); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, "jobs", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "DONE/TOTAL  FAILED  NOT RUN") || !strings.Contains(lines[1], "1/3         0       2 ") {
		t.Fatalf("jobs: want 1/3 stored, 0 failed, 2 not run:\n%s", out)
	}

	out, _, err = run(t, "show", "--data", dir, id)
	if err != nil {
		t.Fatal(err)
	}
	var job storedJobJSON
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if job.Status != "failed" || job.TargetsDone != 1 || job.Targets[0].Hint != "" {
		t.Fatalf("show:\n%s", out)
	}
	for _, tg := range job.Targets[1:] {
		if tg.Status != "pending" || !strings.HasPrefix(tg.Hint, "not run: the server restarted") {
			t.Fatalf("show: target %d %s %q, want pending with a hint that it will not run:\n%s", tg.Idx, tg.Status, tg.Hint, out)
		}
	}
	if !strings.Contains(out, `"grep": "<h1>"`) || strings.Contains(out, `\u003c`) {
		t.Fatalf("show escapes HTML in options:\n%s", out)
	}
}
