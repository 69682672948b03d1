package persistence

// The MANIFEST after a failed sync of it. Badger appends each change of
// its tables (a flush's new table, a compaction's new and deleted ones) to
// the MANIFEST and syncs it; when that sync fails (EIO), it has already
// applied the change in memory, and its flush retries with a new table,
// appended behind the page the failed sync lost (fsyncgate: see
// reopen.go). The running Badger never reads its MANIFEST again, but the
// next Open does, and stops at the hole: it forgets every table listed
// after it and deletes their files as strays, and keeps listing the
// tables whose deletion it forgot (then refused: a table of a lower level
// missing). So after Badger closes, before it opens again (a reopen, and
// the next start after [Store.Close]), the store makes the MANIFEST agree
// with what the closed Badger had: relistTables lists every table file in
// the directory at the level Badger last had it (level 0 for a table it
// made as it closed: a flush's, if its checksums hold), and unlists every
// listed table whose file is gone; one change set, appended where the
// MANIFEST's whole changes end, synced. A table listed at another level
// than Badger last had it is left there (a compaction may have moved it
// as Badger closed; reads take the newest version of a key from every
// level). A MANIFEST Badger wrote whole needs nothing: it costs a read of
// it and of the directory.
//
// A power cut between the failed sync and Badger's close leaves the hole
// for the next start, before any relisting: there Open finds it and lists
// the tables again itself, without the levels Badger had for those listed
// after the hole (repairManifestHole).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/table"
	"google.golang.org/protobuf/proto"
)

// tableLevels returns the level of each table of db (before it closes).
func tableLevels(db *badger.DB) map[uint64]int {
	levels := make(map[uint64]int)
	for _, t := range db.Tables() {
		levels[t.ID] = t.Level
	}
	return levels
}

// relistTables makes dir's MANIFEST list exactly the table files in dir,
// at the levels given (0 for one not in levels: if its checksums hold),
// once Badger has closed
// the store (see the top of manifest.go); it returns how many changes it
// appended.
func relistTables(dir string, levels map[uint64]int) (int, error) {
	f, err := os.OpenFile(filepath.Join(dir, badger.ManifestFilename), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("relist tables: %w", err)
	}
	defer f.Close()
	onDisk, err := tableFiles(dir)
	if err != nil {
		return 0, fmt.Errorf("relist tables: %w", err)
	}
	m, off, err := replayManifest(f, dir)
	if err != nil { // the hole does not even read as an end: write it anew
		return rewriteManifest(f, dir, onDisk, levels)
	}
	set := &pb.ManifestChangeSet{}
	for _, id := range slices.Sorted(maps.Keys(m.Tables)) {
		if !onDisk[id] {
			set.Changes = append(set.Changes, &pb.ManifestChange{Id: id, Op: pb.ManifestChange_DELETE})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(onDisk)) {
		if _, listed := m.Tables[id]; listed {
			continue
		}
		if _, known := levels[id]; !known && checkTable(table.NewFilename(id, dir), options.None) != nil {
			continue // a stray a failed flush left: Badger deletes it
		}
		set.Changes = append(set.Changes, &pb.ManifestChange{Id: id, Op: pb.ManifestChange_CREATE,
			Level: uint32(levels[id]), EncryptionAlgo: pb.EncryptionAlgo_aes, Compression: uint32(options.None)})
	}
	if len(set.Changes) == 0 {
		return 0, nil
	}
	if err := appendManifest(f, off, set); err != nil {
		return 0, fmt.Errorf("relist tables: manifest: %w", err)
	}
	return len(set.Changes), nil
}

// rewriteManifest writes the MANIFEST f anew, as Badger rewrites it
// (manifest.go helpRewrite: its header, then one change set that creates
// every table), listing the tables onDisk at their levels (0 for one not
// in levels, if its checksums hold), through MANIFEST-REWRITE renamed over
// it, synced with the directory. It returns how many tables it lists.
func rewriteManifest(f *os.File, dir string, onDisk map[uint64]bool, levels map[uint64]int) (int, error) {
	header := make([]byte, 8) // magic text and version
	if _, err := f.ReadAt(header, 0); err != nil {
		return 0, fmt.Errorf("relist tables: %w: manifest: no header", ErrCorrupt)
	}
	set := &pb.ManifestChangeSet{}
	for _, id := range slices.Sorted(maps.Keys(onDisk)) {
		if _, known := levels[id]; !known && checkTable(table.NewFilename(id, dir), options.None) != nil {
			continue
		}
		set.Changes = append(set.Changes, &pb.ManifestChange{Id: id, Op: pb.ManifestChange_CREATE,
			Level: uint32(levels[id]), EncryptionAlgo: pb.EncryptionAlgo_aes, Compression: uint32(options.None)})
	}
	tmp := filepath.Join(dir, "MANIFEST-REWRITE")
	w, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return 0, fmt.Errorf("relist tables: %w", err)
	}
	_, err = w.Write(header)
	if err == nil {
		err = appendManifest(w, int64(len(header)), set)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, badger.ManifestFilename))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return 0, fmt.Errorf("relist tables: manifest: %w", err)
	}
	return len(set.Changes), nil
}

