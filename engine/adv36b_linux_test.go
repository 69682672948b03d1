package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestAdv36_EngineFullDisk (adversarial, branch adv36b, issue 36): an
// embedder's view of a full disk, on a real tmpfs another process fills
// below the reserve (16 MiB left) or to the last byte, with every hook
// panicking. Submit returns an error that errors.Is ErrDiskFull; Disk
// says Full; a running job's Cancel returns (within the deadline) and
// a true reads cancelled, also after a reopen; another held job goes on
// by itself once the filler is removed; Lookup and Result answer
// throughout. Both durabilities.
//
// What it shows: fails on main 5c04c99 with DurabilitySync (Cancel does
// not return within 30 s; it returns true once the filler is removed);
// passes with i36d (Cancel returns false at once).
func TestAdv36_EngineFullDisk(t *testing.T) {
	testkit.Long(t)
	for _, durability := range []engine.Durability{engine.DurabilityProcess, engine.DurabilitySync} {
		for _, leave := range []int64{16 << 20, 0} {
			t.Run(fmt.Sprintf("durability=%d/leave=%d", durability, leave), func(t *testing.T) {
				mnt := testkit.MountTmpfs(t, 160<<20)
				dir := filepath.Join(mnt, "store")
				release := make(chan struct{})
				started := make(chan string, 16)
				fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
					started <- tg.URL
					if strings.Contains(tg.URL, "hold") {
						select {
						case <-release:
						case <-ctx.Done():
							return engine.Result{}, ctx.Err()
						}
					}
					return engine.Result{Content: strings.Repeat("x", 300_000) + tg.URL}, nil
				}
				boom := func() { panic("hook panics while the disk is full") }
				hooks := engine.Hooks{
					Job:        func(string) { boom() },
					Target:     func(error, time.Duration, int) { boom() },
					JobSeconds: func(time.Duration) { boom() },
					Depth:      func(int) { boom() },
					Inflight:   func(int) { boom() },
				}
				cfg := engine.Config{Hooks: hooks, Durability: durability, JobsPerCaller: 4, RetryWait: 100 * time.Millisecond}
				r, err := engine.Open(dir, fetch, cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				closed := false
				t.Cleanup(func() {
					if !closed {
						r.Close()
					}
				})
				ctx := context.Background()
				alice := &engine.Caller{Name: "alice"}
				doneID, _, err := r.Submit(ctx, alice, "", []engine.Target{{URL: "https://a.example/1"}, {URL: "https://a.example/2"}})
				if err != nil {
					t.Fatal(err)
				}
				if j, err := r.Wait(ctx, doneID); err != nil || j.Status != "done" {
					t.Fatalf("first job: %+v %v", j, err)
				}
				// Two running jobs, each on a held first target.
				cancelID, _, err := r.Submit(ctx, &engine.Caller{Name: "bob"}, "", []engine.Target{{URL: "https://b.example/hold"}, {URL: "https://b.example/2"}})
				if err != nil {
					t.Fatal(err)
				}
				heldID, _, err := r.Submit(ctx, &engine.Caller{Name: "carol"}, "", []engine.Target{{URL: "https://c.example/hold"}, {URL: "https://c.example/2"}})
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					testkit.Recv(t, started)
				}
				var filler string
				if leave == 0 {
					filler = testkit.FillDisk(t, mnt, 0)
				} else {
					filler = testkit.FillDisk(t, mnt, leave)
				}
				testkit.WaitFor(t, "Disk to say Full", func() bool { return r.Disk().Full })
				_, _, err = r.Submit(ctx, alice, "", []engine.Target{{URL: "https://a.example/new"}})
				if !errors.Is(err, engine.ErrDiskFull) {
					t.Errorf("Submit on a full disk: %v (want errors.Is ErrDiskFull)", err)
				}
				cancelled := make(chan bool, 1)
				go func() { cancelled <- r.Cancel(cancelID) }()
				var ok bool
				select {
				case ok = <-cancelled:
				case <-time.After(testkit.Deadline):
					t.Errorf("Cancel on a full disk (leave %d) has not returned after %s", leave, testkit.Deadline)
					close(release)
					if err := os.Remove(filler); err != nil {
						t.Fatal(err)
					}
					select {
					case ok = <-cancelled:
						t.Logf("Cancel returned %v once the filler was removed", ok)
					case <-time.After(testkit.Deadline):
						t.Fatalf("Cancel has not returned %s after room returned either", testkit.Deadline)
					}
					return
				}
				t.Logf("Cancel on a full disk (leave %d): %v", leave, ok)
				if ok {
					if j, found := r.Job(cancelID); !found || j.Status != "cancelled" {
						t.Errorf("Cancel true on a full disk, the job reads %+v %v", j, found)
					}
				}
				if j, err := r.Lookup(doneID); err != nil || j.Status != "done" {
					t.Errorf("Lookup on a full disk: %+v %v", j, err)
				}
				if res, found := r.Result(doneID, 1); !found || !strings.HasSuffix(res.Content, "https://a.example/2") {
					t.Errorf("Result on a full disk: found=%v", found)
				}
				close(release) // the held fetches return; their results meet the full disk
				if err := r.Err(); err != nil {
					t.Fatalf("runner stopped on a full disk: %v", err)
				}
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
				j, err := r.Wait(ctx, heldID)
				if err != nil || j.Status != "done" {
					t.Errorf("the held job once room returned: %+v %v (want done, by itself)", j, err)
				}
				if j, err := r.Wait(ctx, cancelID); err != nil || (ok && j.Status != "cancelled") {
					t.Errorf("the cancelled job once room returned: %+v %v", j, err)
				}
				if n := r.HookPanics(); n == 0 {
					t.Errorf("no hook panic counted: the hooks did not run")
				}
				r.Close()
				closed = true
				r2, err := engine.Open(dir, fetch, cfg, nil)
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				defer r2.Close()
				if ok {
					if j, found := r2.Job(cancelID); !found || j.Status != "cancelled" {
						t.Errorf("Cancel true on a full disk, after a reopen the job reads %+v %v", j, found)
					}
				}
				if j, found := r2.Job(heldID); !found || j.Status != "done" {
					t.Errorf("the held job after a reopen: %+v %v", j, found)
				}
			})
		}
	}
}
