package persistence

// After a failed sync (fsyncgate). When fsync fails with EIO, Linux has
// already marked the file's dirty pages clean: it dropped them from the
// writeback, and reports the failure once. The file on disk then holds a
// hole (zeros, or older bytes) where the write that failed was, while the
// page cache may still show the write. A durable store answers that write
// as a failure (ErrNotSynced), and that is not enough: Badger would go on
// appending to the same memtable log and value-log file, behind the hole.
// Its Open reads the newest value-log file and every memtable log from the
// start and stops at the first entry that does not check (vlog.go,
// memtable.go): every later write in the file, acknowledged and synced,
// would be cut off after a power cut, and after a clean restart too (the
// value log). And a page that held both the failed write and later
// entries, dirtied again, would carry the failed write to disk with them.
//
// So no write reaches Badger's current files after a failed sync: the
// store closes Badger and opens it again before its next write
// (reopenLocked). Close flushes the memtables from memory to new, synced
// tables and deletes their logs; Open starts a new memtable log and a new
// value-log file ("Don't write to the old log file. Always create a new
// one", value.go) and syncs the directory; the next durable sync syncs the
// new files' entries (dirsync.go). What was durable stays so, the write
// that failed is written again (an owner write is held and retried,
// writer_retry.go) or taken back (a job's creation: CreateJob deletes its
// rows before the reopen, so the flush stores the deletion), and every
// later write goes into files with no hole. A value-log file with a hole
// is then an old one: Open does not read it, and a value-log GC of it
// moves what precedes the hole, which holds everything live in it (the
// write in the hole was written again elsewhere).
//
// Reads wait for the reopen (at most reopenReadWait, then they fail
// naming it): the gate pauses new reads and waits for those in flight
// before Badger closes. If Badger does not open again (the disk still
// failing), the store is down: every write and read fails with an error
// wrapping ErrNotSynced, and each write, and a read now and then, tries to
// open it again, so that the runner goes on by itself once the disk works.
//
// A durable value-log GC whose moved entries were not known durable keeps
// an iterator open on the old Badger (gcHolds): it is closed before the
// reopen, which lets Badger delete the collected file while Close is
// about to flush the moved entries; a power cut in that moment, after a
// compaction of Badger's own synced the directory, could lose them (a
// failed sync and a failed GC sync at once, then a cut within
// milliseconds).

import (
	"fmt"
	"time"
)

// reopenReadWait bounds how long a read waits for a reopen (a read made
// inside another read's callback waits this long, then fails, so that the
// outer read ends and the reopen goes on).
const (
	reopenReadWait = 3 * time.Second
	reopenReadPoll = 100 * time.Millisecond
)

// errDown is why a store whose Badger did not open again refuses.
var errDown = fmt.Errorf("%w: disk error: %w: the store is reopening", ErrUnavailable, ErrNotSynced)

// errDownFull is errDown when Badger could open neither for writing nor
// read-only (fullopen.go) on a full disk.
var errDownFull = fmt.Errorf("%w: %w: the store cannot open on a full disk", ErrUnavailable, ErrDiskFull)

// downErr is why the store refuses while Badger is down.
func (s *Store) downErr() error {
	if s.downFull.Load() {
		return errDownFull
	}
	return errDown
}

// Reopens returns how many times the store has closed and opened Badger
// again after a failed sync (see the top of reopen.go). Safe for
// concurrent use.
func (s *Store) Reopens() int64 { return s.reopens.Load() }

// SetOpenFault makes each reopen of Badger after a failed sync fail with
// the error fault returns, while fault is set and returns non-nil: the
// store stays down (see the top of reopen.go). A nil fault clears it. It
// stands in for a disk that still fails (tests). Safe to call at any time.
func (s *Store) SetOpenFault(fault func() error) {
	if fault == nil {
		s.openFault.Store(nil)
		return
	}
	s.openFault.Store(&fault)
}

// syncFailedLocked notes a failed sync: Badger is reopened before the
// store's next write (openLocked). s.mu is held.
func (s *Store) syncFailedLocked() { s.mustReopen = true }

// openLocked readies Badger for a write: it reopens it after a failed sync
// (reopenLocked), or opens it again if an earlier reopen failed; it
// returns an error when Badger is not open. s.mu is held.
func (s *Store) openLocked(op string) error {
	switch {
	case s.mustReopen:
		if err := s.reopenLocked(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	case s.down || s.fullRO.Load():
		if err := s.retryOpenLocked(op); err != nil {
			return err
		}
	}
	if s.db.IsClosed() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	return nil
}

// reopenLocked closes Badger (if it is open) and opens it again, with the
// reads paused (see the top of reopen.go). On failure the store is down;
// on a full disk Badger is open read-only and the error wraps ErrDiskFull
// (fullopen.go). s.mu is held.
func (s *Store) reopenLocked() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if !s.down {
		s.reads.pause()
		for _, h := range s.gcHolds {
			h.release()
		}
		s.gcHolds = nil
		s.levels = nil
		if !s.fullRO.Load() {
			s.levels = tableLevels(s.db)
		}
		if err := s.db.Close(); err != nil {
			s.log.Warningf("reopen after a failed sync: close: %s", firstLine(err.Error()))
		}
		s.down = true
		s.downNow.Store(true)
		s.reads.setDown(true)
	}
	if s.levels != nil { // the MANIFEST as Badger had it (manifest.go)
		if _, err := relistTables(s.dir, s.levels); err != nil {
			return fmt.Errorf("%w: %s", errDown, firstLine(err.Error()))
		}
		s.levels = nil
	}
	if f := s.openFault.Load(); f != nil {
		if err := (*f)(); err != nil {
			s.downFull.Store(isDiskFull(err))
			return fmt.Errorf("%w: %s", s.downErr(), firstLine(err.Error()))
		}
	}
	var rec Recovery
	if err := prepareDir(s.dir, &rec, s.opt.Durable || s.durable.Load()); err != nil {
		return fmt.Errorf("%w: %s", errDown, firstLine(err.Error()))
	}
	db, err := s.openWritable(&rec)
	if db == nil {
		s.downFull.Store(isDiskFull(err))
		return fmt.Errorf("%w: %s", s.downErr(), firstLine(err.Error()))
	}
	s.downFull.Store(false)
	full := err // read-only on a full disk (fullopen.go)
	f, err := newestLogs(s.dir)
	if err != nil {
		_ = db.Close()
		return fmt.Errorf("%w: %s", errDown, firstLine(err.Error()))
	}
	s.db, s.logFids = db, f
	s.dirDirty = true // the new files' entries: synced by the next durable sync
	s.down, s.mustReopen = false, false
	s.reopens.Add(1)
	s.noteRecovery(func(r *Recovery) {
		r.UnlistedTables += rec.UnlistedTables
		r.RelistedTables += rec.RelistedTables
		r.LostTables += rec.LostTables
		r.EmptyLogs += rec.EmptyLogs
	})
	s.downNow.Store(false)
	s.reads.setDown(false)
	s.reads.resume()
	return full
}

// openForRead tries, from a read, to open a store that is down, if no
// write holds the store's lock (a write tries it itself).
func (s *Store) openForRead() {
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if s.down {
		_ = s.retryOpenLocked("open store")
	}
}
