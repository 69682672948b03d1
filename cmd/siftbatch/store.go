package main

import (
	"errors"
	"fmt"

	"github.com/sift/batch/persistence"
)

// storeInUseError is a store directory another process holds.
type storeInUseError struct{ dir string }

func (e *storeInUseError) Error() string {
	return fmt.Sprintf("store %s is in use by another process (a running siftbatch serve?); stop it first", e.dir)
}

func (e *storeInUseError) Unwrap() error { return persistence.ErrInUse }

// openStore opens the store in dir ("" in memory) for the runner: serve and
// demo, which write.
func openStore(dir string) (*persistence.Store, error) {
	s, err := persistence.Open(dir)
	switch {
	case errors.Is(err, persistence.ErrInUse):
		return nil, &storeInUseError{dir: dir}
	case err != nil:
		return nil, err
	}
	return s, nil
}

// openForInspection opens the store in dir read-only, for jobs and show:
// inspecting changes no byte in dir, and a typo or another directory
// creates nothing.
func openForInspection(dir string) (*persistence.Store, error) {
	if dir == "" {
		return nil, usageErrorf("--data must name a store directory")
	}
	s, err := persistence.OpenReadOnly(dir)
	switch {
	case errors.Is(err, persistence.ErrNoStore):
		return nil, fmt.Errorf("no siftbatch store at %s", dir)
	case errors.Is(err, persistence.ErrInUse):
		return nil, &storeInUseError{dir: dir}
	case errors.Is(err, persistence.ErrUnclean):
		return nil, fmt.Errorf("store %s was not closed cleanly (a crash?); siftbatch serve --data %s recovers it: start it, then stop it", dir, dir)
	case err != nil:
		return nil, err
	}
	return s, nil
}
