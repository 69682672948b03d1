package persistence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// A process killed just after Badger created a new value-log file, before
// it wrote the file's header, leaves that file empty. Badger then refuses to
// open the store ("Open existing file: …vlog err: Create a new file": it
// takes its own "new file" signal for an error). An empty value-log file
// holds nothing, so Open removes it and opens again. The same goes for a
// memtable's write-ahead log (a .mem file: "while opening memtables …
// Create a new file"), where Badger's failed Open also leaves a dozen
// goroutines running: Open removes empty .vlog and .mem files before it
// opens Badger at all, in a store only (prepareDir): never in a directory
// that holds someone else's files.

// errEmptyValueLog is Badger's refusal of an empty value-log file (vlog.go).
var errEmptyValueLog = fmt.Errorf("%w: an empty value-log file", ErrCorrupt)

// isEmptyValueLogError reports whether Badger's Open failed on an empty
// value-log file.
func isEmptyValueLogError(msg string) bool {
	return strings.Contains(msg, ".vlog") && strings.Contains(msg, "Create a new file")
}

// prepareDir readies dir for Badger, holding the directory's lock (the one
// Badger takes) so that no running store can be creating a file in it at
// that moment: it refuses a directory that is not a store (checkStoreDir),
// before it touches any file, then takes off the MANIFEST the tables a
// power cut took (recover.go), and deletes the empty *.vlog and *.mem
// files a crash left; it adds what it repaired to rec.
func prepareDir(dir string, rec *Recovery, durable bool) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("open store %s: %w", dir, ErrInUse)
	}
	defer func() { _ = unix.Flock(int(d.Fd()), unix.LOCK_UN) }()
	if err := checkStoreDir(dir); err != nil {
		return err
	}
	n, err := repairManifestHole(dir)
	rec.RelistedTables += n
	if err != nil {
		return err
	}
	n, lost, err := unlistMissingTables(dir, durable)
	rec.UnlistedTables += n
	rec.LostTables += lost
	if err != nil {
		return err
	}
	n, err = removeEmptyLogs(dir)
	rec.EmptyLogs += n
	return err
}

// The files Badger's first Open of a directory writes before its
// MANIFEST: a process killed then leaves them, and Badger's next Open
// starts the store afresh over them.
var beforeManifest = map[string]bool{
	"LOCK":             true, // its directory lock's pid file
	"MANIFEST-REWRITE": true, // the MANIFEST being written, renamed once synced
}

// checkStoreDir refuses, with ErrCorrupt, a directory that is not a store:
// one without Badger's MANIFEST that holds any file but those Badger's
// first Open writes before its MANIFEST (beforeManifest). Every store,
// of every layout siftbatch has written, has a MANIFEST; an empty
// directory becomes a new store. It reads only.
func checkStoreDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, badger.ManifestFilename)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("open store %s: %w", dir, err)
	}
	for _, e := range entries {
		if !beforeManifest[e.Name()] {
			return fmt.Errorf("open store %s: %w: not a store: no %s, and it holds other files", dir, ErrCorrupt, badger.ManifestFilename)
		}
	}
	return nil
}

// removeEmptyLogs deletes the empty *.vlog and *.mem files in dir, a
// store's, and returns how many. The caller holds the directory's lock.
func removeEmptyLogs(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	n := 0
	for _, f := range append(files, mems...) {
		if st, err := os.Stat(f); err == nil && st.Size() == 0 {
			if err := os.Remove(f); err != nil {
				return n, fmt.Errorf("open store %s: %w", dir, err)
			}
			n++
		}
	}
	return n, nil
}
