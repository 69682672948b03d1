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
//     group's memtable aside unsynced, and a value-log file that filled
//     is set aside unsynced too: so each sync also syncs the memtable logs
//     and value-log files that became old since the last sync
//     (syncRotatedLocked), from the newest ones that sync saw.
//   - a job's creation ([Store.CreateJob]): synced on its own, under the
//     write lock.
//
// Readers see a job only once its creation is synced: from its commit
// until its sync succeeds (or, if that sync failed, until a later write of
// the job is synced), [Store.Job], [Store.JobWithTargets], the job lists,
// [Store.JobsByIDPrefix] and [Store.JobByKey] do not find it (unsyncedJobs), so nobody reads, or
// is answered with, a job whose creation was never acknowledged.
//
// A Touch, a sweep, an eviction, the callers index and the node tags are
// not acknowledgements and are not synced (they are made durable by the
// next sync, or by Badger's own flushes).
//
// Value-log garbage collection moves the live entries of an old value-log
// file through Badger's own writes (not synced) and then deletes the old
// file: a power cut after the delete would lose entries that were durable.
// On a durable store it runs under the write lock (its writes must not come
// between a group's commit and its sync either) with an iterator open,
// which makes Badger defer the delete until the last iterator closes; once
// the moved entries are durable (every memtable they may have filled is
// flushed to a synced table, and the current one synced), the iterator is
// closed and the file goes. If that cannot be made sure (a sync fails, a
// flush takes longer than gcFlushWait), the iterator stays open, and the
// old file with it, until the store closes.
//
// A sync that fails leaves the writes committed (readable) but not known
// to be on disk: they are answered with an error wrapping [ErrNotSynced],
// and an owner write (retried) is written again and synced; a sync is not
// simply tried again, as Linux may report a failed writeback only once,
// and no write goes into the failed files again: the store reopens Badger
// first (reopen.go).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
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
	if on {
		s.mu.Lock()
		defer s.mu.Unlock()
		f, err := newestLogs(s.dir)
		if err != nil {
			return fmt.Errorf("durable store: %w", err)
		}
		s.logFids = f
		// The logs Open created: their entries too (dirsync.go).
		if err := s.syncDirLocked(true); err != nil {
			return fmt.Errorf("durable store: %w", err)
		}
	}
	s.durable.Store(on)
	s.abandoned.Store(false)
	return nil
}

// SetSyncFault makes each sync of a durable store fail, after Badger's
// own sync, with the error fault returns, while fault is set and returns
// non-nil; a nil fault clears it. It stands in for a disk whose writeback
// fails (tests). Safe to call at any time.
func (s *Store) SetSyncFault(fault func() error) {
	if fault == nil {
		s.syncFault.Store(nil)
		return
	}
	s.syncFault.Store(&fault)
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
	if err == nil {
		err = s.syncRotatedLocked()
	}
	if f := s.syncFault.Load(); err == nil && f != nil {
		err = (*f)()
	}
	if err != nil {
		s.syncFailedLocked() // no write behind the hole (reopen.go)
		return fmt.Errorf("%s: %w: %s", op, ErrNotSynced, firstLine(err.Error()))
	}
	s.syncs.Add(1)
	return nil
}

// unsyncedJobs is the set of jobs whose creation a durable store has
// committed but not synced. Safe for concurrent use; has costs an atomic
// load while the set is empty.
type unsyncedJobs struct {
	n   atomic.Int64
	mu  sync.RWMutex
	ids map[[idLen]byte]struct{}
}

func (u *unsyncedJobs) add(id [idLen]byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ids == nil {
		u.ids = make(map[[idLen]byte]struct{})
	}
	if _, ok := u.ids[id]; !ok {
		u.ids[id] = struct{}{}
		u.n.Add(1)
	}
}

func (u *unsyncedJobs) remove(id [idLen]byte) {
	if u.n.Load() == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.ids[id]; ok {
		delete(u.ids, id)
		u.n.Add(-1)
	}
}

func (u *unsyncedJobs) has(id [idLen]byte) bool {
	if u.n.Load() == 0 {
		return false
	}
	u.mu.RLock()
	defer u.mu.RUnlock()
	_, ok := u.ids[id]
	return ok
}

// logFids are the ids of the newest memtable log (NNNNN.mem) and value-log
// file (NNNNNN.vlog) of a store's directory; Badger numbers each new one
// of them the last one's id plus one.
type logFids struct{ mem, vlog int }

// memLogPath and vlogPath are Badger's names of its memtable logs and
// value-log files (memtable.go, value.go).
func memLogPath(dir string, fid int) string {
	return filepath.Join(dir, fmt.Sprintf("%05d.mem", fid))
}

func vlogPath(dir string, fid int) string {
	return filepath.Join(dir, fmt.Sprintf("%06d.vlog", fid))
}

