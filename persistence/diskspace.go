package persistence

// The free space of the store's file system. A store on disk that is told to
// watch it ([Store.WatchDisk]) measures it (statfs) every DiskWatch.Every,
// and at once when its own writes may have used up its estimate of the room
// above the reserve; [Store.DiskFull] is one atomic load, for the runner to
// ask before every submit and every dispatch. The store's writes themselves
// are not refused below the reserve: the runner stops making new ones (no
// new job, no new fetch) and lets the few in flight, cancels and settles
// through, into the reserve. A write that still finds the disk full fails
// with an error wrapping [ErrDiskFull] (Badger's files are preallocated:
// persistence/internal/ristretto), which the writer holds and retries as
// any other failed write.

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// memLogFileSize is the size Badger opens a memtable's log at: its arena,
// the memtable and room for one more batch (15% of it) of entries and
// skiplist nodes.
const memLogFileSize = memTableSize + 2*(15*memTableSize/100)

// openFilesSize is what the store takes when it opens its next files:
// [numMemtables] memtable logs and a value-log file, at the sizes it opens
// Badger with (its blocks allocated at once). It is
// batchtype.DefaultDiskReserve (a test checks).
const openFilesSize = numMemtables*memLogFileSize + 2*valueLogFileSize

// Defaults of [DiskWatch].
const (
	DefaultDiskEvery    = time.Second
	DefaultDiskLogEvery = time.Minute
)

// DiskWatch is what [Store.WatchDisk] watches for.
type DiskWatch struct {
	// Reserve is the free space, in bytes, kept on the store's file
	// system: below it [Store.DiskFull] reports true. 0 or less: none
	// (the watch stops).
	Reserve int64
	// Every is how often the free space is measured, besides at once when
	// the store's own writes (counted twice: a log and a table) may have
	// used up the room above the reserve. Default [DefaultDiskEvery].
	Every time.Duration
	// LogEvery is how often, at most, a Warn line is logged about the disk:
	// one when it goes below the reserve, repeated while it stays there,
	// and an Info when it has room again. A disk that goes below again
	// within LogEvery of the last line (it flaps) logs nothing then; the
	// next line counts those flaps. Default [DefaultDiskLogEvery].
	LogEvery time.Duration
	// Now is the clock of LogEvery and of [DiskState.Since]. Default
	// time.Now.
	Now func() time.Time
}

// DiskState is the store's file system's free space as last measured.
type DiskState struct {
	Free    int64     // bytes available to the store's process (statfs f_bavail)
	Reserve int64     // DiskWatch.Reserve; 0: not watched
	Full    bool      // Free < Reserve, or a write found no room and Free has not grown since (see Store.DiskFull)
	Since   time.Time // when Full last changed (zero before the first measure)
}

// The log keys of the disk's lines.
const (
	keyFreeBytes    = "free_bytes"
	keyReserveBytes = "reserve_bytes"
	keyFullSeconds  = "full_seconds"
	keyRoomBytes    = "room_bytes"
	keyFlaps        = "flaps_since_last_line"
	keyDiskErr      = "err"
)

// diskWatch is a Store's watch (the zero value watches nothing).
type diskWatch struct {
	mu      sync.Mutex // the fields below, and measure's logs
	cfg     DiskWatch
	state   DiskState
	lastLog time.Time
	started bool
	errLog  bool          // a statfs error was logged (once until one succeeds)
	poke    chan struct{} // wakes the watcher to measure now
	statfs  func(dir string) (int64, error)
	// full mirrors state.Full, left the estimate of the bytes above the
	// reserve: read lock-free by DiskFull and every write.
	full atomic.Bool
	left atomic.Int64
	// free is the free space at the last measure less what the store has
	// written since (twice), or 0 once a write failed for want of space;
	// floor is the least free space at which a write goes to Badger
	// (gate): both lock-free.
	free  atomic.Int64
	floor atomic.Int64
	// failed is set by a write that found no room (diskFailed); the next
	// measure takes it: then the disk counts as full (failing) until the
	// free space is roomFor(failFree), failFree being the free space that
	// measure found.
	failed   atomic.Bool
	failing  bool
	failFree int64
	// quiet: the disk went full within LogEvery of the last line, which
	// was not repeated (a flap); flaps counts those since the last line.
	quiet bool
	flaps int
}

// roomAfter is the free space at which a disk that failed a write with
// failFree bytes free counts as having room again: a memtable log's more
// (the largest file Badger preallocates), or all Badger needs to open its
// next files (rotateSize), whichever is less. A failure with more than
// rotateSize free (a quota, a file system that fails writes by its own
// count) does not hold the disk full past the next measure.
func roomAfter(failFree int64) int64 { return min(failFree+memLogFileSize, rotateSize) }

