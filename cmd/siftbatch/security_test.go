package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// bigFetch succeeds with a 256 KiB page: a job of such targets is costly to
// read, so a read of its targets shows in an answer's timing.
func bigFetch(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	return engine.Result{Content: strings.Repeat("x", 256<<10), Meta: map[string]any{"status": 200}}, nil
}

// sameAnswer fails unless two answers have the same code, headers (but
// Date) and body.
func sameAnswer(t *testing.T, what string, a, b response) {
	t.Helper()
	ha, hb := a.header.Clone(), b.header.Clone()
	ha.Del("Date")
	hb.Del("Date")
	if a.code != b.code || !bytes.Equal(a.body, b.body) || !headersEqual(ha, hb) {
		t.Errorf("%s: answers differ:\n%d %v %s\n%d %v %s", what, a.code, ha, a.body, b.code, hb, b.body)
	}
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		if !slices.Equal(va, b[k]) {
			return false
		}
	}
	return true
}

// TestAPI_NotYoursIsMissing: for another caller, a job is answered exactly
// as a job that does not exist, byte for byte and header for header, for
// every route that names a job, whatever state the job is in.
func TestAPI_NotYoursIsMissing(t *testing.T) {
	b := setupAPI(t)
	done := b.submit(t, "alice-key", "https://example.com/a", "https://example.com/fail")
	b.waitTerminal(t, done)
	live := b.submit(t, "carol-key", holdURL, "https://example.com/b")
	b.waitRunning(t, live)

	for _, id := range []string{done, live} {
		for _, rt := range []struct{ method, path string }{
			{http.MethodGet, "/v1/batch/%s"},
			{http.MethodGet, "/v1/batch/%s?results=1"},
			{http.MethodGet, "/v1/batch/%s/0"},
			{http.MethodGet, "/v1/batch/%s/1"},
			{http.MethodGet, "/v1/batch/%s/7"},
			{http.MethodGet, "/v1/batch/%s/x"},
			{http.MethodDelete, "/v1/batch/%s"},
		} {
			notYours := b.do(t, rt.method, strings.Replace(rt.path, "%s", id, 1), "bob-key", nil)
			missing := b.do(t, rt.method, strings.Replace(rt.path, "%s", missingID, 1), "bob-key", nil)
			wantError(t, notYours, http.StatusNotFound, "job not found")
			sameAnswer(t, rt.method+" "+rt.path, notYours, missing)
		}
	}
	// bob's DELETE did not cancel carol's job.
	if j, _, _ := b.runner.Status(live); j.Status != "running" {
		t.Fatalf("carol's job is %s after bob's DELETE", j.Status)
	}
}

// TestAPI_NotYoursTiming: "not yours" must not take longer than "missing".
//
// It compares wall time, because the leak being tested is wall time, but
// only robustly: the two requests alternate (so load, GC and CPU frequency
// hit both alike), each is served in-process (no network noise), and the
// test compares the medians of 101 requests each with a factor of 3. The
// job read is made costly (4 targets of 256 KiB each): an answer that reads
// the targets takes milliseconds, one that does not takes microseconds, so
// a leak is a factor of hundreds and noise is far below 3.
// TestAPI_NotYoursSameWork checks the same property exactly, by counting
// the reads each answer makes.
func TestAPI_NotYoursTiming(t *testing.T) {
	b := setupAPIWith(t, bigFetch)
	id := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3", "https://example.com/4")
	if j := b.waitTerminal(t, id); j.Status != "done" {
		t.Fatalf("job %s, want done", j.Status)
	}

	serve := func(path string) time.Duration {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer bob-key")
		rec := httptest.NewRecorder()
		start := time.Now()
		b.handler.ServeHTTP(rec, req)
		d := time.Since(start)
		if rec.Code != http.StatusNotFound {
			t.Fatalf("GET %s: %d", path, rec.Code)
		}
		return d
	}
	const n = 101
	var notYours, missing []time.Duration
	for i := 0; i < n; i++ {
		notYours = append(notYours, serve("/v1/batch/"+id+"?results=1"))
		missing = append(missing, serve("/v1/batch/"+missingID+"?results=1"))
	}
	slices.Sort(notYours)
	slices.Sort(missing)
	mn, mm := notYours[n/2], missing[n/2]
	t.Logf("median not yours %s, missing %s", mn, mm)
	if mn > 3*mm || mm > 3*mn {
		t.Fatalf("not yours (median %s) and missing (median %s) can be told apart by timing", mn, mm)
	}
}

// countingRunner and countingOwners record each call the API makes, so
// that a test can compare the work two answers did.
type countingRunner struct {
	jobRunner
	calls *[]string
}

