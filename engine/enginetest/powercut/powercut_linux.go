//go:build linux

package powercut

import (
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// graveName is the directory, at the top of the backing directory, that
// holds the unlinked and replaced entries of directory changes not yet
// stable (a cut puts them back). It is hidden from the mount and removed
// by a cut or an unmount.
const graveName = ".powercut-graves"

// FS is a mounted power-cut file system. Its methods are safe for
// concurrent use.
type FS struct {
	backing    string
	mountpoint string
	seed       int64
	logf       func(format string, args ...any)
	server     *fuse.Server
	root       *node
	graveFd    int

	// gate is read-held by every FUSE operation, write-held by a cut or an
	// unmount to freeze the file system: once frozen is set, every
	// operation fails with EIO without touching the backing directory.
	gate   sync.RWMutex
	frozen bool

	budget atomic.Int64 // bytes writes may still add; < 0: no budget

	fsyncs, dirSyncs, failedSyncs, noSpace atomic.Int64
	pagesDropped, pagesKept, undone        atomic.Int64

	// mu guards what follows. Lock order: file.mu before mu.
	mu        sync.Mutex
	rng       *rand.Rand
	failNames map[string]bool
	failP     float64
	seq       uint64               // the number of the last directory change or cache page write
	journal   []*dirChange         // unstable directory changes, oldest first
	dirs      map[uint64]*dirState // by backing inode, while a change refers to them
	files     map[uint64]*file     // by backing inode
	dirty     map[*file]struct{}   // files with a cache
	gone      []uint64             // inodes of files whose last name a directory sync removed: reap them
	graves    int

	endOnce sync.Once
	ended   bool // under mu: Cut or Unmount has begun
	done    chan struct{}
	ctl     *control
}

// Mount mounts the file system over the directory backing at mountpoint,
// which must exist (and should be empty: the mount hides what it holds).
// backing must exist; what it holds is taken as synced. The two must not
// contain each other. Mount logs the seed in use (Options.Logf).
//
// A process that dies with the file system mounted (no Cut, no Unmount)
// leaves the backing directory as the mount showed it, but for the pages
// never synced: its directory changes all applied, the entries it had
// unlinked or replaced in a directory of graves (.powercut-graves, which
// the mount hides), and a dead mount at mountpoint (umount -l it). Mount
// removes such a leftover graves directory. Should the process die with
// files of its own mount open, its exit (which flushes them, a request to
// itself) hangs in the kernel: umount -f the mount to release it. Tests
// keep the files of the mount closed, and cut at cleanup.
func Mount(backing, mountpoint string, opt Options) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("powercut: mount: %w", err)
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("powercut: mount: %w", err)
	}
	for _, d := range []string{backing, mountpoint} {
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("powercut: mount: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("powercut: mount: %s is not a directory", d)
		}
	}
	if within(mountpoint, backing) || within(backing, mountpoint) {
		return nil, fmt.Errorf("powercut: mount: %s and %s must not contain each other", backing, mountpoint)
	}
	if opt.ControlPath != "" {
		cp, err := filepath.Abs(opt.ControlPath)
		if err != nil {
			return nil, fmt.Errorf("powercut: mount: %w", err)
		}
		if within(cp, backing) || within(cp, mountpoint) {
			return nil, fmt.Errorf("powercut: mount: the control file %s must lie outside %s and %s", cp, backing, mountpoint)
		}
	}
	seed := opt.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	f := &FS{
		backing:    backing,
		mountpoint: mountpoint,
		seed:       seed,
		logf:       opt.Logf,
		rng:        rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15)),
		failNames:  map[string]bool{},
		dirs:       map[uint64]*dirState{},
		files:      map[uint64]*file{},
		dirty:      map[*file]struct{}{},
		done:       make(chan struct{}),
		graveFd:    -1,
	}
	if f.logf == nil {
		f.logf = func(string, ...any) {}
	}
	f.budget.Store(-1)

	graves := filepath.Join(backing, graveName)
	if err := os.RemoveAll(graves); err != nil {
		return nil, fmt.Errorf("powercut: mount: remove leftover graves: %w", err)
	}
	if err := os.Mkdir(graves, 0o700); err != nil {
		return nil, fmt.Errorf("powercut: mount: %w", err)
	}
	f.graveFd, err = unix.Open(graves, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(graves)
		return nil, fmt.Errorf("powercut: mount: %w", err)
	}
	cleanup := func() {
		_ = unix.Close(f.graveFd)
		_ = os.RemoveAll(graves)
	}

	if opt.ControlPath != "" {
		c, err := openControl(opt.ControlPath)
		if err != nil {
			cleanup()
			return nil, err
		}
		f.ctl = c
	}

	f.root = &node{fsys: f}
	zero := time.Duration(0)
	logger := log.New(io.Discard, "", 0)
	if opt.Debug {
		logger = log.New(logfWriter(f.logf), "", 0)
	}
	server, err := fs.Mount(mountpoint, f.root, &fs.Options{
		// The kernel asks again each time: sizes live in our cache.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		Logger:          logger,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            backing,
			Name:              "powercut",
			DisableXAttrs:     true, // not modelled; and the kernel stops asking on each new file
			Debug:             opt.Debug,
			Logger:            logger,
		},
	})
	if err != nil {
		if f.ctl != nil {
			f.ctl.close()
		}
		cleanup()
		return nil, fmt.Errorf("powercut: mount %s: %w", mountpoint, err)
	}
	f.server = server
	f.logf("powercut: mounted %s over %s, seed %d", mountpoint, backing, seed)
	if f.ctl != nil {
		f.ctl.start(f)
	}
	return f, nil
}

