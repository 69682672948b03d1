package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
)

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
// as a job that does not exist, byte for byte and header for header, on
// every route that names a job (a long-poll and a bad wait included),
// whatever state the job is in, and the answer holds nothing of the job;
// the other caller's DELETE cancels nothing; other spellings of the id
// never reach the job. That such answers do the same work, and never
// wait, TestAPI_NotYoursSameWork checks by counting the runner's calls.
func TestAPI_NotYoursIsMissing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.submit(t, "carol-key", "https://example.com/c", "https://example.com/fail")
	b.waitTerminal(t, done)
	live := b.submit(t, "alice-key", holdURL, "https://example.com/two")
	b.waitRunning(t, live)
	for _, id := range []string{done, live} {
		for _, rt := range []struct{ method, path string }{
			{http.MethodGet, "/v1/batch/%s"},
			{http.MethodGet, "/v1/batch/%s?results=1"},
			{http.MethodGet, "/v1/batch/%s?wait=20s"},
			{http.MethodGet, "/v1/batch/%s?wait=20s&results=1"},
			{http.MethodGet, "/v1/batch/%s?wait=bogus"},
			{http.MethodGet, "/v1/batch/%s?wait=61s"},
			{http.MethodGet, "/v1/batch/%s/0"},
			{http.MethodGet, "/v1/batch/%s/1"},
			{http.MethodGet, "/v1/batch/%s/7"},
			{http.MethodGet, "/v1/batch/%s/-1"},
			{http.MethodGet, "/v1/batch/%s/x"},
			{http.MethodDelete, "/v1/batch/%s"},
		} {
			notYours := b.do(t, rt.method, strings.Replace(rt.path, "%s", id, 1), "bob-key", nil)
			missing := b.do(t, rt.method, strings.Replace(rt.path, "%s", missingID, 1), "bob-key", nil)
			wantError(t, notYours, http.StatusNotFound, "job not found")
			sameAnswer(t, rt.method+" "+rt.path, notYours, missing)
			wantNoLeak(t, "bob "+rt.method+" "+rt.path, notYours.body, "example.com", id)
		}
	}
	// Bob's DELETE cancelled nothing; the jobs are as they were.
	if j, _, _ := b.Runner.Status(live); j.Status != engine.StatusRunning {
		t.Fatalf("alice's job is %s after bob's DELETE", j.Status)
	}
	if j, _ := b.Runner.Job(done); j.Status != engine.StatusPartial {
		t.Fatalf("carol's job after bob's DELETE: %+v", j)
	}
	// Other spellings of alice's id never reach it for bob, and answer as
	// a missing id does.
	spellings := []string{
		strings.ToUpper(live), live + "%20", "%20" + live, live + "%00", live[:31], live + "0",
		"%" + fmt.Sprintf("%02x", live[0]) + live[1:], "./" + live, live + "/.", live + "%2F0",
	}
	ref := b.do(t, http.MethodGet, "/v1/batch/"+missingID, "bob-key", nil)
	for _, s := range spellings {
		r := b.do(t, http.MethodGet, "/v1/batch/"+s, "bob-key", nil)
		if r.code == http.StatusOK || (r.code == http.StatusNotFound && !bytes.Equal(r.body, ref.body) && !bytes.Contains(r.body, []byte("not found"))) {
			t.Errorf("bob GET %s: %d %s", s, r.code, r.body)
		}
		r = b.do(t, http.MethodDelete, "/v1/batch/"+s, "bob-key", nil)
		if r.code == http.StatusOK {
			t.Errorf("bob DELETE %s: %d %s", s, r.code, r.body)
		}
	}
	if j, _ := b.Runner.Job(live); !engine.IsLive(j.Status) {
		t.Fatalf("alice's live job after bob's spellings: %+v", j)
	}
}

// TestAPI_IDSpellings: a job is named by its id only as the runner wrote
// it, 32 lowercase hex digits, and a target by its index in plain decimal.
// Every other spelling is a job (or target) that does not exist, answered
// like a missing one.
func TestAPI_IDSpellings(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
