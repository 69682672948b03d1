package engine

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/sift/batch/persistence"
)

// The errors [Open] returns, wrapped, when it cannot open the store: test
// for them with [errors.Is] (they are package persistence's).
var (
	// ErrStoreInUse is wrapped by [Open] when another process holds dir.
	ErrStoreInUse = persistence.ErrInUse
	// ErrStoreCorrupt is wrapped by [Open] when dir is not a store, or a
	// damaged one.
	ErrStoreCorrupt = persistence.ErrCorrupt
)

// ErrNotSynced is wrapped by [Runner.Submit], with [DurabilitySync], when
// the store's disk failed to sync the new job (an I/O error): nothing was
// created as far as the caller can tell (the job is never shown, nor run);
// submit again. It is package persistence's.
var ErrNotSynced = persistence.ErrNotSynced

// Open starts a runner on a store of its own, so that an embedder imports
// package engine alone: it opens the store in dir ("" for an in-memory
// store, gone when the runner closes; otherwise a Badger directory, created
// if missing) and starts the runner on it as [New] does, with the same
// rules for fetch, cfg and log ([DurabilitySync] with dir "" is an error). A dir that cannot be opened is an error
// naming it (wrapping [ErrStoreInUse] when another process holds it,
// [ErrStoreCorrupt] when it is not a store, such as a directory of other
// files, which Open leaves as they are); if the runner cannot start, the
// store is closed again. Nothing is left open on an error.
//
// The runner owns the store: [Runner.Close] and [Runner.Shutdown] close it
// once the runner has stopped — the one exception to the rule that a
// runner leaves its store open. After that the runner's reads find
// nothing, and dir may be opened again. A runner that fails on its own
// ([Runner.Err]) keeps its store open until Close.
func Open(dir string, fetch FetchFunc, cfg Config, log *slog.Logger) (*Runner, error) {
	if fetch == nil { // before the store: nothing to open and close again
		return nil, errors.New("open runner: nil fetch func")
	}
	if dir == "" && cfg.Durability == DurabilitySync {
		return nil, errors.New("open runner: config Durability sync needs a store on disk, not in memory")
	}
	store, err := persistence.OpenWith(dir, persistence.Options{Durable: cfg.Durability == DurabilitySync})
	if err != nil {
		return nil, fmt.Errorf("open runner: %w", err)
	}
	r, err := New(store, fetch, cfg, log)
	if err != nil {
		if cerr := store.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	r.ownsStore = true
	return r, nil
}
