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
// What it cannot cover: a power cut between the failed sync and Badger's
// close (the process is gone before the store can relist): then Badger's
// next Open drops what the hole hid, as upstream Badger does on any
// failed MANIFEST sync.

import (
	"errors"
	"fmt"
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
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("relist tables: %w", err)
	}
	onDisk := make(map[uint64]bool)
	for _, e := range entries {
		id, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), ".sst"), 10, 64)
		if err == nil && strings.HasSuffix(e.Name(), ".sst") && table.NewFilename(id, dir) == filepath.Join(dir, e.Name()) {
			onDisk[id] = true
		}
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
