package cluster_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestCluster_EndWaitsEndsForwardedWaits: the asking node's EndWaits ends
// a long-poll it forwarded, with the job as it stands, as it ends its own,
// and has later ones answer at once: none holds up its graceful stop. The
// holder's answer ends too.
func TestCluster_EndWaitsEndsForwardedWaits(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	id := submit(t, a, "alice-key", "https://example.com/hold")
	waitUntil(t, "the job runs", func() bool { j, _ := a.runner.Job(id); return j.Status == "running" })
	_, _, asItStands := do(t, a, "GET", "/v1/batch/"+id, "alice-key", "")

	type answer struct {
		code int
		body []byte
		err  error
	}
	wait := func() <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/v1/batch/"+id+"?wait=50s", nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			res, err := b.srv.Client().Do(req)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			ch <- answer{res.StatusCode, body, err}
		}()
		return ch
	}
	check := func(what string, ch <-chan answer) {
		t.Helper()
		select {
		case w := <-ch:
			if w.err != nil || w.code != http.StatusOK || !bytes.Equal(w.body, asItStands) {
				t.Errorf("%s: %d %s %v; want 200 %s", what, w.code, w.body, w.err, asItStands)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer 10s after EndWaits", what)
		}
	}
	pending := wait()
	waitUntil(t, "the wait is under way on a", func() bool { return goroutinesIn(holderAnswering) == 1 })
	b.api.EndWaits()
	check("the wait under way", pending)
	check("a wait after EndWaits", wait())
	waitUntil(t, "a's answers have ended", func() bool { return goroutinesIn(holderAnswering) == 0 })
}