// within reports whether path is dir or lies under it (both absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// logfWriter adapts Logf to go-fuse's debug logger.
type logfWriter func(format string, args ...any)

func (w logfWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Stats returns the counts so far (a cut's, once it has returned).
func (f *FS) Stats() Stats {
	return Stats{
		Fsyncs: f.fsyncs.Load(), DirSyncs: f.dirSyncs.Load(), FailedSyncs: f.failedSyncs.Load(),
		NoSpace: f.noSpace.Load(), PagesDropped: f.pagesDropped.Load(), PagesKept: f.pagesKept.Load(),
		Undone: f.undone.Load(),
	}
}

// Seed returns the seed in use (Options.Seed, or the one Mount chose).
func (f *FS) Seed() int64 { return f.seed }

// Mountpoint returns the absolute path of the mount.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Done is closed once the file system has been cut or unmounted, by a call
// or by a command of the control file, and the unmount is complete.
func (f *FS) Done() <-chan struct{} { return f.done }

// FailNextFsync makes the next fsync (or fdatasync, or msync(MS_SYNC)) of
// the file or directory name, relative to the mount's root, fail with EIO,
// once. A file's unsynced pages are dropped by it: they are not written,
// and the file reads as the backing file does (as Linux drops the pages of
// a failed writeback; a handle opened before may still read them from the
// kernel's page cache). A directory's changes stay unstable.
func (f *FS) FailNextFsync(name string) {
	name = filepath.Clean(strings.TrimPrefix(name, "/"))
	f.mu.Lock()
	f.failNames[name] = true
	f.mu.Unlock()
	f.logf("powercut: next fsync of %s fails with EIO", name)
}

// FailFsyncs makes each later fsync, of any file or directory, fail with
// EIO with probability p (drawn from the seed), as FailNextFsync does; 0
// turns it off.
func (f *FS) FailFsyncs(p float64) {
	f.mu.Lock()
	f.failP = p
	f.mu.Unlock()
	f.logf("powercut: fsyncs fail with EIO with probability %g", p)
}

// SetWriteBudget gives the file system n more bytes of space, from now,
// as a disk that is nearly full: past them, a write or a fallocate that
// needs space fails with ENOSPC. Space is counted per file as a disk
// allocates it: a file holds the bytes up to the furthest point written
// or fallocated (an overwrite, or a write into space fallocate gave,
// needs none; a write past that point needs the distance, holes
// included); ftruncate gives none (it makes a hole). Space freed (a
// truncation, an unlink) does not come back: call SetWriteBudget again to
// make room. A write request (or the kernel's write-back of a mapped
// page) that does not fit fails whole, writing nothing; a smaller one may
// still fit. The kernel sends a write(2) whose first page is partial as
// two requests (up to the page boundary, then the rest), so such a
// write(2) may come out short. statfs reports no more free space than is
// left. n < 0: no budget (the default).
func (f *FS) SetWriteBudget(n int64) {
	if n < 0 {
		n = -1
	}
	f.budget.Store(n)
	f.logf("powercut: write budget %d bytes", n)
}

// charge takes n bytes from the write budget, if they fit.
func (f *FS) charge(n int64) bool {
	for {
		b := f.budget.Load()
		if b < 0 {
			return true
		}
		if n > b {
			f.noSpace.Add(1)
			return false
		}
		if f.budget.CompareAndSwap(b, b-n) {
			return true
		}
	}
}

// failFsync reports whether this fsync of name is to fail.
func (f *FS) failFsync(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := f.failNames[name]
	delete(f.failNames, name)
	fail = fail || f.failP > 0 && f.rng.Float64() < f.failP
	if fail {
		f.failedSyncs.Add(1)
	}
	return fail
}

// enter read-holds the gate for one FUSE operation; it reports false (the
// operation answers EIO) once the file system is frozen.
func (f *FS) enter() bool {
	f.gate.RLock()
	if f.frozen {
		f.gate.RUnlock()
		return false
	}
	return true
}

func (f *FS) leave() { f.gate.RUnlock() }

// freeze waits for the operations in flight, then makes every later one
// fail. It reports false if the file system was already frozen.
func (f *FS) freeze() bool {
	f.gate.Lock()
	defer f.gate.Unlock()
	if f.frozen {
		return false
	}
	f.frozen = true
	return true
}

// Cut cuts the power: it freezes the file system (no further operation
// reaches the backing directory), drops what was not synced as mode says,
// undoes every directory change not stable, and unmounts (forcibly: a
// process with files open on the mount gets errors, ENOTCONN, from then
// on). After Cut the backing directory holds exactly what was synced
// (plus, per mode, the pages kept). It logs what it dropped and kept. A
// second call returns [ErrClosed].
func (f *FS) Cut(mode CutMode) error { return f.end(true, mode, false) }

// Unmount unmounts cleanly, as a clean shutdown would: the kernel writes
// its dirty pages, then every cached page is written to the backing files
// and synced, and every directory change is made stable. It fails (and
// the file system stays mounted) if the mount is busy: close the files
// on it first. A second call returns [ErrClosed].
func (f *FS) Unmount() error { return f.end(false, DropAll, false) }

// end is Cut (cut) or Unmount; fromCtl when the control file's goroutine
// calls it (it does not wait for itself).
func (f *FS) end(cut bool, mode CutMode, fromCtl bool) error {
	f.mu.Lock()
	if f.ended {
		f.mu.Unlock()
		return ErrClosed
	}
	f.ended = true
	f.mu.Unlock()

	var err error
	if cut {
		err = f.cut(mode)
	} else {
		err = f.unmount()
		if err != nil {
			// Still mounted and working: it may be tried again.
			f.mu.Lock()
			f.ended = false
			f.mu.Unlock()
			return err
		}
	}
	if f.ctl != nil {
		f.ctl.close()
		if !fromCtl {
			f.ctl.wait()
		}
	}
	f.endOnce.Do(func() { close(f.done) })
	return err
}

func (f *FS) cut(mode CutMode) error {
	f.freeze()
	f.logf("powercut: cut (%s), seed %d", mode, f.seed)
	var errs []error
	// The data first: the nodes' descriptors reach their files whatever
	// their names become.
	for _, fl := range f.dirtyFiles() {
		if err := fl.cut(mode); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, f.undoJournal()...)
	errs = append(errs, f.removeGraves())
	// MNT_FORCE aborts the FUSE connection (what is in flight fails,
	// processes that still hold files get ENOTCONN); MNT_DETACH lets the
	// unmount succeed even so.
	if err := unix.Unmount(f.mountpoint, unix.MNT_FORCE|unix.MNT_DETACH); err != nil {
		errs = append(errs, fmt.Errorf("powercut: cut: unmount %s: %w", f.mountpoint, err))
	}
	f.server.Wait()
	f.closeAllFds()
	f.logf("powercut: cut done")
	return errors.Join(errs...)
}

func (f *FS) unmount() error {
	if err := f.server.Unmount(); err != nil {
		return fmt.Errorf("powercut: unmount %s: %w", f.mountpoint, err)
	}
	f.freeze()
	var errs []error
	for _, fl := range f.dirtyFiles() {
		fl.mu.Lock()
		if err := fl.flush(); err != nil {
			errs = append(errs, err)
		}
		fl.mu.Unlock()
	}
	f.mu.Lock()
	for _, c := range f.journal {
		if err := c.forget(f); err != nil {
			errs = append(errs, err)
		}
	}
	f.journal = nil
	f.mu.Unlock()
	for _, d := range f.dirs {
		_ = unix.Fsync(d.fd)
	}
	errs = append(errs, f.removeGraves())
	f.closeAllFds()
	if fd, err := unix.Open(f.backing, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Fsync(fd)
		_ = unix.Close(fd)
	}
	f.logf("powercut: unmounted %s cleanly", f.mountpoint)
	return errors.Join(errs...)
}

// dirtyFiles returns the files with a cache, in the order they became
// dirty (so that a cut's random draws follow the same order each run).
func (f *FS) dirtyFiles() []*file {
	f.mu.Lock()
	out := make([]*file, 0, len(f.dirty))
	for fl := range f.dirty {
		out = append(out, fl)
	}
	f.mu.Unlock() // file.mu before mu
	born := make(map[*file]uint64, len(out))
	for _, fl := range out {
		born[fl] = fl.dirtySince()
	}
	slices.SortFunc(out, func(a, b *file) int { return int64Cmp(born[a], born[b]) })
	return out
}

func int64Cmp(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (f *FS) removeGraves() error {
	if f.graveFd >= 0 {
		_ = unix.Close(f.graveFd)
		f.graveFd = -1
	}
	if err := os.RemoveAll(filepath.Join(f.backing, graveName)); err != nil {
		return fmt.Errorf("powercut: remove graves: %w", err)
	}
	return nil
}

// closeAllFds closes the descriptors of the files and of the directories
// the journal held.
func (f *FS) closeAllFds() {
	f.mu.Lock()
	files := make([]*file, 0, len(f.files))
	for _, fl := range f.files {
		files = append(files, fl)
	}
	for ino, d := range f.dirs {
		_ = unix.Close(d.fd)
		delete(f.dirs, ino)
	}
	f.mu.Unlock()
	for _, fl := range files {
		fl.closeFd()
	}
}

// nextSeq numbers a directory change or a page write. Under mu.
func (f *FS) nextSeq() uint64 {
	f.seq++
	return f.seq
}

// pageSeq numbers a page write.
func (f *FS) pageSeq() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nextSeq()
}

// intn draws from the seeded generator.
func (f *FS) intn(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}
