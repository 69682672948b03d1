package persistence

// A store opened on a full disk. Badger's Open always creates a new
// memtable log and a new value-log file (52.8 MiB at the store's sizes,
// allocated at once: persistence/internal/ristretto), and writes its LOCK
// file: on a full disk it fails with ENOSPC, and a node restarted then (a
// deploy, a crash) would serve nothing, not even the reads a full disk
// leaves possible. So [Open], when Badger fails for want of space, opens
// it read-only instead (it creates nothing: readonly.go), if the store was
// closed cleanly (a memtable log left by a crash cannot be read without
// writing: then Open fails with the ENOSPC error, naming the space).
//
// Such a store serves every read; every write fails with an error
// wrapping [ErrDiskFull] (serve: 507, as below the reserve) until a write
// finds room: free space, as the disk watch last measured it, for
// Badger's next files (rotateSize; unwatched, at most once every
// fullRetryEvery). The write then closes the read-only Badger and opens it
// for writing, with the reads paused as for a reopen (reopen.go); if that
// fails for want of space again, Badger is opened read-only again.

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// fullRetryEvery is how often, at most, a store opened read-only on a full
// disk tries to open Badger for writing (a failed Open of Badger's leaves
// goroutines of its own running).
const fullRetryEvery = 5 * time.Second

// openFull opens the store in dir read-only after Badger failed to open it
// for want of space (full: that error), if it was closed cleanly.
func openFull(dir string, log badger.Logger, rec *Recovery, full error) (*badger.DB, error) {
	if err := prepareDir(dir, rec); err != nil { // the empty files the failed Open left
		return nil, err
	}
	if err := checkClean(dir); err != nil {
		return nil, fmt.Errorf("%w (and it cannot be opened read-only: %s)", full, firstLine(err.Error()))
	}
	db, err := openBadger(badgerOptions(dir, log).WithReadOnly(true))
	if err != nil {
		return nil, fmt.Errorf("%w (and it cannot be opened read-only: %s)", full, firstLine(err.Error()))
	}
	return db, nil
}

// OpenedFull reports whether Badger is open read-only because the disk
// was full when the store opened it (see the top of fullopen.go): every
// write fails with an error wrapping [ErrDiskFull] until one finds room.
// Safe for concurrent use.
func (s *Store) OpenedFull() bool { return s.fullRO.Load() }

// fullLocked refuses a write while Badger is open read-only on a full disk,
// unless there may be room: then it opens Badger for writing (reopenLocked).
// A try that finds no room closes the gate until the watch's next measure
// (diskFailed); with no watch, tries are fullRetryEvery apart. s.mu is
// held.
func (s *Store) fullLocked(op string) error {
	if err := s.gate(op); err != nil {
		return err
	}
	now, free := time.Now(), s.disk.free.Load()
	if free < rotateSize || (free > noWatch/2 && now.Sub(s.fullTried) < fullRetryEvery) {
		return fmt.Errorf("%s: %w: the store opened read-only on a full disk", op, ErrDiskFull)
	}
	s.fullTried = now
	err := s.reopenLocked()
	if err != nil {
		err = fmt.Errorf("%s: %w", op, err)
		s.diskFailed(err)
	}
	return err
}

// openWritable opens Badger for writing; on a disk with no room for its
// new files, read-only (reopenLocked's): then it returns Badger and an error
// wrapping ErrDiskFull.
func (s *Store) openWritable(rec *Recovery) (*badger.DB, error) {
	db, err := openBadger(badgerOptions(s.dir, s.log).WithSyncWrites(s.syncWrites))
	if errors.Is(err, errEmptyValueLog) {
		if err := prepareDir(s.dir, rec); err != nil {
			return nil, err
		}
		db, err = openBadger(badgerOptions(s.dir, s.log).WithSyncWrites(s.syncWrites))
	}
	if err == nil || !isDiskFull(err) {
		s.fullRO.Store(false)
		return db, err
	}
	ro, rerr := openFull(s.dir, s.log, rec, err)
	if rerr != nil {
		return nil, rerr
	}
	s.fullRO.Store(true)
	return ro, fmt.Errorf("%w: no room to open the store for writing", ErrDiskFull)
}
