package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/sift/batch/persistence"
)

// storeInUseError is a store directory another process holds.
type storeInUseError struct{ dir string }

func (e *storeInUseError) Error() string {
	return fmt.Sprintf("store %s is in use by another process (a running siftbatch serve?); stop it first", e.dir)
}

func (e *storeInUseError) Unwrap() error { return persistence.ErrInUse }

// openStore opens the store in dir ("" in memory). With mustExist a missing
// directory is an error rather than a new, empty store: inspecting a typo
// should not create one.
func openStore(dir string, mustExist bool) (*persistence.Store, error) {
	if mustExist {
		if dir == "" {
			return nil, usageErrorf("--data must name a store directory")
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no store at %s", dir)
		}
	}
	s, err := persistence.Open(dir)
	switch {
	case errors.Is(err, persistence.ErrInUse):
		return nil, &storeInUseError{dir: dir}
	case err != nil:
		return nil, err
	}
	return s, nil
}
