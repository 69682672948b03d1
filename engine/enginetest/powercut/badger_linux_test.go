//go:build linux

package powercut_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
)

// storeJobs (in a child process) writes n jobs from from of two targets
// each into the store in dir, each target's result big enough to go to
// the value log, and closes it.
func storeJobs(dir string, from, n int, durable bool) error {
	s, err := persistence.Open(dir)
	if err != nil {
		return err
	}
	if durable {
		if err := s.SetDurable(true); err != nil {
			return err
		}
	}
	for i := from; i < from+n; i++ {
		j := persistence.JobRecord{ID: fmt.Sprintf("%032x", i), Caller: "alice", Status: persistence.StatusQueued,
			TargetsTotal: 2, Created: time.Unix(1, 0).UnixNano()}
		j.Key[0], j.Key[1] = byte(i>>8), byte(i)
		if err := s.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: "http://a"}, {Idx: 1, URL: "http://b"}}); err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		for idx := range 2 {
			if err := s.SaveOutcome(j.ID, &persistence.TargetRecord{Idx: idx, URL: "http://a",
				Status: persistence.TargetDone, Result: result(i, idx), Stored: time.Unix(2, 0).UnixNano()}); err != nil {
				return fmt.Errorf("job %d target %d: %w", i, idx, err)
			}
		}
	}
	return s.Close()
}

// result is target idx of job i's result: 6 KiB of JSON, for the value log.
func result(i, idx int) []byte {
	return []byte(fmt.Sprintf(`{"job":%d,"target":%d,"pad":"%s"}`, i, idx, bytes.Repeat([]byte{'p'}, 6<<10)))
}

// checkJobs (in a child process) opens the store in dir and checks that
// jobs [0, n) read back with their results.
func checkJobs(dir string, n int) (err error) {
	s, err := persistence.Open(dir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	for i := range n {
		_, ts, err := s.JobWithTargets(fmt.Sprintf("%032x", i))
		if err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		if len(ts) != 2 {
			return fmt.Errorf("job %d: %d targets", i, len(ts))
		}
		for idx, tr := range ts {
			if tr.Status != persistence.TargetDone || !bytes.Equal(tr.Result, result(i, idx)) {
				return fmt.Errorf("job %d target %d: status %s, result of %d bytes", i, idx, tr.Status, len(tr.Result))
			}
		}
	}
	return nil
}

// storeRoundTrip (in a child process) writes jobs to the store in dir,
// closes it, reopens it and reads them back, twice.
func storeRoundTrip(dir string, durable bool) error {
	for round := range 2 {
		if err := storeJobs(dir, 10*round, 10, durable); err != nil {
			return err
		}
		if err := checkJobs(dir, 10*(round+1)); err != nil {
			return err
		}
	}
	return nil
}

// TestFS_Badger: the store (Badger: memory-mapped logs, truncated files,
// a manifest rewritten by rename, directory syncs, flock, O_DSYNC) opens,
// writes, closes and reopens on the mount as on any disk, in both
// durabilities; a clean unmount keeps it whole. The store runs in child
// processes, as a memory-mapped file must (runChild).
func TestFS_Badger(t *testing.T) {
	testkit.Long(t)
	for _, durable := range []string{"default", "durable"} {
		t.Run(durable, func(t *testing.T) {
			b := setup(t, powercut.Options{})
			runChild(t, "store-roundtrip", filepath.Join(b.mnt, "store"), durable)
			if err := b.fs.Unmount(); err != nil {
				t.Fatal(err)
			}
			runChild(t, "store-check", filepath.Join(b.backing, "store"), "20")
		})
	}
}