// rotateSize is what Badger needs free to go on writing: its next
// value-log file and memtable log. Below it (or below the reserve, if
// that is smaller) no write goes to Badger: see gate.
const rotateSize = 2*valueLogFileSize + memLogFileSize

// noWatch is the room left above no reserve: never used up.
const noWatch = math.MaxInt64 / 4

// init readies an unwatched store's watch (Open).
func (d *diskWatch) init() {
	d.poke = make(chan struct{}, 1)
	d.left.Store(noWatch)
	d.free.Store(noWatch)
}

// WatchDisk starts (or changes, or with a Reserve of 0 stops) the watch of
// the free space of the store's file system: see [DiskWatch] and
// [Store.DiskFull]. It measures once before it returns, and returns that
// measure's error, if any (the watch goes on). A store in memory has no
// disk: it does nothing. A Reserve as large as the file system less the
// store's own files (all it could ever have free, were every other file
// deleted) could never be kept: WatchDisk refuses it with an error
// wrapping [ErrDiskReserve] that names the sizes, and changes nothing. Safe for
// concurrent use.
func (s *Store) WatchDisk(w DiskWatch) error {
	if s.dir == "" {
		return nil
	}
	if w.Reserve > 0 {
		size, err := statfsSize(s.dir)
		own, uerr := dirUsage(s.dir)
		if err == nil && uerr == nil && w.Reserve >= size-own {
			return fmt.Errorf("watch disk: %w: a reserve of %d bytes, a file system of %d of which the store's own files take %d",
				ErrDiskReserve, w.Reserve, size, own)
		}
	}
	if w.Every <= 0 {
		w.Every = DefaultDiskEvery
	}
	if w.LogEvery <= 0 {
		w.LogEvery = DefaultDiskLogEvery
	}
	if w.Now == nil {
		w.Now = time.Now
	}
	d := &s.disk
	d.mu.Lock()
	d.cfg = w
	if d.statfs == nil {
		d.statfs = statfsFree
	}
	start := !d.started && w.Reserve > 0 && !s.closed.Load()
	if start {
		d.started = true
	}
	d.mu.Unlock()
	err := s.measureDisk()
	if start {
		s.wg.Add(1)
		go s.diskLoop()
	}
	return err
}

// DiskFull reports whether the store's file system had less free space than
// the reserve at its last measure ([Store.WatchDisk]), or a write found no
// room (another process filled the disk, or the reserve is smaller than
// what Badger's next file needs) and the free space has not grown by a
// memtable log's size since; always false when it is not watched. It is
// one atomic load. Safe for concurrent use.
func (s *Store) DiskFull() bool { return s.disk.full.Load() }

// Disk returns the last measure of the store's file system's free space.
// Safe for concurrent use.
func (s *Store) Disk() DiskState {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	return s.disk.state
}

// diskWritten counts n bytes the store has committed against the room left
// above the reserve, twice (a log, then a table), and wakes the watcher
// once it is used up. Any goroutine; lock-free.
func (s *Store) diskWritten(n int64) {
	d := &s.disk
	if n <= 0 || s.noDiskCheck {
		return
	}
	d.free.Add(-2 * n)
	if d.left.Add(-2*n) < 0 {
		select {
		case d.poke <- struct{}{}:
		default:
		}
	}
}

// diskLoop measures the free space every Every, and when poked, until the
// store closes or the watch is stopped.
func (s *Store) diskLoop() {
	defer s.wg.Done()
	d := &s.disk
	d.mu.Lock()
	every := d.cfg.Every
	d.mu.Unlock()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-d.poke:
		}
		_ = s.measureDisk()
		d.mu.Lock()
		stop := d.cfg.Reserve <= 0
		if e := d.cfg.Every; e != every {
			every = e
			t.Reset(every)
		}
		if stop {
			d.started = false
		}
		d.mu.Unlock()
		if stop {
			return
		}
	}
}