// newestLogs finds the newest memtable log and value-log file in dir.
func newestLogs(dir string) (logFids, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return logFids{}, err
	}
	var f logFids
	for _, e := range es {
		name := e.Name()
		var id int
		switch filepath.Ext(name) {
		case ".mem":
			if _, err := fmt.Sscanf(name, "%d.mem", &id); err == nil {
				f.mem = max(f.mem, id)
			}
		case ".vlog":
			if _, err := fmt.Sscanf(name, "%d.vlog", &id); err == nil {
				f.vlog = max(f.vlog, id)
			}
		}
	}
	return f, nil
}

// syncRotatedLocked syncs the memtable logs and value-log files that
// Badger set aside since the last sync (DB.Sync syncs only the newest of
// each): from the newest one the last sync saw, every one that now has a
// successor; then, if Badger created one, the directory (dirsync.go). It
// costs a stat of each kind when none was set aside. A memtable log that
// is gone was flushed: Badger syncs the table and the manifest before it
// deletes the log. s.mu is held.
func (s *Store) syncRotatedLocked() error {
	mem, err := syncRotated(s.logFids.mem, func(fid int) string { return memLogPath(s.dir, fid) })
	created := mem != s.logFids.mem
	s.logFids.mem = mem
	if err != nil {
		return err
	}
	vlog, err := syncRotated(s.logFids.vlog, func(fid int) string { return vlogPath(s.dir, fid) })
	created = created || vlog != s.logFids.vlog
	s.logFids.vlog = vlog
	if err != nil {
		return err
	}
	return s.syncDirLocked(created)
}

// syncRotated syncs the files path(fid), path(fid+1), ... that have a
// successor, and returns the newest fid (the one without).
func syncRotated(fid int, path func(int) string) (int, error) {
	for {
		if _, err := os.Stat(path(fid + 1)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fid, nil
			}
			return fid, err
		}
		if err := syncFile(path(fid)); err != nil {
			return fid, err
		}
		fid++
	}
}

// syncFile syncs the file at path to stable storage (its pages written
// through Badger's mappings are the file's: fsync writes them back); a
// file that is gone (a flushed memtable's log, a collected value-log file)
// needs none.
func syncFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	serr := f.Sync()
	if cerr := f.Close(); serr == nil {
		serr = cerr
	}
	return serr
}

// gcFlushWait bounds how long a durable store's value-log GC waits for
// Badger to flush the memtables its moves may have filled; gcFlushPoll is
// how often it looks.
const (
	gcFlushWait = 30 * time.Second
	gcFlushPoll = 5 * time.Millisecond
)

// gcHold is an iterator a durable GC holds open, so that Badger keeps the
// value-log file it collected (see the top of durable.go).
type gcHold struct {
	txn *badger.Txn
	it  *badger.Iterator
}

func (h gcHold) release() {
	h.it.Close()
	h.txn.Discard()
}

// durableGC is one value-log GC of a durable store (see the top of
// durable.go). gcLoop's goroutine only.
func (s *Store) durableGC() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.openLocked("value-log gc"); err != nil {
		return err
	}
	txn := s.db.NewTransaction(false)
	h := gcHold{txn, txn.NewIterator(badger.IteratorOptions{})}
	err := s.db.RunValueLogGC(0.5)
	if err != nil { // nothing moved, nothing deleted
		h.release()
		return err
	}
	if err := s.gcDurableLocked(); err != nil {
		s.gcHolds = append(s.gcHolds, h)
		s.log.Warningf("value-log gc: the collected file is kept until the store closes (its moved entries not known durable)")
		return err
	}
	h.release()
	return nil
}

// gcDurableLocked makes what a GC moved durable: it waits until Badger has
// flushed every memtable but the current one (a flush syncs its table
// before it deletes the memtable's log), then syncs. s.mu is held.
func (s *Store) gcDurableLocked() error {
	for deadline := time.Now().Add(gcFlushWait); ; time.Sleep(gcFlushPoll) {
		n, err := memtableLogs(s.dir)
		if err != nil {
			return err
		}
		if n <= 1 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("value-log gc: %d memtables not flushed after %s", n-1, gcFlushWait)
		}
	}
	return s.syncLocked("value-log gc")
}

// memtableLogs counts the memtable logs (*.mem) in dir: the current
// memtable's, and one per memtable not yet flushed.
func memtableLogs(dir string) (int, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("value-log gc: %w", err)
	}
	n := 0
	for _, e := range es {
		if filepath.Ext(e.Name()) == ".mem" {
			n++
		}
	}
	return n, nil
}

// releaseGC closes the iterators durable GCs kept open, as the store
// closes: once more it makes what they moved durable first (Badger's Close
// then flushes and syncs the rest). gcLoop's goroutine only.
func (s *Store) releaseGC() {
	if len(s.gcHolds) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.gcDurableLocked(); err != nil {
		s.log.Warningf("value-log gc: closing with collected files whose moved entries are not known durable")
	}
	for _, h := range s.gcHolds {
		h.release()
	}
	s.gcHolds = nil
}
