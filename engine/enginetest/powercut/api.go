// Package powercut (engine/enginetest/powercut) is a FUSE file system over
// a backing directory with LazyFS's semantics: what was not fsynced is lost
// when the power is cut.
//
// Everything written through the mount (write, pwrite, a shared writable
// mmap flushed by the kernel, ftruncate, fallocate) goes to the file
// system's own per-file page cache (4 KiB pages), not to the backing file;
// reads see that cache over the backing file. An fsync or fdatasync of a
// file (msync(MS_SYNC) reaches the daemon as one, after the kernel has
// written the mapping's dirty pages) writes that file's cached pages to
// the backing file and syncs it. A file's name is a directory entry: a
// create, mkdir, mknod, symlink, link, rename, unlink or rmdir is applied
// to the backing directory at once but journaled, and it becomes stable
// only when every directory it touched has been fsynced since (a rename
// across directories needs both). [FS.Cut] freezes the file system (no
// further operation reaches the backing directory: each fails with EIO),
// drops what was not synced (by its [CutMode]), undoes every directory
// change that is not stable (a new file is removed, a rename is undone, an
// unlinked file comes back with what of it was synced) and unmounts: the
// backing directory then holds exactly what a machine would have found
// after losing its power. [FS.Unmount] is a clean shutdown instead: it
// makes everything stable.
//
// So, as on Linux's ext4 with the strict reading of POSIX that LazyFS
// takes: a file created, written and fsynced whose directory was never
// fsynced is gone after a cut.
//
// What counts as a sync: fsync and fdatasync of a file or a directory,
// msync(MS_SYNC) (the kernel writes the mapping's dirty pages in the
// range, then sends an fsync of the whole file), and each write to a file
// opened O_SYNC or O_DSYNC (Badger's KEYREGISTRY). sync(2) and syncfs(2)
// never reach a FUSE file system (the kernel sends it nothing for them),
// nor does sync_file_range, nor msync(MS_ASYNC): like a mapping's dirty
// pages the kernel writes back on its own (on close, under memory
// pressure, after dirty_expire_centisecs), what they write lands in the
// cache, unsynced. No FUSE write-back cache is needed for msync: without
// it, every write(2) reaches the file system at once.
//
// Faults on demand: [FS.FailNextFsync] and [FS.FailFsyncs] (EIO, and the
// pages that fsync would have written are lost, as Linux loses them),
// [FS.SetWriteBudget] (ENOSPC past a byte budget). A process outside the
// test drives the same calls through [Options.ControlPath].
//
// A size change (ftruncate, fallocate) is part of a file's unsynced state
// like its pages: an fsync makes it stable, a cut drops it ([DropRandom]'s
// kept pages may still extend the file, as their writes would). Not
// modelled: modes, owners and times (applied to the backing entry at
// once, synced or not; a file reports its backing file's times); extended
// attributes are not supported. Random choices (which
// pages [DropRandom] keeps, where [TearLast] tears, which fsync
// [FS.FailFsyncs] fails) come from [Options.Seed], which Mount logs: the
// same seed and the same operations give the same result.
//
// Mounting needs Linux, root and /dev/fuse ([Available]); the mount is
// made with mount(2) directly (go-fuse's direct mount), no fusermount.
//
// A memory-mapped file of the mount must be used from another process
// than the one that serves it (run the store under test in a child
// process, as TestFS_Badger does): a page fault on the mapping waits for
// the server, and the Go runtime's stop-the-world, waiting for the
// faulting goroutine, never lets the server run. Plain reads and writes
// from the serving process are fine (tests do them).
package powercut

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// pageSize is the size of a page of the file system's cache: what
// [DropRandom] keeps or loses, what [TearLast] tears.
const pageSize = 4096

// Options configures [Mount]. The zero value is valid.
type Options struct {
	// Seed seeds every random choice (cuts, FailFsyncs). 0: a seed from
	// the clock. The seed in use is logged by Mount (via Logf) and
	// returned by [FS.Seed].
	Seed int64
	// Logf, if set, receives the file system's log lines: the seed, each
	// cut and what it kept, each fault injected, each control command.
	// nil: no log.
	Logf func(format string, args ...any)
	// ControlPath, if set, is a path OUTSIDE the mount where Mount creates
	// a FIFO (or reuses one), for a process outside the test: each line
	// written to it is a command, run in order:
	//
	//	cut           FS.Cut(DropAll)
	//	cut random    FS.Cut(DropRandom)
	//	cut tear      FS.Cut(TearLast)
	//	unmount       FS.Unmount()
	//	eio NAME      FS.FailNextFsync(NAME)
	//	eio-rate P    FS.FailFsyncs(P)
	//	enospc N      FS.SetWriteBudget(N)
	//	stats         logs FS.Stats()
	//
	// (for instance `echo cut > $CONTROL`). The outcome of each command is
	// logged via Logf; an unknown command is logged and ignored. A cut or
	// an unmount ends the file system: [FS.Done] is closed once it is
	// complete (and powercutfs exits). The FIFO is removed then.
	ControlPath string
	// Debug logs every FUSE request and answer via Logf (go-fuse's debug
	// output). Off by default.
	Debug bool
}

// CutMode says what a cut keeps of what was not synced.
type CutMode int

const (
	// DropAll drops every unsynced page and every unsynced directory change.
	DropAll CutMode = iota
	// DropRandom keeps, per file, a random prefix (in page-write order: a
	// page's place is that of its latest write) of the unsynced pages and
	// loses the rest; a truncation not synced is lost. Directory changes
	// as DropAll.
	DropRandom
	// TearLast is DropAll, but the last unsynced page (in write order) of
	// each file keeps a random prefix of its bytes: at least one byte, and
	// fewer than all of them when the page has more than one.
	TearLast
)

// String names the mode as the control file does.
func (m CutMode) String() string {
	switch m {
	case DropAll:
		return "drop-all"
	case DropRandom:
		return "drop-random"
	case TearLast:
		return "tear-last"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// Errors of the file system's life cycle.
var (
	// ErrClosed is returned by Cut and Unmount once the file system has
	// been cut or unmounted.
	ErrClosed = errors.New("powercut: file system already cut or unmounted")
)

// Stats counts what the file system did, for a test's report: that its
// cuts dropped something, that its faults were met.
type Stats struct {
	Fsyncs       int64 // fsyncs of files (and a clean unmount's flushes) that wrote a cache to the backing file
	DirSyncs     int64 // fsyncs of directories that made their changes stable
	FailedSyncs  int64 // fsyncs failed with EIO by FailNextFsync or FailFsyncs
	NoSpace      int64 // writes and fallocates refused with ENOSPC by the write budget
	PagesDropped int64 // unsynced pages a cut dropped (a torn page counts as kept)
	PagesKept    int64 // unsynced pages a cut kept: DropRandom's, TearLast's torn one
	Undone       int64 // directory changes a cut undid
}

// Available reports whether this process can mount the file system: nil on
// Linux, as root, with /dev/fuse; otherwise an error that says what is
// missing (tests skip with it).
func Available() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("powercut: needs Linux (this is %s)", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return errors.New("powercut: needs root (mount(2) of a FUSE file system)")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("powercut: needs /dev/fuse: %w", err)
	}
	_ = f.Close()
	return nil
}
