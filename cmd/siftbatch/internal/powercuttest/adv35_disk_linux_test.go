package powercuttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// Two of branch adv35's tests of issue 36 (written adversarially), taken
// on branch i36d with the changes their comments name. adv35's other two
// are main's already: TestAdv35_DiskReserveFlagValues as
// TestServe_DiskReserveBeyondDisk, TestAdv35_RandomFsyncEIOThenCut as
// TestServe_FsyncEIOLosesNoAcknowledgedJob.

// adv35Dead fails the test if serve's log shows it died of a fault.
func adv35Dead(t *testing.T, log string) {
	t.Helper()
	for _, s := range []string{"fatal error", "panic:", "SIGBUS", "unexpected fault address"} {
		if strings.Contains(log, s) {
			t.Fatalf("serve died (%q):\n%s", s, tail(log, 3000))
		}
	}
}

// TestAdv35_RestartOnFullDiskAfterCut: issue 36 asks serve to start on a
// full disk after a crash or power cut too, not only after a clean stop
// (TestDiskFault_RestartOnFullDisk covers the clean stop). The acknowledged
// job must read back whole, a submit must answer 507, /healthz must say
// "disk full", and once room returns a submit is accepted and runs.
// (i36d: the default mode too, after a crash; and a job the crash left
// running reads failed "restart" while the disk is full, as the restart
// fails it in the store once there is room.)
func TestAdv35_RestartOnFullDiskAfterCut(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	const kill = powercut.CutMode(-1) // a crash of serve (SIGKILL), the power stays on
	type round struct {
		durable bool
		mode    powercut.CutMode
	}
	// The default mode promises nothing across a power cut: a crash only.
	rounds := []round{{true, kill}, {true, powercut.DropAll}, {true, powercut.DropRandom}, {true, powercut.TearLast}, {false, kill}}
	for _, rd := range rounds {
		durable, mode := rd.durable, rd.mode
		t.Run(fmt.Sprintf("durable=%v/mode=%d", durable, mode), func(t *testing.T) {
			h := faultHarness(t, durable)
			fetched, release := faultGatedSite(t, h)
			defer close(release)
			h.mount(t, 3535+int64(mode))
			h.start(t)
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			id := faultSubmit(t, h, c, []int{3000, 70000, 200}, 2)
			want := faultWaitDone(t, h, c, id)
			if want.Status != "done" {
				t.Fatalf("job ended %s", want.Status)
			}
			live := faultSubmit(t, h, c, []int{3000, 3000}, gated)
			<-fetched // the job is running, its first target fetching, when serve dies
			if mode == kill {
				_ = h.serve.cmd.Process.Kill()
				<-h.serve.done
				must(t, h.fs.Unmount())
			} else {
				faultCut(t, h, mode)
			}

			h.mount(t, 3545+int64(mode))
			h.fs.SetWriteBudget(0)
			args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(h.mnt, "store"), "--keys", h.keys,
				"--allow-private"}
			if durable {
				args = append(args, "--durable")
			}
			p, ok := faultStart(t, args)
			adv35Dead(t, p.stderr.String())
			if !ok {
				t.Fatalf("serve does not start after a power cut on a full disk (seed %d): %s", h.fs.Seed(), tail(p.stderr.String(), 1500))
			}
			h.serve = p
			got := h.readJob(t, c, Job{ID: id, Key: faultKey})
			if got.Code != http.StatusOK || got.Status != "done" || len(got.Done) != len(want.Done) || len(got.Unreadable) != 0 {
				t.Errorf("read after the cut, disk full: %d %s, %d of %d targets, unreadable %v", got.Code, got.Status, len(got.Done), len(want.Done), got.Unreadable)
			}
			for i, s := range want.Done {
				if got.Done[i] != s {
					t.Errorf("target %d reads other content after the cut", i)
				}
			}
			liveCode, liveR, err := h.read(c, faultKey, live)
			if err != nil || liveCode != http.StatusOK || liveR.Status != "failed" {
				t.Errorf("the job the crash left running, disk full: %d %v %s (want 200 failed: it will not resume)", liveCode, err, liveR.Status)
			}
			body := fmt.Sprintf(`{"targets":[{"url":"%s/p/%d/3000/2"}]}`, h.site.URL, h.page.Add(1))
			code, out, err := call(c, http.MethodPost, p.base+"/v1/batch", faultKey, body)
			if err != nil || code != http.StatusInsufficientStorage {
				t.Errorf("submit while full after the cut: %d %v %.300s (want 507)", code, err, out)
			}
			code, out, err = call(c, http.MethodGet, p.base+"/healthz", "", "")
			if err != nil || code != http.StatusOK || !strings.Contains(string(out), "disk full") {
				t.Errorf("healthz while full after the cut: %d %v %.300s", code, err, out)
			}
			h.fs.SetWriteBudget(-1)
			back := time.Now()
			deadline := back.Add(testkit.Deadline)
			var nid string
			for nid == "" && time.Now().Before(deadline) {
				code, out, err = call(c, http.MethodPost, p.base+"/v1/batch", faultKey, body)
				if err == nil && code == http.StatusAccepted {
					var a struct{ ID string }
					must(t, json.Unmarshal(out, &a))
					nid = a.ID
					break
				}
				time.Sleep(50 * time.Millisecond) // the disk watch measures every second: no signal across processes
			}
			if nid == "" {
				t.Fatalf("room returned, submits still answer %d %v %.300s", code, err, out)
			}
			// A figure (docs/RELIABILITY.md), not asserted.
			t.Logf("room back -> first submit accepted (the store open for writing, the left jobs failed): %.2f s", time.Since(back).Seconds())
			if r := faultWaitDone(t, h, c, nid); r.Status != "done" {
				t.Errorf("job submitted once room returned ends %s", r.Status)
			}
			adv35Dead(t, p.stderr.String())
			h.stop(t)
			must(t, h.fs.Unmount())

			// The restart failed the job the crash left running in the store.
			h.mount(t, 3555+int64(mode))
			h.start(t)
			if code, r, err := h.read(c, faultKey, live); err != nil || code != http.StatusOK || r.Status != "failed" {
				t.Errorf("the job the crash left running, after a clean restart: %d %v %s", code, err, r.Status)
			}
			if !strings.Contains(p.stderr.String(), "failed the jobs a previous run left live, now that the disk has room") {
				t.Errorf("serve never failed the left job in its store:\n%s", tail(p.stderr.String(), 2000))
			}
			h.stop(t)
			must(t, h.fs.Unmount())
		})
	}
}

