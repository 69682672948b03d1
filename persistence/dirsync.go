package persistence

// The directory's entries. A file's data reaches stable storage with an
// fsync of the file; its name, in its directory, with an fsync of the
// directory. Until then a power cut may leave the directory without it
// (POSIX; LazyFS and engine/enginetest/powercut take that reading), and
// every write acknowledged into that file with it.
//
// What Badger v4.9.6 syncs of its directory, and what it does not:
//
//   - a compaction's new tables: synced (levels.go, before the MANIFEST
//     lists them); a MANIFEST rewrite: synced (manifest.go, after the
//     rename); the key registry: synced; Open: synced once, after it
//     opens its tables (before it creates its memtable log and value-log
//     file);
//   - a new memtable log (NNNNN.mem, memtable.go newMemTable) and a new
//     value-log file (NNNNNN.vlog, value.go createVlogFile): never. A
//     durable store's writes go into them at once (DB.Sync syncs their
//     data only): a durable store syncs the directory itself
//     (syncDirLocked), before it answers the first write that a new one
//     of them may hold;
//   - a memtable's flush (db.go handleMemTableFlush): the new L0 table
//     is synced (msync), listed in the MANIFEST (synced), then the
//     memtable's log is deleted, and the directory is not synced: a cut
//     then leaves a MANIFEST that lists a table the directory does not
//     hold, and Badger refuses to open. That happens on Badger's own
//     goroutine, out of a store's reach; Open repairs it (recover.go).
//
// The store's directory itself, when Open creates it, is an entry of its
// parent: Open syncs the parent of each directory it creates (mkdirSynced),
// or a cut could take the whole store.
//
// A deletion that was not synced undoes itself: the file comes back (a
// flushed memtable's log, replayed again, which changes nothing; a
// collected value-log file, which holds nothing live).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// mkdirSynced creates dir and its missing parents, as os.MkdirAll does,
// and syncs the parent of each directory it created.
func mkdirSynced(dir string) error {
	dir = filepath.Clean(dir)
	var created []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			break // there, or not a directory's place: MkdirAll says which
		}
		created = append(created, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := syncDir(filepath.Dir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

// syncDir syncs the directory dir: the entries created, renamed or
// removed in it are on stable storage when it returns nil.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// syncDirLocked syncs the store's directory when Badger created a
// memtable log or a value-log file since the last time (created: the
// sync found one, syncRotatedLocked), or when an earlier sync of the
// directory failed, and counts it. s.mu is held, by a durable sync.
func (s *Store) syncDirLocked(created bool) error {
	if (!created && !s.dirDirty) || s.noDirSync {
		return nil
	}
	s.dirDirty = true
	start := time.Now()
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.dirSyncTime.Add(int64(time.Since(start)))
	s.dirDirty = false
	s.dirSyncs.Add(1)
	return nil
}

// DirSyncs returns how many times a durable store has synced its
// directory since [Open] because Badger created a file in it (and once
// when made durable): see the top of dirsync.go. Safe for concurrent use.
func (s *Store) DirSyncs() int64 { return s.dirSyncs.Load() }
