package cluster_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCluster_EndWaitsAnswersForwardedWait: a long-poll forwarded to the
// job's node answers at once, with the job as it stands, once the asking
// node's EndWaits is called (a graceful stop); other requests are not
// affected: a cancel after it is done once.
func TestCluster_EndWaitsAnswersForwardedWait(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	id := submit(t, a, "alice-key", "https://example.com/hold")
	if code, _, body := do(t, b, "GET", "/v1/batch/"+id, "alice-key", ""); code != http.StatusOK {
		t.Fatalf("GET on b: %d %s", code, body)
	}

	type answer struct {
		code int
		body string
		err  error
	}
	waited := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", b.srv.URL+"/v1/batch/"+id+"?wait=60s", nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		res, err := b.srv.Client().Do(req)
		if err != nil {
			waited <- answer{err: err}
			return
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		waited <- answer{res.StatusCode, string(body), err}
	}()
	b.node.EndWaits() // the wait, pending or not yet forwarded, answers at once
	select {
	case w := <-waited:
		if w.err != nil || w.code != http.StatusOK || !strings.Contains(w.body, `"status":"`) || strings.Contains(w.body, `"status":"cancelled"`) {
			t.Fatalf("the wait on b after EndWaits: %d %s %v", w.code, w.body, w.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the wait on b did not end with EndWaits")
	}
	// a's answer to the wait has ended (released, not left to time out), and
	// a wait forwarded later answers at once.
	waitUntil(t, "a's answers have ended", func() bool { return goroutinesIn(holderAnswering) == 0 })
	start := time.Now()
	if code, _, body := do(t, b, "GET", "/v1/batch/"+id+"?wait=60s", "alice-key", ""); code != http.StatusOK || time.Since(start) > 10*time.Second {
		t.Fatalf("a wait on b after EndWaits: %d %s after %v", code, body, time.Since(start))
	}
	code, _, body := do(t, b, "DELETE", "/v1/batch/"+id, "alice-key", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"cancelled":true`) {
		t.Fatalf("cancel on b after EndWaits: %d %s", code, body)
	}
}