// TestAdv35_NoSpaceMidRunHeldAndCancel: the disk fills (ENOSPC from a
// byte budget, below the reserve check) while a job runs and another is
// live. Reads must never 404 or 5xx, the list and a cancel must work, no
// target fails for space, the process lives, the held job goes on by
// itself once room returns, and after a power cut every 202 reads back,
// the 200'd cancel reads cancelled, nothing reads live.
func TestAdv35_NoSpaceMidRunHeldAndCancel(t *testing.T) {
	testkit.Long(t)
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		durable bool
		budget  int64
	}{{true, 0}, {true, 5000}, {true, 70000}, {false, 0}} {
		durable, budget := tc.durable, tc.budget
		t.Run(fmt.Sprintf("durable=%v/budget=%d", durable, budget), func(t *testing.T) {
			h := faultHarness(t, durable)
			fetched, release := faultGatedSite(t, h)
			h.mount(t, 3600+budget)
			h.start(t)
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			run := faultSubmit(t, h, c, []int{70000, 3000, 70000, 3000}, gated)
			<-fetched
			other := faultSubmit(t, h, c, []int{3000, 3000}, gated) // its second target waits: the job stays live
			<-fetched                                               // both jobs are fetching, both wait for release
			h.fs.SetWriteBudget(budget)
			// statfs reports the budget: the disk watch must see the disk full
			deadline := time.Now().Add(testkit.Deadline)
			for {
				code, out, err := call(c, http.MethodGet, h.serve.base+"/healthz", "", "")
				if err == nil && code == http.StatusOK && strings.Contains(string(out), "disk full") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("healthz never said disk full: %d %v %.300s", code, err, out)
				}
				time.Sleep(50 * time.Millisecond) // the disk watch measures every second: no signal across processes
			}
			body := fmt.Sprintf(`{"targets":[{"url":"%s/p/%d/3000/2"}]}`, h.site.URL, h.page.Add(1))
			code, out, err := call(c, http.MethodPost, h.serve.base+"/v1/batch", faultKey, body)
			if err != nil || code != http.StatusInsufficientStorage || !strings.Contains(string(out), "hint") {
				t.Errorf("submit while full: %d %v %.300s (want 507 with a hint)", code, err, out)
			}
			close(release)
			// the fetched targets meet the full disk: they must be held, the jobs read
			for range 40 {
				for _, id := range []string{run, other} {
					code, r, err := h.read(c, faultKey, id)
					if err != nil || code != http.StatusOK {
						t.Fatalf("read %s while the disk is full: %d %v", id, code, err)
					}
					if r.Status == "failed" {
						t.Fatalf("job %s failed for a full disk (must be held)", id)
					}
				}
				time.Sleep(25 * time.Millisecond) // polling across processes: no signal to wait on
			}
			_, r0, _ := h.read(c, faultKey, run)
			_, o0, _ := h.read(c, faultKey, other)
			t.Logf("while full: run %s (%d done), other %s (%d done); fs %+v", r0.Status, len(r0.Done), o0.Status, len(o0.Done), h.fs.Stats())
			if durable && o0.Status == "done" {
				t.Errorf("a job's target was stored while statfs reported %d bytes free (below the reserve): not held", budget)
			}
			code, out, err = call(c, http.MethodGet, h.serve.base+"/v1/batch", faultKey, "")
			if err != nil || code != http.StatusOK {
				t.Errorf("list while full: %d %v %.300s", code, err, out)
			}
			type answer struct {
				code int
				out  []byte
				err  error
			}
			ans := make(chan answer, 1)
			lc := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{}}
			defer lc.CloseIdleConnections()
			go func() {
				code, out, err := call(lc, http.MethodDelete, h.serve.base+"/v1/batch/"+other, faultKey, "")
				ans <- answer{code, out, err}
			}()
			// i36d: the cancel must answer while the disk is still full
			// (the budget is lifted only after it): a failure deadline, no
			// wall-clock bound (adv35 asked for 30 s).
			var a answer
			select {
			case a = <-ans:
			case <-time.After(testkit.Deadline):
				t.Fatalf("cancel while full: no answer while the disk stays full (it must answer, not wait for room)")
			}
			adv35Dead(t, h.serve.stderr.String())
			t.Logf("cancel: %d %v %.200s", a.code, a.err, a.out)
			cancelled := a.err == nil && a.code == http.StatusOK
			// i36d: a durable serve acknowledges a cancel once it is synced;
			// with no room for a write it refuses it at once, 507 naming the
			// full disk, and nothing changes (adv35 asked for a 200 or a
			// hang-free answer: the issue allows either, see
			// docs/RELIABILITY.md).
			refused := durable && a.err == nil && a.code == http.StatusInsufficientStorage
			switch {
			case refused:
				if !strings.Contains(string(a.out), "disk full") {
					t.Errorf("cancel refused while full without naming the disk: %.300s", a.out)
				}
				if _, r, _ := h.read(c, faultKey, other); r.Status == "cancelled" {
					t.Errorf("cancel answered 507, job reads cancelled")
				}
			case a.err != nil || a.code != http.StatusOK && !(o0.Status == "done" && a.code == http.StatusConflict):
				t.Errorf("cancel while full: %d %v %.300s", a.code, a.err, a.out)
			}
			h.fs.SetWriteBudget(-1)
			back := time.Now()
			for deadline := back.Add(testkit.Deadline); ; {
				code, r, err := h.read(c, faultKey, run)
				if err == nil && code == http.StatusOK && len(r.Done) > len(r0.Done) {
					// A figure (docs/RELIABILITY.md), not asserted.
					t.Logf("room back -> first held target stored: %.2f s", time.Since(back).Seconds())
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("room back, and no held target of %s stored: %d %v %s", run, code, err, r.Status)
				}
				time.Sleep(10 * time.Millisecond) // polling across processes: no signal to wait on
			}
			if refused { // room again: the cancel goes through, or the job has ended
				code, out, err := call(lc, http.MethodDelete, h.serve.base+"/v1/batch/"+other, faultKey, "")
				for deadline := time.Now().Add(testkit.Deadline); err == nil && code == http.StatusInsufficientStorage && time.Now().Before(deadline); {
					time.Sleep(50 * time.Millisecond) // the disk watch measures every second: no signal across processes
					code, out, err = call(lc, http.MethodDelete, h.serve.base+"/v1/batch/"+other, faultKey, "")
				}
				t.Logf("the cancel again, room back: %d %v %.200s", code, err, out)
				cancelled = err == nil && code == http.StatusOK
				if err != nil || code != http.StatusOK && code != http.StatusConflict {
					t.Errorf("cancel once room returned: %d %v %.300s", code, err, out)
				}
			}
			r := faultWaitDone(t, h, c, run)
			if r.Status != "done" || len(r.Done) != 4 {
				t.Errorf("held job after room returned: %s, %d of 4 done", r.Status, len(r.Done))
			}
			adv35Dead(t, h.serve.stderr.String())
			if durable {
				faultCut(t, h, powercut.DropAll)
			} else { // the default mode promises nothing across a cut: a clean restart
				h.stop(t)
				must(t, h.fs.Unmount())
			}
			h.mount(t, 3700+budget)
			h.start(t)
			got := h.readJob(t, c, Job{ID: run, Key: faultKey})
			if got.Code != http.StatusOK || got.Status != "done" || len(got.Done) != 4 || len(got.Unreadable) != 0 {
				t.Errorf("after the cut: %d %s, %d of 4 done, unreadable %v (seed %d)", got.Code, got.Status, len(got.Done), got.Unreadable, 3600+budget)
			}
			for i, s := range r.Done {
				if got.Done[i] != s {
					t.Errorf("target %d reads other content after the cut", i)
				}
			}
			og := h.readJob(t, c, Job{ID: other, Key: faultKey})
			if og.Code != http.StatusOK {
				t.Errorf("acknowledged job %s reads %d after the cut", other, og.Code)
			}
			if cancelled && og.Status != "cancelled" {
				t.Errorf("cancel answered 200, job reads %s after the cut", og.Status)
			}
			h.stop(t)
			must(t, h.fs.Unmount())
		})
	}
}
