package persistence

// A store opened for inspection only (OpenReadOnly), and what Badger's own
// read-only mode does and does not write, as read in its source (v4.9.6)
// and checked by TestStore_OpenReadOnly:
//
//   - The directory lock is a shared flock on the directory, without the
//     LOCK file a writer leaves (so a writer, or OpenReadOnly while one
//     runs, gets ErrInUse; two read-only opens share it).
//   - The MANIFEST, KEYREGISTRY, tables, memtable logs (.mem) and value
//     logs are opened read-only; no compaction, no memtable flush, no
//     value-log GC, no DISCARD file, no key registry written when there is
//     none; Close writes nothing either.
//   - But when it opens the levels it deletes every table file the
//     MANIFEST does not list (a crash between writing a table and listing
//     it leaves one), read-only or not; and it refuses a memtable log with
//     room past its entries (ErrTruncateNeeded): a log is preallocated, and
//     Close deletes it once it has flushed the memtable, so every store a
//     process was killed with, or that another process has open, has one.
//     It refuses an empty log file too (a crash at the wrong moment). A
//     failed Open leaves Badger's goroutines running.
//
// So OpenReadOnly refuses, before Badger opens anything, a store with a
// table the MANIFEST does not list, a memtable log (.mem), or an empty
// value log: [ErrUnclean]. Open recovers such a store (it writes), after
// which it opens read-only. A value log that was not closed cleanly does
// not matter read-only: Badger reads the values the tables point to and
// never looks at its end; only a store whose last writes are still in its
// memtable log cannot be read without writing.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"golang.org/x/sys/unix"
)

// OpenReadOnly opens the store in dir for reading only: it creates and
// changes no file (not even a lock file) and starts no background work.
// Every write on it returns an error wrapping [ErrReadOnly]; reads are as
// on a store from [Open]. A directory that is not a store (missing, empty,
// a file, or without Badger's MANIFEST) gives an error wrapping
// [ErrNoStore], and "" does too (an in-memory store has nothing to read).
// A store another process holds gives [ErrInUse] (another reader does
// not hold it); one a crash left to recover gives [ErrUnclean]; a damaged
// one gives [ErrCorrupt]. Close it with [Store.Close].
func OpenReadOnly(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("open store read-only: %w: no directory", ErrNoStore)
	}
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) || (err == nil && !st.IsDir()) {
		return nil, fmt.Errorf("open store %s read-only: %w", dir, ErrNoStore)
	} else if err != nil {
		return nil, fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, badger.ManifestFilename)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open store %s read-only: %w", dir, ErrNoStore)
	} else if err != nil {
		return nil, fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	if err := checkTables(dir); err != nil {
		return nil, err
	}
	if err := checkNotHeld(dir); err != nil {
		return nil, err
	}
	if err := checkClean(dir, false); err != nil {
		return nil, err
	}
	log := &badgerLogger{}
	o := badgerOptions(dir, log).WithReadOnly(true)
	db, err := openBadger(o)
	if err != nil {
		if errors.Is(err, errEmptyValueLog) || errors.Is(err, errTruncateNeeded) {
			return nil, fmt.Errorf("open store %s read-only: %w", dir, ErrUnclean)
		}
		return nil, err
	}
	s := &Store{db: db, log: log, dir: dir, readOnly: true, stop: make(chan struct{}), valueThreshold: int(o.ValueThreshold)}
	if err := s.loadBytes(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// checkNotHeld refuses, with ErrInUse, a directory a writer holds (its
// directory lock, which Badger takes and prepareDir too), before
// its memtable log makes it look unclean. The shared lock is let go at
// once: Badger takes its own.
func checkNotHeld(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return fmt.Errorf("open store %s read-only: %w", dir, ErrInUse)
	}
	return unix.Flock(int(d.Fd()), unix.LOCK_UN)
}

// checkClean refuses, with ErrUnclean, a directory with a table file its
// MANIFEST does not list (Badger would delete it), a memtable log (upstream
// Badger refuses one, and a failed Open of Badger's leaves a dozen goroutines
// running; and a log is a store in use, or one a process was killed with), or
// an empty value-log file (refused too). It reads only. crashed allows the
// tables and the logs: the store's own writer opens it read-only on a full
// disk (fullopen.go), holding its lock, and then Badger deletes those
// tables as a writable Open would, and replays the logs without
// truncating them (persistence/internal/badger's patch).
func checkClean(dir string, crashed bool) error {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if err != nil {
		return fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	defer f.Close()
	m, _, err := replayManifest(f, dir)
	if err != nil {
		return fmt.Errorf("open store %s read-only: %w: manifest: %s", dir, ErrCorrupt, firstLine(err.Error()))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("open store %s read-only: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case crashed && (strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".mem")):
		case strings.HasSuffix(name, ".sst"):
			id, err := strconv.ParseUint(strings.TrimSuffix(name, ".sst"), 10, 64)
			if _, listed := m.Tables[id]; err == nil && !listed && table.NewFilename(id, dir) == filepath.Join(dir, name) {
				return fmt.Errorf("open store %s read-only: %w: a table the manifest does not list", dir, ErrUnclean)
			}
		case strings.HasSuffix(name, ".mem"):
			// Close flushes the memtable and deletes its log: a log is
			// a store in use, or one a process was killed with.
			return fmt.Errorf("open store %s read-only: %w: a memtable log", dir, ErrUnclean)
		case strings.HasSuffix(name, ".vlog"):
			if info, err := e.Info(); err == nil && info.Size() == 0 {
				return fmt.Errorf("open store %s read-only: %w: an empty value log", dir, ErrUnclean)
			}
		}
	}
	return nil
}

// errReadOnly is a write refused on a read-only store.
func errReadOnly(op string) error { return fmt.Errorf("%s: %w", op, ErrReadOnly) }
