package persistence

// A store opened on a full disk. Badger's Open always creates a new
// memtable log and a new value-log file (52.8 MiB at the store's sizes,
// allocated at once: persistence/internal/ristretto), and writes its LOCK
// file: on a full disk it fails with ENOSPC, and a node restarted then (a
// deploy, a crash) would serve nothing, not even the reads a full disk
// leaves possible. So [Open], when Badger fails for want of space, opens
// it read-only instead (it creates nothing: readonly.go). A store a crash
// or a power cut left opens so too: upstream Badger refuses, read-only, a
// memtable log with room past its entries (every log a process was killed
// with: they are preallocated), so that its last writes could not be read
// without writing; persistence/internal/badger replays such a log up to
// its last whole entry, as a writable Open does before it truncates it,
// and closes it untouched. The jobs such a crash left live are the
// runner's to fail once it can write (engine.New).
//
// Such a store serves every read; every write fails with an error
// wrapping [ErrDiskFull] (serve: 507, as below the reserve) until a write
// finds room: free space, as the disk watch last measured it, for
// Badger's next files (rotateSize), and tries no closer than a backoff
// (retryOpenLocked). The write then closes the read-only Badger and opens
// it for writing, with the reads paused as for a reopen (reopen.go); if
// that fails again, Badger is opened read-only again. A reopen after a
// failed sync (reopen.go) that cannot open Badger for writing (the disk
// still failing, or full) opens it read-only the same way, so that reads
// go on; its writes fail with an error wrapping ErrNotSynced (or
// ErrDiskFull) until a try opens it for writing.

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// openFull opens the store in dir read-only after Badger failed to open it
// for want of space (full: that error). When it cannot (a new store has no
// MANIFEST to read), the error wraps ErrDiskFull and full.
func openFull(dir string, opt Options, log badger.Logger, rec *Recovery, full error) (*badger.DB, error) {
	if err := prepareDir(dir, rec, opt.Durable); err != nil { // the empty files the failed Open left
		return nil, err
	}
	if err := checkClean(dir, true); err != nil {
		return nil, fmt.Errorf("%w: %w (and it cannot be opened read-only: %s)", ErrDiskFull, full, firstLine(err.Error()))
	}
	db, err := openBadger(opt.badger(dir, log).WithReadOnly(true))
	if err != nil {
		return nil, fmt.Errorf("%w: %w (and it cannot be opened read-only: %s)", ErrDiskFull, full, firstLine(err.Error()))
	}
	return db, nil
}

// OpenedFull reports whether Badger is open read-only because it could
// not be opened for writing, the disk full or failing (see the top of
// fullopen.go): every write fails until one finds it can be.
// Safe for concurrent use.
func (s *Store) OpenedFull() bool { return s.fullRO.Load() }

// retryOpenLocked opens Badger for writing again, for a write, when it is
// open read-only (fullRO) or not at all (down): on a full disk only once
// the watch measured room for Badger's next files (rotateSize); and, as a
// failed Open of Badger's leaves goroutines of its own running, with
// tries apart by a backoff from 1 s to openBackoffMax. A try that finds no
// room closes the gate until the watch's next measure (diskFailed). s.mu
// is held.
func (s *Store) retryOpenLocked(op string) error {
	refused := func() error {
		if s.roFull {
			return fmt.Errorf("%s: %w: the store is open read-only on a full disk", op, ErrDiskFull)
		}
		return fmt.Errorf("%s: %w", op, s.downErr())
	}
	if s.roFull {
		if err := s.gate(op); err != nil {
			return err
		}
		if s.disk.free.Load() < rotateSize {
			return refused()
		}
	}
	now := time.Now()
	if now.Sub(s.openTried) < s.openBackoff {
		return refused()
	}
	s.openTried = now
	err := s.reopenLocked()
	if err == nil {
		s.openBackoff = 0
		return nil
	}
	s.openBackoff = min(max(2*s.openBackoff, time.Second), openBackoffMax)
	err = fmt.Errorf("%s: %w", op, err)
	s.diskFailed(err)
	return err
}

// openBackoffMax is the longest wait between two tries to open Badger for
// writing again.
const openBackoffMax = 2 * time.Second

// openWritable opens Badger for writing; if it cannot (no room for its new
// files, a disk that fails), read-only, so that reads go on (reopenLocked's):
// then it returns Badger and an error wrapping ErrDiskFull, or errDown.
func (s *Store) openWritable(rec *Recovery) (*badger.DB, error) {
	db, err := openBadger(s.opt.badger(s.dir, s.log).WithSyncWrites(s.syncWrites))
	if errors.Is(err, errEmptyValueLog) {
		if err := prepareDir(s.dir, rec, s.opt.Durable || s.durable.Load()); err != nil {
			return nil, err
		}
		db, err = openBadger(s.opt.badger(s.dir, s.log).WithSyncWrites(s.syncWrites))
	}
	if err == nil {
		s.fullRO.Store(false)
		return db, nil
	}
	ro, rerr := openFull(s.dir, s.opt, s.log, rec, err)
	if rerr != nil {
		return nil, rerr
	}
	s.fullRO.Store(true)
	if s.roFull = isDiskFull(err); s.roFull {
		return ro, fmt.Errorf("%w: no room to open the store for writing", ErrDiskFull)
	}
	return ro, fmt.Errorf("%w: open for writing: %s", errDown, firstLine(err.Error()))
}
