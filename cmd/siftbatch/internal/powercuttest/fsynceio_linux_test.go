package powercuttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// serveDiedOfFault fails the test if serve's log shows it died of a fault.
func serveDiedOfFault(t *testing.T, log string) {
	t.Helper()
	for _, s := range []string{"fatal error", "panic:", "SIGBUS", "unexpected fault address"} {
		if strings.Contains(log, s) {
			t.Fatalf("serve died (%q):\n%s", s, tail(log, 3000))
		}
	}
}

// TestServe_FsyncEIOLosesNoAcknowledgedJob: in durable mode, a fraction of every
// fsync (files and directories) fails with EIO (its pages lost, as Linux
// loses them) while one caller submits jobs and waits for them. Every 202
// and every target read done must survive a power cut that follows once
// the faults stop; the process lives throughout; the store opens.
func TestServe_FsyncEIOLosesNoAcknowledgedJob(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, seed := range []int64{35001, 35002, 35003} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := faultHarness(t, true)
			h.mount(t, seed)
			h.start(t)
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			h.fs.FailFsyncs(0.2)
			type acked struct {
				id   string
				seen Reading
			}
			var jobs []acked
			refused := 0
			for i := range 12 {
				var targets []map[string]string
				for _, size := range []int{3000, 70000, 500}[:1+i%3] {
					targets = append(targets, map[string]string{"url": fmt.Sprintf("%s/p/%d/%d/1", h.site.URL, h.page.Add(1), size)})
				}
				body, _ := json.Marshal(map[string]any{"targets": targets})
				code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, string(body))
				if err != nil || code != http.StatusAccepted {
					refused++
					t.Logf("submit %d refused: %d %v %.200s", i, code, err, out)
					continue
				}
				var a struct{ ID string }
				must(t, json.Unmarshal(out, &a))
				var last Reading
				for range 20 {
					code, r, err := h.read(c, faultKey, a.ID)
					if err != nil || code != http.StatusOK {
						t.Errorf("read %s under fsync faults: %d %v", a.ID, code, err)
						break
					}
					last = r
					if r.Status != "queued" && r.Status != "running" {
						break
					}
					time.Sleep(30 * time.Millisecond) // polling across processes: no signal to wait on
				}
				jobs = append(jobs, acked{a.ID, last})
			}
			h.fs.FailFsyncs(0)
			serveDiedOfFault(t, h.serve.stderr.String())
			st := h.fs.Stats()
			t.Logf("%d acknowledged, %d refused; fs %+v", len(jobs), refused, st)
			// the faults are over: the runner must go on by itself; wait for every job to end
			serve := h.serve
			t.Cleanup(func() {
				if t.Failed() {
					_, out, _ := call(c, http.MethodGet, serve.base+"/v1/batch", faultKey, "")
					t.Logf("jobs: %.1500s\nserve's warnings:\n%s", out, tail(warnings(serve.stderr.String()), 3000))
				}
			})
			lost := 0
			for _, j := range jobs {
				code, r, err := h.read(c, faultKey, j.id)
				if err == nil && code == http.StatusNotFound {
					lost++
					t.Errorf("acknowledged job %s reads 404 with the power still on, after the fsync faults (seed %d); it read %s with %d done before", j.id, seed, j.seen.Status, len(j.seen.Done))
					continue
				}
				if r.Status == "queued" || r.Status == "running" {
					r = faultWaitDone(t, h, c, j.id)
				}
				if r.Status == "failed" {
					t.Logf("job %s failed after the faults (allowed: its error names the cause)", j.id)
				}
			}
			if lost > 0 {
				t.Fatalf("%d of %d acknowledged jobs lost without a power cut (seed %d)", lost, len(jobs), seed)
			}
			faultCut(t, h, powercut.DropAll)
			h.mount(t, seed+100)
			// The cut may follow a MANIFEST sync that failed under the
			// faults: the store lists the tables its hole hides at start.
			h.start(t)
			if l := grepLines(h.serve.stderr.String(), "relisted_tables"); l != "" {
				t.Logf("the store's MANIFEST had a hole: %s", l)
			}
			for _, j := range jobs {
				got := h.readJob(t, c, Job{ID: j.id, Key: faultKey})
				if got.Code != http.StatusOK {
					t.Errorf("acknowledged job %s reads %d after the cut (seed %d)", j.id, got.Code, seed)
					continue
				}
				for i, s := range j.seen.Done {
					if got.Done[i] != s {
						t.Errorf("job %s target %d read done before the cut, not after (seed %d)", j.id, i, seed)
					}
				}
				if got.Status == "queued" || got.Status == "running" {
					// live after the restart is fine only if it goes on by itself
					if r := faultWaitDone(t, h, c, j.id); r.Status == "queued" || r.Status == "running" {
						t.Errorf("job %s stays live", j.id)
					}
				}
			}
			serveDiedOfFault(t, h.serve.stderr.String())
			h.stop(t)
			must(t, h.fs.Unmount())
		})
	}
}
