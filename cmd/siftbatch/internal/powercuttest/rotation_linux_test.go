package powercuttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/persistence"
)

// Rotation. With the store's default sizes (16 MiB memtables and value-log
// files) a round's seconds of load never fill a memtable or a value-log
// file: Badger's new files would only be the ones each Open makes. The
// rounds' serve opens its store with small ones instead (serve's
// SIFTBATCH_TEST_STORE_SIZES, persistence.OpenWith), so that memtables fill
// and are flushed to tables, and value-log files fill and are set aside,
// under load and at any moment of a cut: the syncs of rotated logs and of
// the directory (persistence/durable.go, dirsync.go) and the recovery of a
// flush cut in the middle (persistence/recover.go) are what a round cuts
// into. Every second round of four cuts right after a rotation instead of
// at a random moment (rotationOf): round 1, 5, 9, ... within 250 ms of
// Badger starting a new memtable, round 3, 7, ... of a new value-log file,
// whenever that comes (rotationWait at most). Each round counts the files
// Badger made between serve's start and the cut (the backing directory's
// file ids: Badger numbers each new memtable log, value-log file and table
// one past the last), and TestPowerCut_Durable and TestPowerCut_Default
// (4 rounds or more) fail unless a memtable and a value-log file rotated
// within a round, and every round that waited for one saw it.

// roundSizes are the rounds' store's file sizes: the least memtable the
// store takes (128 KiB: a round's rows fill one in about a second of load)
// and Badger's least value-log file (1 MiB: about five 200 KB results).
var roundSizes = persistence.Options{MemTableSize: persistence.MinMemTableSize, ValueLogFileSize: 1 << 20}

// sizesEnv is serve's environment for roundSizes.
func sizesEnv() string {
	return fmt.Sprintf("SIFTBATCH_TEST_STORE_SIZES=%d,%d", roundSizes.MemTableSize, roundSizes.ValueLogFileSize)
}

// fileIDs are the newest ids of Badger's files in a store directory.
type fileIDs struct{ mem, vlog, sst int }

// newestFiles reads dir's newest memtable log (NNNNN.mem), value-log file
// (NNNNNN.vlog) and table (NNNNNN.sst). A dir that is not there has none.
func newestFiles(t *testing.T, dir string) fileIDs {
	t.Helper()
	f, err := readNewest(dir)
	if err != nil {
		t.Fatalf("list the store: %v", err)
	}
	return f
}

// readNewest is newestFiles.
func readNewest(dir string) (fileIDs, error) {
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return fileIDs{}, err
	}
	var f fileIDs
	for _, e := range es {
		name := e.Name()
		base := strings.TrimSuffix(name, filepath.Ext(name))
		var id int
		if _, err := fmt.Sscanf(base, "%d", &id); err != nil || strings.TrimLeft(base, "0123456789") != "" {
			continue
		}
		switch filepath.Ext(name) {
		case ".mem":
			f.mem = max(f.mem, id)
		case ".vlog":
			f.vlog = max(f.vlog, id)
		case ".sst":
			f.sst = max(f.sst, id)
		}
	}
	return f, nil
}

// rotation is what a round's cut waits for.
type rotation int

const (
	noRotation   rotation = iota // a random moment
	memRotation                  // a new memtable (and log)
	vlogRotation                 // a new value-log file
)

// rotationOf is round r's (counted from 0).
func rotationOf(r int) rotation {
	switch r % 4 {
	case 1:
		return memRotation
	case 3:
		return vlogRotation
	}
	return noRotation
}

// rotationWait is the longest a round waits for its rotation before it
// cuts anyway (and fails): a memtable fills in a few seconds of load.
const rotationWait = 30 * time.Second

// cutAt is when a round cuts: d after the clients start, or, after a
// rotation, within d%250ms of Badger making its file.
type cutAt struct {
	d       time.Duration
	after   rotation
	started fileIDs // the store's newest files at the round's start
}

// waitCut waits for at's moment; it reports whether the rotation waited
// for came (true for none). It looks at the backing directory every 10
// ms: a new file's name is there at once (powercut applies names to the
// backing directory as they come).
func (h *harness) waitCut(at cutAt) bool {
	if at.after == noRotation {
		<-time.After(at.d)
		return true
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(rotationWait)
	for {
		select {
		case <-tick.C:
		case <-deadline:
			return false
		}
		now, err := readNewest(h.store())
		if err != nil {
			continue
		}
		if (at.after == memRotation && now.mem > at.started.mem) || (at.after == vlogRotation && now.vlog > at.started.vlog) {
			<-time.After(at.d % (250 * time.Millisecond))
			return true
		}
	}
}

// rotations are the files Badger made within rounds (after serve's Open,
// before the cut).
type rotations struct {
	mem, vlog, sst int // new memtables (with their logs), value-log files, tables
	roundsMem      int // rounds in which a memtable rotated
	roundsVlog     int // rounds in which a value-log file rotated
	// cutAfter: rounds that cut right after a memtable's or a value-log
	// file's rotation; missed: those whose rotation did not come in time.
	cutAfterMem, cutAfterVlog, missed int
}

// waited counts a round that waited for rotation r: came or not.
func (r *rotations) waited(w rotation, came bool) {
	switch {
	case w == noRotation:
	case !came:
		r.missed++
	case w == memRotation:
		r.cutAfterMem++
	default:
		r.cutAfterVlog++
	}
}

// add counts a round's files: those of after that before had not.
func (r *rotations) add(before, after fileIDs) (mem, vlog, sst int) {
	mem, vlog, sst = max(0, after.mem-before.mem), max(0, after.vlog-before.vlog), max(0, after.sst-before.sst)
	r.mem, r.vlog, r.sst = r.mem+mem, r.vlog+vlog, r.sst+sst
	if mem > 0 {
		r.roundsMem++
	}
	if vlog > 0 {
		r.roundsVlog++
	}
	return mem, vlog, sst
}

func (r rotations) String() string {
	return fmt.Sprintf("within rounds %d memtables (in %d rounds), %d value-log files (in %d rounds), %d tables made; %d cuts right after a new memtable, %d after a new value-log file, %d rotations waited for in vain",
		r.mem, r.roundsMem, r.vlog, r.roundsVlog, r.sst, r.cutAfterMem, r.cutAfterVlog, r.missed)
}

// requireRotations fails t unless some round rotated a memtable and some
// round a value-log file: without them the rounds do not test what they
// are for.
func requireRotations(t *testing.T, s *summary) {
	t.Helper()
	if s.rounds >= 4 && (s.rot.roundsMem == 0 || s.rot.roundsVlog == 0 || s.rot.missed > 0) {
		t.Errorf("rotations within %d rounds: %s", s.rounds, s.rot)
	}
}

// headTail is the first and the last n bytes of s: a process's fatal error
// is at the head of its output, the goroutines' stacks after it.
func headTail(s string, n int) string {
	if len(s) <= 2*n {
		return s
	}
	return s[:n] + "\n[...]\n" + s[len(s)-n:]
}

// keepFailed copies the store serve did not start on into
// $POWERCUT_KEEP/failed-start (if set), for a look at what the cut left.
func (h *harness) keepFailed(t *testing.T) {
	keep := os.Getenv("POWERCUT_KEEP")
	if keep == "" {
		return
	}
	dst := filepath.Join(keep, "failed-start")
	out, err := exec.Command("cp", "-a", "--sparse=always", h.store(), dst).CombinedOutput()
	t.Logf("the store serve did not start on: %s (%v %s)", dst, err, out)
}