// tableFiles is the IDs of the table files in dir.
func tableFiles(dir string) (map[uint64]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	onDisk := make(map[uint64]bool)
	for _, e := range entries {
		id, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), ".sst"), 10, 64)
		if err == nil && strings.HasSuffix(e.Name(), ".sst") && table.NewFilename(id, dir) == filepath.Join(dir, e.Name()) {
			onDisk[id] = true
		}
	}
	return onDisk, nil
}

// repairManifestHole lists again, before Badger opens dir, the tables a
// hole in its MANIFEST hides: the hole a power cut leaves when it comes
// after a failed sync of the MANIFEST and before Badger closed (the store
// relists after a close: see the top of this file). Badger's Open refuses
// such a store ("manifest has checksum mismatch"), or, where the hole is
// the MANIFEST's end, forgets the tables listed in it and deletes their
// files. A MANIFEST read whole to its end is left as it is. Otherwise the
// change sets up to the first that cannot be read are kept, and the
// MANIFEST is written anew (rewriteManifest): the tables listed there at
// their levels, and at level 0 every table file that no change set before
// the hole names (a flush's or a compaction's, listed in or after the
// hole, or never) if its checksums hold. A table a readable change set
// deleted stays unlisted though its file is back (its unlink undone by
// the cut), and a listed table whose file is gone is dropped (a
// compaction in the hole deleted it: its output is among the files).
// Level 0 holds tables in any key order and a read takes the newest
// version of a key from every level, so a table listed there that Badger
// had lower, or a flush's table whose memtable log is replayed too, reads
// nothing wrong. It returns how many tables it listed. The caller holds
// the directory's lock.
func repairManifestHole(dir string) (int, error) {
	f, err := os.OpenFile(filepath.Join(dir, badger.ManifestFilename), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	defer f.Close()
	levels, named, whole, err := readManifestToHole(f)
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w: manifest: %s", dir, ErrCorrupt, err)
	}
	if whole {
		return 0, nil
	}
	onDisk, err := tableFiles(dir)
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	for id := range onDisk {
		if _, listed := levels[id]; named[id] && !listed {
			delete(onDisk, id) // deleted before the hole
		}
	}
	n, err := rewriteManifest(f, dir, onDisk, levels)
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	return n, nil
}

// readManifestToHole reads the MANIFEST f's change sets up to the first
// it cannot read (cut short, a checksum that does not hold, a change
// Badger would refuse, an empty one but for a new MANIFEST's first):
// the level of each table they leave listed, every table they name
// (created or deleted), and whether they reach the end of f. An error
// only if f has no MANIFEST header.
func readManifestToHole(f *os.File) (levels map[uint64]int, named map[uint64]bool, whole bool, err error) {
	buf, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		return nil, nil, false, err
	}
	if len(buf) < 8 || string(buf[:4]) != "Bdgr" {
		return nil, nil, false, errors.New("no header")
	}
	levels, named = make(map[uint64]int), make(map[uint64]bool)
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	rest := buf[8:]
	for first := true; len(rest) >= 8; first = false {
		n := uint64(binary.BigEndian.Uint32(rest))
		if n == 0 && !first || // zeros: Badger reads them as empty change sets, and writes none but a new MANIFEST's
			n > uint64(len(rest)-8) || crc32.Checksum(rest[8:8+n], castagnoli) != binary.BigEndian.Uint32(rest[4:]) {
			break
		}
		var set pb.ManifestChangeSet
		if proto.Unmarshal(rest[8:8+n], &set) != nil || !applyToLevels(levels, named, &set) {
			break
		}
		rest = rest[8+n:]
	}
	return levels, named, len(rest) == 0, nil
}

// applyToLevels applies set to levels and named, as Badger's replay
// would; false (and nothing applied) if Badger would refuse it.
func applyToLevels(levels map[uint64]int, named map[uint64]bool, set *pb.ManifestChangeSet) bool {
	next := maps.Clone(levels)
	for _, c := range set.Changes {
		_, listed := next[c.Id]
		switch {
		case c.Op == pb.ManifestChange_CREATE && !listed:
			next[c.Id] = int(c.Level)
		case c.Op == pb.ManifestChange_DELETE && listed:
			delete(next, c.Id)
		default:
			return false
		}
	}
	clear(levels)
	maps.Copy(levels, next)
	for _, c := range set.Changes {
		named[c.Id] = true
	}
	return true
}
