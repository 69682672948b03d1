package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sift/batch/persistence"
)

// StoreInUseError is a store directory another process holds.
type StoreInUseError struct{ Dir string }

func (e *StoreInUseError) Error() string {
	return fmt.Sprintf("store %s is in use by another process (a running siftbatch serve?); stop it first", e.Dir)
}

func (e *StoreInUseError) Unwrap() error { return persistence.ErrInUse }

// DefaultDataDir is the store directory of serve, jobs and show when
// --data is not given.
const DefaultDataDir = "./siftbatch-data"

// OpenStore opens the store in dir ("" in memory) for a runner: serve and
// demo, which write. A dir that is a file is an error that says so.
func OpenStore(dir string) (*persistence.Store, error) {
	return OpenStoreWith(dir, persistence.Options{})
}

// OpenStoreWith is OpenStore with the store's file sizes o
// (persistence.OpenWith).
func OpenStoreWith(dir string, o persistence.Options) (*persistence.Store, error) {
	if err := notAFile(dir); err != nil {
		return nil, err
	}
	s, err := persistence.OpenWith(dir, o)
	switch {
	case errors.Is(err, persistence.ErrInUse):
		return nil, &StoreInUseError{Dir: dir}
	case err != nil:
		return nil, err
	}
	return s, nil
}

// OpenForInspection opens the store in dir read-only, for jobs and show:
// inspecting changes no byte in dir, and a typo or another directory
// creates nothing.
func OpenForInspection(dir string) (*persistence.Store, error) {
	if dir == "" {
		return nil, Usagef("--data must name a store directory")
	}
	if err := notAFile(dir); err != nil {
		return nil, err
	}
	s, err := persistence.OpenReadOnly(dir)
	switch {
	case errors.Is(err, persistence.ErrNoStore):
		return nil, fmt.Errorf("no siftbatch store at %s", dir)
	case errors.Is(err, persistence.ErrInUse):
		return nil, &StoreInUseError{Dir: dir}
	case errors.Is(err, persistence.ErrUnclean):
		return nil, fmt.Errorf("store %s was not closed cleanly (a crash?); siftbatch serve --data %s recovers it: start it, then stop it", dir, dir)
	case err != nil:
		return nil, err
	}
	return s, nil
}

// notAFile is an error if dir, or a directory above it, names something
// that is not a directory (a file, say): a store is a directory, and one
// cannot be made under a file. The error names the file.
func notAFile(dir string) error {
	if dir == "" {
		return nil
	}
	for p := filepath.Clean(dir); ; {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir() && p == filepath.Clean(dir):
			return fmt.Errorf("--data %s is a file: give the store's directory (made if missing), or \"\" for a store in memory", dir)
		case err == nil && !fi.IsDir():
			return fmt.Errorf("--data %s: %s is a file: give the store's directory (made if missing), or \"\" for a store in memory", dir, p)
		case err == nil:
			return nil // a directory: what is under it can be made
		}
		up := filepath.Dir(p)
		if up == p {
			return nil
		}
		p = up
	}
}
