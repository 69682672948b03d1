//go:build linux

package powercut

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// file is what the file system holds of a regular file: its backing
// descriptor and its cache. There is one per backing inode number, kept
// for as long as the file system is mounted (a file whose node go-fuse
// forgot keeps its unsynced pages; the inode number is not reused while
// the backing file lives, which a grave or the descriptor ensures).
type file struct {
	fsys *FS
	ino  uint64

	mu    sync.Mutex // guards what follows; before FS.mu
	fd    int        // the backing file, O_RDWR; -1 when not open
	opens int        // open handles
	c     *cache     // what is not synced; nil when clean
	name  string     // its path relative to the mount when last seen: for the log
	// alloc is the space the file holds, for the write budget: its bytes
	// up to alloc count as allocated (written or fallocated). -1 until
	// known: ensureCache takes it from the backing file.
	alloc int64
}

// fileOf returns the file of the backing inode ino, making it if need be.
func (f *FS) fileOf(ino uint64) *file {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.files[ino]
	if fl == nil {
		fl = &file{fsys: f, ino: ino, fd: -1, alloc: -1}
		f.files[ino] = fl
	}
	return fl
}

// peekFile returns the file of ino if there is one.
func (f *FS) peekFile(ino uint64) *file {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[ino]
}

// ensureFd opens the backing file by n's path. Under fl.mu.
func (fl *file) ensureFd(n *node) syscall.Errno {
	if fl.fd >= 0 {
		return 0
	}
	if n == nil {
		return syscall.EIO
	}
	p, e := n.path()
	if e != 0 {
		return e
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return errno(err)
	}
	fl.fd = fd
	if r, ok := n.rel(); ok {
		fl.name = r
	}
	return 0
}

// ensureCache starts the cache of a clean file. Under fl.mu.
func (fl *file) ensureCache(n *node) syscall.Errno {
	if fl.c != nil {
		return 0
	}
	if e := fl.ensureFd(n); e != 0 {
		return e
	}
	var st unix.Stat_t
	if err := unix.Fstat(fl.fd, &st); err != nil {
		return errno(err)
	}
	if fl.alloc < 0 {
		// What the backing file has allocated, taken to lie at its start.
		fl.alloc = min(st.Size, st.Blocks*512)
	}
	f := fl.fsys
	f.mu.Lock()
	fl.c = newCache(f.nextSeq(), st.Size)
	f.dirty[fl] = struct{}{}
	f.mu.Unlock()
	return 0
}

// allocate makes the file hold space up to end, taking what it lacks from
// the write budget; false if that does not fit (ENOSPC). Under fl.mu,
// after ensureCache.
func (fl *file) allocate(end int64) bool {
	if end <= fl.alloc {
		return true
	}
	if !fl.fsys.charge(end - fl.alloc) {
		return false
	}
	fl.alloc = end
	return true
}

// truncate sets the file's size in the cache; space past it is no longer
// the file's. Under fl.mu, after ensureCache.
func (fl *file) truncate(size int64) {
	fl.c.truncate(size)
	fl.alloc = min(fl.alloc, size)
}

// dropCache forgets what is not synced. Under fl.mu.
func (fl *file) dropCache() {
	if fl.c == nil {
		return
	}
	fl.c = nil
	fl.fsys.mu.Lock()
	delete(fl.fsys.dirty, fl)
	fl.fsys.mu.Unlock()
}

// setSize puts the cached size, if any, in a. Under fl.mu.
func (fl *file) setSize(a *fuse.Attr) {
	if fl.c == nil {
		return
	}
	a.Size = uint64(fl.c.size)
	a.Blocks = (a.Size + 511) / 512
}

// freshSize sets a's size as of now, for a size read before fl.mu was
// taken (a lookup's statx of the backing file): the cache's, or, with
// none, the backing file's by its descriptor. That earlier read may have
// caught a flush half way (its truncate to the cache's floor, its pages
// written in order, the cache then dropped), and a size smaller than the
// file's makes the kernel cut its mappings short: a read past it is a
// SIGBUS (Badger's compaction reading the index of a table it had just
// written and msynced, while another goroutine listed the directory:
// twice in ~600 serve starts of the power-cut rounds). Under fl.mu.
func (fl *file) freshSize(a *fuse.Attr) {
	if fl.c == nil && fl.fd >= 0 {
		var st unix.Stat_t
		if unix.Fstat(fl.fd, &st) == nil {
			a.Size, a.Blocks = uint64(st.Size), uint64(st.Blocks)
		}
		return
	}
	fl.setSize(a)
}

// getattr fills out from the backing file and the cache. Under fl.mu.
func (fl *file) getattr(n *node, out *fuse.AttrOut) syscall.Errno {
	if fl.fd < 0 {
		if e := n.lstat(out); e != 0 {
			return e
		}
		fl.setSize(&out.Attr)
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fl.fd, &st); err != nil {
		return errno(err)
	}
	out.FromStat(toSyscallStat(&st))
	fl.setSize(&out.Attr)
	return 0
}

