package persistence

// What Open repairs of a store a power cut left, before Badger opens it,
// and what it counts of that ([Store.Recovery]).
//
// A memtable's flush lists its new table in the MANIFEST (synced) and
// then deletes the memtable's log, and Badger does not sync the directory
// in between (dirsync.go). A power cut before the directory's next sync
// loses both directory changes, the table's creation and the log's
// deletion, as every file system orders a directory's changes (ext4's and
// XFS's journals; engine/enginetest/powercut: a directory's fsync makes
// every earlier change of it stable): the MANIFEST lists a table the
// directory does not hold, and the memtable log that the table was made
// of is back. Badger refuses to open such a store ("Opening file: ...
// no such file or directory"). Open removes those tables from the
// MANIFEST (a deletion appended to it, synced), and Badger replays the
// logs, which hold the same rows.
//
// That is done only where it is what happened: every missing table is at
// level 0 (a compaction's tables are synced before the MANIFEST lists
// them: a missing one of a lower level is damage), and the directory
// holds at least one memtable log per missing table (each flush is of
// one). Otherwise Open refuses the store with [ErrCorrupt]; but for a
// store in the default mode ([Options.Durable] false) fewer logs than
// missing tables are what a cut leaves too: nothing syncs its directory,
// so a log made since the last sync loses its creation with its table's
// (the MANIFEST's entry was synced, the directory's were not). Those
// tables are unlisted all the same, their rows lost with the writes the
// default mode acknowledged before syncing them ([Recovery.LostTables]).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/table"
	"google.golang.org/protobuf/proto"
)

// Recovery is what [Open] repaired in a store a crash or a power cut
// left, before and as it opened it: nothing is repaired silently. A store
// closed cleanly gives the zero Recovery, and so does one a crash left
// (SIGKILL, or a power cut on a durable store) but for UnlistedTables and
// EmptyLogs; IndexKeys or BytesCounted on a store this version wrote mean
// its rows and its indexes or byte total disagreed. [Open] has no logger:
// its caller logs it (engine.New does).
type Recovery struct {
	// UnlistedTables is how many tables the MANIFEST listed that a power
	// cut took from the directory before its entry was synced, and that
	// Open took off the MANIFEST: their rows are replayed from the
	// memtable logs they were flushed from (see the top of recover.go),
	// but for LostTables of them.
	UnlistedTables int
	// LostTables is how many of the UnlistedTables had no memtable log
	// left to replay (a store in the default mode: the cut took the log's
	// creation too): their rows are lost, as the default mode's unsynced
	// writes are at a power cut. Always 0 for a durable store, which
	// refuses that (Options.Durable).
	LostTables int
	// RelistedTables is how many tables Open listed again in a MANIFEST
	// with a hole, which a power cut after a failed sync of it leaves
	// (repairManifestHole in manifest.go): 0 unless the disk failed a
	// sync.
	RelistedTables int
	// EmptyLogs is how many empty memtable logs and value-log files Open
	// removed (vlog.go).
	EmptyLogs int
	// IndexKeys is how many index keys (the caller index, the index of
	// every job) Open wrote or deleted to agree with the job rows: 0
	// unless a store was written before the index, since a job's row and
	// its index keys are one transaction.
	IndexKeys int
	// DroppedResults is how many results of jobs that were live the
	// runner's restart found unreadable and dropped
	// ([Store.DropUnreadableResults]): never acknowledged on a durable
	// store.
	DroppedResults int
	// BytesCounted is true when the store had no byte total and Open
	// counted it (a store written before it).
	BytesCounted bool
}

// Recovery returns what [Open] repaired as it opened the store. Safe for
// concurrent use.
func (s *Store) Recovery() Recovery {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	return s.rec
}

// noteRecovery adds to the store's Recovery.
func (s *Store) noteRecovery(f func(*Recovery)) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	f(&s.rec)
}

// unlistMissingTables takes off dir's MANIFEST the level-0 tables a power
// cut took from the directory (see the top of recover.go), and returns
// how many. The caller holds the directory's lock.
func unlistMissingTables(dir string, durable bool) (unlisted, lost int, err error) {
	path := filepath.Join(dir, badger.ManifestFilename)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil // a new store
	}
	if err != nil {
		return 0, 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	defer f.Close()
	m, off, err := replayManifest(f, dir)
	if err != nil {
		return 0, 0, fmt.Errorf("open store %s: %w: manifest: %s", dir, ErrCorrupt, firstLine(err.Error()))
	}
	var missing []uint64
	for id, tm := range m.Tables {
		_, err := os.Stat(table.NewFilename(id, dir))
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, 0, fmt.Errorf("open store %s: %w", dir, err)
		}
		if tm.Level != 0 {
			return 0, 0, fmt.Errorf("open store %s: %w: table %d of level %d is missing", dir, ErrCorrupt, id, tm.Level)
		}
		missing = append(missing, id)
	}
	if len(missing) == 0 {
		return 0, 0, nil
	}
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return 0, 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	if len(mems) < len(missing) {
		if durable {
			return 0, 0, fmt.Errorf("open store %s: %w: %d tables missing, %d memtable logs to replay (a store a default-mode runner wrote last opens in the default mode)", dir, ErrCorrupt, len(missing), len(mems))
		}
		lost = len(missing) - len(mems)
	}
	slices.Sort(missing)
	set := &pb.ManifestChangeSet{}
	for _, id := range missing {
		set.Changes = append(set.Changes, &pb.ManifestChange{Id: id, Op: pb.ManifestChange_DELETE})
	}
	if err := appendManifest(f, off, set); err != nil {
		return 0, 0, fmt.Errorf("open store %s: manifest: %w", dir, err)
	}
	return len(missing), lost, nil
}

// appendManifest appends set to the MANIFEST f, whose changes are whole
// up to off (a torn one past it is cut off, as Badger would), as Badger
// writes a change set (manifest.go addChanges), and syncs it.
func appendManifest(f *os.File, off int64, set *pb.ManifestChangeSet) error {
	buf, err := proto.Marshal(set)
	if err != nil {
		return err
	}
	rec := binary.BigEndian.AppendUint32(nil, uint32(len(buf)))
	rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum(buf, crc32.MakeTable(crc32.Castagnoli)))
	rec = append(rec, buf...)
	if err := f.Truncate(off); err != nil {
		return err
	}
	if _, err := f.WriteAt(rec, off); err != nil {
		return err
	}
	return f.Sync()
}