func (c countingRunner) Submit(ctx context.Context, ca *engine.Caller, class string, ts []engine.Target) (string, bool, error) {
	*c.calls = append(*c.calls, "Submit")
	return c.jobRunner.Submit(ctx, ca, class, ts)
}

func (c countingRunner) Cancel(id string) bool {
	*c.calls = append(*c.calls, "Cancel")
	return c.jobRunner.Cancel(id)
}

func (c countingRunner) Status(id string) (engine.Job, []engine.TargetStatus, bool) {
	*c.calls = append(*c.calls, "Status")
	return c.jobRunner.Status(id)
}

func (c countingRunner) Touch(id string) {
	*c.calls = append(*c.calls, "Touch")
	c.jobRunner.Touch(id)
}

type countingOwners struct {
	jobOwners
	calls *[]string
}

func (c countingOwners) Job(id string) (persistence.JobRecord, error) {
	*c.calls = append(*c.calls, "Job")
	return c.jobOwners.Job(id)
}

// TestAPI_NotYoursSameWork: "not yours" and "missing" make exactly the same
// calls into the runner and the store (one read of a summary row, no read
// of targets, no Touch, no Cancel). It counts calls instead of timing them:
// the same calls on rows of the same size cost the same, and a count is
// exact where a clock is noisy. Requests are served in-process, one at a
// time, so the call log needs no lock.
func TestAPI_NotYoursSameWork(t *testing.T) {
	b := setupAPI(t)
	id := b.submit(t, "alice-key", "https://example.com/a", "https://example.com/b")
	b.waitTerminal(t, id)
	var calls []string
	b.api.runner = countingRunner{jobRunner: b.api.runner, calls: &calls}
	b.api.owners = countingOwners{jobOwners: b.api.owners, calls: &calls}
	serve := func(method, path, key string) []string {
		calls = nil
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		b.handler.ServeHTTP(httptest.NewRecorder(), req)
		return slices.Clone(calls)
	}
	for _, rt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/batch/%s"},
		{http.MethodGet, "/v1/batch/%s?results=1"},
		{http.MethodGet, "/v1/batch/%s/0"},
		{http.MethodGet, "/v1/batch/%s/9"},
		{http.MethodDelete, "/v1/batch/%s"},
	} {
		notYours := serve(rt.method, strings.Replace(rt.path, "%s", id, 1), "bob-key")
		missing := serve(rt.method, strings.Replace(rt.path, "%s", missingID, 1), "bob-key")
		if !slices.Equal(notYours, []string{"Job"}) || !slices.Equal(missing, []string{"Job"}) {
			t.Errorf("%s %s: not yours called %v, missing %v; want [Job] both", rt.method, rt.path, notYours, missing)
		}
	}
	// The owner's read is what reads the targets.
	if got := serve(http.MethodGet, "/v1/batch/"+id, "alice-key"); !slices.Equal(got, []string{"Job", "Status", "Touch"}) {
		t.Errorf("owner's GET called %v", got)
	}
}

// TestAPI_IDSpellings: a job is named by its id only as the runner wrote
// it, 32 lowercase hex digits, and a target by its index in plain decimal.
// Every other spelling is a job (or target) that does not exist, answered
// like a missing one.
func TestAPI_IDSpellings(t *testing.T) {
	b := setupAPI(t)
	id := b.submit(t, "alice-key", "https://example.com/a", "https://example.com/b")
	b.waitTerminal(t, id)
	missing := b.do(t, http.MethodGet, "/v1/batch/"+missingID, "alice-key", nil)
	for _, other := range []string{
		strings.ToUpper(id), upperOne(id), id[:31], id + "0", id + "%20", "%20" + id,
		id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:], "0x" + id, id + "%00",
		id + ";", id + ".", "{" + id + "}",
	} {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			r := b.do(t, method, "/v1/batch/"+other, "alice-key", nil)
			sameAnswer(t, method+" "+other, r, b.do(t, method, "/v1/batch/"+missingID, "alice-key", nil))
		}
		sameAnswer(t, "GET "+other+"/0", b.do(t, http.MethodGet, "/v1/batch/"+other+"/0", "alice-key", nil), missing)
	}
	wantCode(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", "alice-key", nil), http.StatusOK)
	for _, idx := range []string{"+1", "01", "1.0", "1e0", "0x1", "%201", "1%20", "-0", "2", "99999999999999999999"} {
		wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id+"/"+idx, "alice-key", nil), http.StatusNotFound, "target not found")
	}
}

// upperOne returns id with its first letter in upper case.
func upperOne(id string) string {
	i := strings.IndexAny(id, "abcdef")
	if i < 0 {
		return "g" + id[1:] // all digits (one chance in 10^11): still not the id
	}
	return id[:i] + strings.ToUpper(id[i:i+1]) + id[i+1:]
}