// measureDisk measures the free space, sets the state and logs its changes
// (rate-limited).
func (s *Store) measureDisk() error {
	d := &s.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	log := s.log.l.Load()
	if d.cfg.Reserve <= 0 {
		d.left.Store(noWatch)
		d.free.Store(noWatch)
		d.floor.Store(0)
		d.full.Store(false)
		d.failed.Store(false)
		d.failing = false
		d.state = DiskState{Free: d.state.Free}
		return nil
	}
	free, err := d.statfs(s.dir)
	failedNow := d.failed.Swap(false)
	if err != nil {
		if failedNow {
			d.failed.Store(true) // for the next measure that succeeds
		}
		if !d.errLog && log != nil {
			log.Warn("measure free disk space", slog.String(keyDiskErr, err.Error()))
		}
		d.errLog = true
		return err
	}
	d.errLog = false
	now, reserve := d.cfg.Now(), d.cfg.Reserve
	if failedNow {
		d.failing, d.failFree = true, free
	}
	if d.failing && free >= roomAfter(d.failFree) {
		d.failing = false
	}
	full := free < reserve || d.failing
	was := d.state.Full
	d.state.Free, d.state.Reserve = free, reserve
	d.left.Store(free - reserve)
	d.floor.Store(min(reserve, rotateSize))
	d.free.Store(free)
	d.full.Store(full)
	switch {
	case full && (!was || d.state.Since.IsZero()):
		d.state.Full, d.state.Since = true, now
		if !d.lastLog.IsZero() && now.Sub(d.lastLog) < d.cfg.LogEvery {
			// A disk that flaps: one line per LogEvery, which counts them.
			d.quiet = true
			d.flaps++
			break
		}
		d.lastLog, d.quiet = now, false
		flaps := slog.Int(keyFlaps, d.flaps)
		d.flaps = 0
		switch {
		case log == nil:
		case free < reserve:
			log.Warn("disk below its reserve: new jobs refused, running jobs held until there is room",
				slog.Int64(keyFreeBytes, free), slog.Int64(keyReserveBytes, reserve), flaps)
		default:
			log.Warn("disk full: a write found no room above the reserve; new jobs refused, running jobs held until there is room",
				slog.Int64(keyFreeBytes, free), slog.Int64(keyReserveBytes, reserve), slog.Int64(keyRoomBytes, roomAfter(d.failFree)), flaps)
		}
	case full && now.Sub(d.lastLog) >= d.cfg.LogEvery:
		d.lastLog, d.quiet = now, false
		msg := "disk still below its reserve"
		if free >= reserve {
			msg = "disk still full: no room since a write failed for it"
		}
		if log != nil {
			log.Warn(msg, slog.Int64(keyFreeBytes, free), slog.Int64(keyReserveBytes, reserve),
				slog.Int64(keyFullSeconds, int64(now.Sub(d.state.Since).Seconds())))
		}
	case !full && was:
		if log != nil && !d.quiet { // a flap's return is as quiet as its fall
			log.Info("disk has room again: jobs go on", slog.Int64(keyFreeBytes, free), slog.Int64(keyReserveBytes, reserve),
				slog.Int64(keyFullSeconds, int64(now.Sub(d.state.Since).Seconds())))
		}
		d.state.Full, d.state.Since = false, now
	case d.state.Since.IsZero():
		d.state.Since = now
	}
	return nil
}

// isDiskFull reports whether err says the disk is full (Badger's wrapped
// errors keep only the text).
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), syscall.ENOSPC.Error()) || strings.Contains(err.Error(), syscall.EDQUOT.Error())
}

// SetDiskStatfs makes the watch measure the free space with statfs instead
// of the file system's (nil: the file system's again). It stands in for a
// full disk in tests where the real thing cannot be arranged. Safe to call
// at any time; it applies from the next measure.
func (s *Store) SetDiskStatfs(statfs func(dir string) (free int64, err error)) {
	if statfs == nil {
		statfs = statfsFree
	}
	s.disk.mu.Lock()
	s.disk.statfs = statfs
	s.disk.mu.Unlock()
}

// MeasureDisk measures the free space now, as the watch does every
// DiskWatch.Every, and returns the state: for tests, which wait for no
// timer. Safe for concurrent use.
func (s *Store) MeasureDisk() (DiskState, error) {
	err := s.measureDisk()
	return s.Disk(), err
}

// gate refuses a write, before it reaches Badger, while the free space may
// be below the floor (the reserve, or what Badger needs to open its next
// files if that is less), and wakes the watcher to measure it. Badger's
// value log does not take back a write that failed for want of space: it
// has moved its write offset past it, and every write tried while the disk
// is full moves it further and leaves a hole of zeros in the file, past
// which a reopen or a value-log GC sees nothing. So a disk that filled is
// not written to again until a measure finds room. Lock-free.
func (s *Store) gate(op string) error {
	d := &s.disk
	if s.noDiskCheck || d.free.Load() >= d.floor.Load() {
		return nil
	}
	select {
	case d.poke <- struct{}{}:
	default:
	}
	return fmt.Errorf("%s: %w", op, ErrDiskFull)
}

// diskFailed takes the error of a write that reached Badger: one that
// failed for want of space closes the gate until the next measure, and
// makes the disk count as full until the free space grows (roomAfter).
func (s *Store) diskFailed(err error) {
	if err == nil || !errors.Is(err, ErrDiskFull) {
		return
	}
	s.disk.free.Store(0)
	s.disk.failed.Store(true)
	select {
	case s.disk.poke <- struct{}{}:
	default:
	}
}
