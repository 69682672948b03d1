package persistence

// Durability. By default a write that has committed is in Badger's logs,
// which are memory-mapped files: it survives the process being killed (the
// pages are the kernel's), not a kernel crash or a power cut, which lose
// what the kernel had not written back yet (up to about half a minute of
// writes). A durable store ([Store.SetDurable]) syncs those logs to stable
// storage before it answers a write that acknowledges something:
//
//   - an owner write (writer.go): one sync covers a whole group commit. The
//     writer commits the group, syncs, and only then answers its writes and
//     takes the next group; nothing else commits between the first commit
//     of a group (its results' chunk transactions) and its sync, as the
//     writer holds the store's write lock from one to the other. Badger's
//     DB.Sync syncs only the current memtable's log (and the current value
//     log file): a commit that filled the memtable in between would push the
//     group's memtable aside unsynced.
//   - a job's creation ([Store.CreateJob]): synced on its own, under the
//     write lock.
//
// A Touch, a sweep, an eviction, the callers index and the node tags are
// not acknowledgements and are not synced (they are made durable by the
// next sync, or by Badger's own flushes). Value-log garbage collection
// rewrites entries through Badger's own writes: on a durable store it runs
// under the write lock too.
//
// A sync that fails leaves the writes committed (readable) but not known
// to be on disk: they are answered with an error wrapping [ErrNotSynced],
// and an owner write (retried) is written again and synced; a sync is not
// simply tried again, as Linux may report a failed writeback only once.

import (
	"errors"
	"fmt"
)

// errDurableInMemory is why a store in memory cannot be durable.
var errDurableInMemory = errors.New("a store in memory cannot be durable")

// SetDurable makes the store durable (on true) or not (false, the default
// of [Open]): see the top of durable.go for what a durable store syncs and
// when. A store in memory or read-only cannot be durable: SetDurable(true)
// returns an error and changes nothing. Call it before the store's first
// write (a runner's New does); a write in flight while it changes may be
// synced or not.
func (s *Store) SetDurable(on bool) error {
	switch {
	case !on:
	case s.dir == "":
		return fmt.Errorf("durable store: %w", errDurableInMemory)
	case s.readOnly:
		return errReadOnly("durable store")
	}
	s.durable.Store(on)
	return nil
}

// Durable reports whether the store is durable ([Store.SetDurable]).
func (s *Store) Durable() bool { return s.durable.Load() }

// Syncs returns how many syncs to stable storage the store has made for
// its writes since [Open]: 0 unless it is durable. Safe for concurrent
// use.
func (s *Store) Syncs() int64 { return s.syncs.Load() }

// syncLocked syncs Badger's logs if the store is durable; s.mu is held, so
// no commit comes between the ones it covers and the sync.
func (s *Store) syncLocked(op string) error {
	if !s.durable.Load() {
		return nil
	}
	err := s.db.Sync()
	if err == nil && s.syncFault != nil {
		err = s.syncFault()
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %s", op, ErrNotSynced, firstLine(err.Error()))
	}
	s.syncs.Add(1)
	return nil
}
