package persistence

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
// opens Badger at all.

// errEmptyValueLog is Badger's refusal of an empty value-log file (vlog.go).
var errEmptyValueLog = fmt.Errorf("%w: an empty value-log file", ErrCorrupt)

// isEmptyValueLogError reports whether Badger's Open failed on an empty
// value-log file.
func isEmptyValueLogError(msg string) bool {
	return strings.Contains(msg, ".vlog") && strings.Contains(msg, "Create a new file")
}

// removeEmptyValueLogs deletes the empty *.vlog and *.mem files in dir, holding the
// directory's lock (the one Badger takes) so that no running store can be
// creating one at that moment. It reports how many it removed.
func removeEmptyValueLogs(dir string) (int, error) {
	d, err := os.Open(dir)
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, ErrInUse)
	}
	defer func() { _ = unix.Flock(int(d.Fd()), unix.LOCK_UN) }()
	files, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		return 0, fmt.Errorf("open store %s: %w", dir, err)
	}
	files = append(files, mems...)
	n := 0
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Size() == 0 {
			if err := os.Remove(f); err != nil {
				return n, fmt.Errorf("open store %s: %w", dir, err)
			}
			n++
		}
	}
	return n, nil
}