// read reads into dest at off: the cache over the backing file. Under fl.mu.
func (fl *file) read(n *node, dest []byte, off int64) (int, syscall.Errno) {
	if e := fl.ensureFd(n); e != 0 {
		return 0, e
	}
	if fl.c != nil {
		got, err := fl.c.readAt(fl.fd, dest, off)
		if err != nil {
			return 0, errno(err)
		}
		return got, 0
	}
	got := 0
	for got < len(dest) {
		r, err := unix.Pread(fl.fd, dest[got:], off+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, errno(err)
		}
		if r == 0 {
			break
		}
		got += r
	}
	return got, 0
}

// flush writes the cache to the backing file and syncs it. Under fl.mu.
func (fl *file) flush() error {
	if fl.c == nil {
		if fl.fd >= 0 {
			return unix.Fsync(fl.fd)
		}
		return nil
	}
	if err := fl.c.flush(fl.fd); err != nil {
		return fmt.Errorf("powercut: flush %s: %w", fl.name, err)
	}
	fl.dropCache()
	fl.fsys.fsyncs.Add(1)
	return nil
}

// reap forgets the files whose last name went with a directory change
// made stable (journal's forget): what they held can never be read again,
// nor come back after a cut.
func (f *FS) reap() {
	f.mu.Lock()
	gone := f.gone
	f.gone = nil
	f.mu.Unlock()
	for _, ino := range gone {
		fl := f.peekFile(ino)
		if fl == nil {
			continue
		}
		fl.mu.Lock()
		fl.reapIfGone()
		done := fl.opens <= 0 && fl.fd < 0
		fl.mu.Unlock()
		if done {
			f.mu.Lock()
			if f.files[ino] == fl {
				delete(f.files, ino)
			}
			f.mu.Unlock()
		}
	}
}

// reapIfGone drops the cache and closes the backing file of a file that
// no handle holds and no name names (not even a grave). Under fl.mu.
func (fl *file) reapIfGone() {
	if fl.opens > 0 || fl.fd < 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fl.fd, &st) != nil || st.Nlink > 0 {
		return
	}
	if fl.c != nil {
		fl.fsys.logf("powercut: %s is gone (unlinked, the unlink synced): %d unsynced pages forgotten", fl.name, len(fl.c.pages))
	}
	fl.dropCache()
	_ = unix.Close(fl.fd)
	fl.fd = -1
}

func (fl *file) dirtySince() uint64 {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.c == nil {
		return 0
	}
	return fl.c.born
}

func (fl *file) closeFd() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.fd >= 0 {
		_ = unix.Close(fl.fd)
		fl.fd = -1
	}
}

// cut applies a cut to the file's cache: what mode keeps is written to
// the backing file (and synced), the rest dropped.
func (fl *file) cut(mode CutMode) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	c := fl.c
	if c == nil {
		return nil
	}
	name := fl.name
	f := fl.fsys
	order := c.order()
	switch mode {
	case DropAll:
		if len(order) > 0 || c.size != c.floor {
			f.logf("powercut: cut: %s: %d unsynced pages dropped", name, len(order))
		}
		f.pagesDropped.Add(int64(len(order)))
	case DropRandom:
		keep := f.intn(len(order) + 1)
		f.pagesKept.Add(int64(keep))
		f.pagesDropped.Add(int64(len(order) - keep))
		for _, idx := range order[:keep] {
			if err := c.writePage(fl.fd, idx, pageSize); err != nil {
				return fmt.Errorf("powercut: cut %s: %w", name, err)
			}
		}
		f.logf("powercut: cut: %s: kept the %d oldest of %d unsynced pages", name, keep, len(order))
	case TearLast:
		if len(order) == 0 {
			break
		}
		last := order[len(order)-1]
		size := c.pageLen(last)
		if size == 0 {
			f.pagesDropped.Add(int64(len(order)))
			break
		}
		f.pagesKept.Add(1)
		f.pagesDropped.Add(int64(len(order) - 1))
		keep := int64(1)
		if size > 1 {
			keep = 1 + int64(f.intn(int(size-1)))
		}
		if err := c.writePage(fl.fd, last, keep); err != nil {
			return fmt.Errorf("powercut: cut %s: %w", name, err)
		}
		f.logf("powercut: cut: %s: %d unsynced pages dropped, page %d torn: kept %d of its %d bytes",
			name, len(order)-1, last, keep, size)
	}
	if mode != DropAll {
		if err := unix.Fsync(fl.fd); err != nil {
			return fmt.Errorf("powercut: cut %s: %w", name, err)
		}
	}
	fl.c = nil
	f.mu.Lock()
	delete(f.dirty, fl)
	f.mu.Unlock()
	return nil
}
