//go:build linux

package powercut

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a file, directory or other entry of the mount, in go-fuse's
// tree: it knows its path. What a regular file holds (its cache, its
// backing descriptor) is its [file], found by inode number, since go-fuse
// may make several nodes for one inode (a lookup's node is dropped when
// the inode is known) and forgets nodes while their file still has
// unsynced pages. Every operation is a node method (go-fuse calls a
// node's method before its file handle's), so handles carry nothing.
type node struct {
	fs.Inode
	fsys *FS
}

// handle is an open file: everything is done by its node.
type handle struct{}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeReleaser   = (*node)(nil)
	_ fs.NodeAllocater  = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeMknoder    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeLseeker    = (*node)(nil)
)

// rel returns the node's path relative to the mount's root, and false if
// it has no name any more (unlinked).
func (n *node) rel() (string, bool) {
	if n.IsRoot() {
		return ".", true
	}
	if _, parent := n.Parent(); parent == nil {
		return "", false
	}
	p := n.Path(n.Root())
	return p, p != ""
}

// path returns the node's backing path.
func (n *node) path() (string, syscall.Errno) {
	r, ok := n.rel()
	if !ok {
		return "", syscall.ENOENT
	}
	return filepath.Join(n.fsys.backing, r), 0
}

// relName names a child for the log and FailNextFsync.
func (n *node) relName(name string) string {
	r, _ := n.rel()
	return filepath.Join(r, name)
}

func (n *node) hidden(name string) bool { return n.IsRoot() && name == graveName }

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

// statx stats path (not following a symlink) and returns a go-fuse
// identity for it: its inode, and its birth time as the generation, so
// that a reused inode number is a new node.
func statx(dirfd int, path string, flags int) (unix.Stat_t, fs.StableAttr, error) {
	var sx unix.Statx_t
	if err := unix.Statx(dirfd, path, flags|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx); err != nil {
		return unix.Stat_t{}, fs.StableAttr{}, err
	}
	st := unix.Stat_t{
		Dev:     unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:     sx.Ino,
		Nlink:   uint64(sx.Nlink),
		Mode:    uint32(sx.Mode),
		Uid:     sx.Uid,
		Gid:     sx.Gid,
		Rdev:    unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
		Size:    int64(sx.Size),
		Blksize: int64(sx.Blksize),
		Blocks:  int64(sx.Blocks),
		Atim:    unix.Timespec{Sec: sx.Atime.Sec, Nsec: int64(sx.Atime.Nsec)},
		Mtim:    unix.Timespec{Sec: sx.Mtime.Sec, Nsec: int64(sx.Mtime.Nsec)},
		Ctim:    unix.Timespec{Sec: sx.Ctime.Sec, Nsec: int64(sx.Ctime.Nsec)},
	}
	gen := uint64(1)
	if sx.Mask&unix.STATX_BTIME != 0 && (sx.Btime.Sec != 0 || sx.Btime.Nsec != 0) {
		gen = uint64(sx.Btime.Sec)*1e9 + uint64(sx.Btime.Nsec)
	}
	return st, fs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: st.Ino, Gen: gen}, nil
}

func toSyscallStat(st *unix.Stat_t) *syscall.Stat_t {
	return &syscall.Stat_t{
		Dev: st.Dev, Ino: st.Ino, Nlink: st.Nlink, Mode: st.Mode, Uid: st.Uid, Gid: st.Gid,
		Rdev: st.Rdev, Size: st.Size, Blksize: st.Blksize, Blocks: st.Blocks,
		Atim: syscall.Timespec(st.Atim), Mtim: syscall.Timespec(st.Mtim), Ctim: syscall.Timespec(st.Ctim),
	}
}

// child makes the node of a child whose backing stat is st, and fills
// out with its attributes (its cached size, if its file has a cache).
func (n *node) child(ctx context.Context, st unix.Stat_t, id fs.StableAttr, out *fuse.EntryOut) *fs.Inode {
	ch := n.NewInode(ctx, &node{fsys: n.fsys}, id)
	out.Attr.FromStat(toSyscallStat(&st))
	if id.Mode == unix.S_IFREG {
		if fl := n.fsys.peekFile(id.Ino); fl != nil {
			fl.mu.Lock()
			fl.freshSize(&out.Attr)
			fl.mu.Unlock()
		}
	}
	return ch
}

// isFile reports whether the node is a regular file (it has a [file]).
func (n *node) isFile() bool { return n.StableAttr().Mode == unix.S_IFREG }

// file returns the node's file. Only for regular files.
func (n *node) file() *file { return n.fsys.fileOf(n.StableAttr().Ino) }

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, syscall.EIO
	}
	defer n.fsys.leave()
	if n.hidden(name) {
		return nil, syscall.ENOENT
	}
	p, e := n.path()
	if e != 0 {
		return nil, e
	}
	st, id, err := statx(unix.AT_FDCWD, filepath.Join(p, name), 0)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, st, id, out), 0
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	if !n.isFile() {
		return n.lstat(out)
	}
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.getattr(n, out)
}

// lstat fills out from the backing entry's attributes.
func (n *node) lstat(out *fuse.AttrOut) syscall.Errno {
	p, e := n.path()
	if e != 0 {
		return e
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return errno(err)
	}
	out.FromStat(toSyscallStat(&st))
	return 0
}

// Setattr applies a mode, owner or times to the backing entry at once
// (they are not modelled); a size goes to the cache.
func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	var fl *file
	if n.isFile() {
		fl = n.file()
		fl.mu.Lock()
		defer fl.mu.Unlock()
	}
	p, e := n.path()
	if fl != nil && fl.fd >= 0 {
		// By descriptor: an unlinked file has no path.
		p, e = fmt.Sprintf("/proc/self/fd/%d", fl.fd), 0
	}
	if e != 0 {
		return e
	}
	if m, ok := in.GetMode(); ok {
		if err := unix.Fchmodat(unix.AT_FDCWD, p, m&07777, 0); err != nil {
			return errno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		su, sg := -1, -1
		if uok {
			su = int(uid)
		}
		if gok {
			sg = int(gid)
		}
		if err := unix.Fchownat(unix.AT_FDCWD, p, su, sg, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if fl == nil {
			return syscall.EISDIR
		}
		if e := fl.ensureCache(n); e != 0 {
			return e
		}
		fl.truncate(int64(sz))
	}
	mt, mok := in.GetMTime()
	at, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(at.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mt.UnixNano())
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errno(err)
		}
	}
	if fl == nil {
		return n.lstat(out)
	}
	return fl.getattr(n, out)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, 0, syscall.EIO
	}
	defer n.fsys.leave()
	if !n.isFile() {
		return &handle{}, 0, 0
	}
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if e := fl.ensureFd(n); e != 0 {
		return nil, 0, e
	}
	fl.opens++
	if flags&unix.O_TRUNC != 0 {
		if e := fl.ensureCache(n); e != 0 {
			return nil, 0, e
		}
		fl.truncate(0)
	}
	return &handle{}, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, nil, 0, syscall.EIO
	}
	defer n.fsys.leave()
	if n.hidden(name) {
		return nil, nil, 0, syscall.EPERM
	}
	f := n.fsys
	f.mu.Lock()
	rel, _ := n.rel()
	d, err := f.dirOf(rel)
	if err != nil {
		f.mu.Unlock()
		return nil, nil, 0, errno(err)
	}
	created := true
	fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, mode&07777)
	if err == unix.EEXIST && flags&unix.O_EXCL == 0 {
		created = false
		fd, err = unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		f.unref(d)
		f.mu.Unlock()
		return nil, nil, 0, errno(err)
	}
	if created {
		chownCaller(ctx, fd)
		f.record(&dirChange{kind: changeCreate, dirs: []*dirState{d}, name: name, path: n.relName(name)})
	} else {
		f.unref(d)
	}
	f.mu.Unlock()

	st, id, err := statx(fd, "", unix.AT_EMPTY_PATH)
	if err != nil {
		_ = unix.Close(fd)
		return nil, nil, 0, errno(err)
	}
	fl := f.fileOf(id.Ino)
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.fd < 0 {
		fl.fd = fd
	} else {
		_ = unix.Close(fd)
	}
	fl.name = n.relName(name)
	fl.opens++
	if !created && flags&unix.O_TRUNC != 0 {
		if e := fl.ensureCache(nil); e != 0 { // the descriptor is open: no path needed
			return nil, nil, 0, e
		}
		fl.truncate(0)
	}
	ch := n.NewInode(ctx, &node{fsys: f}, id)
	out.Attr.FromStat(toSyscallStat(&st))
	fl.setSize(&out.Attr)
	return ch, &handle{}, 0, 0
}

// chownCaller gives a new file to the caller, as the kernel would.
func chownCaller(ctx context.Context, fd int) {
	if caller, ok := fuse.FromContext(ctx); ok {
		_ = unix.Fchown(fd, int(caller.Uid), int(caller.Gid))
	}
}

func (n *node) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, syscall.EIO
	}
	defer n.fsys.leave()
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	got, e := fl.read(n, dest, off)
	if e != 0 {
		return nil, e
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (n *node) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if !n.fsys.enter() {
		return 0, syscall.EIO
	}
	defer n.fsys.leave()
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if e := fl.ensureCache(n); e != 0 {
		return 0, e
	}
	if !fl.allocate(off + int64(len(data))) {
		return 0, syscall.ENOSPC
	}
	if err := fl.c.writeAt(fl.fd, data, off, n.fsys.pageSeq); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

// Allocate: mode 0 (and FALLOC_FL_ZERO_RANGE, which zeroes the range too)
// allocates space, counted against the write budget, and extends the size
// in the cache unless KEEP_SIZE; PUNCH_HOLE zeroes the range in the cache
// (the space does not come back).
func (n *node) Allocate(ctx context.Context, _ fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	const known = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_ZERO_RANGE
	if mode&^known != 0 {
		return syscall.EOPNOTSUPP
	}
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if e := fl.ensureCache(n); e != 0 {
		return e
	}
	end := int64(off + size)
	if mode&unix.FALLOC_FL_PUNCH_HOLE != 0 {
		if err := fl.c.zero(fl.fd, int64(off), int64(size), n.fsys.pageSeq); err != nil {
			return errno(err)
		}
		return 0
	}
	if !fl.allocate(end) {
		return syscall.ENOSPC
	}
	if mode&unix.FALLOC_FL_ZERO_RANGE != 0 {
		if err := fl.c.zero(fl.fd, int64(off), int64(size), n.fsys.pageSeq); err != nil {
			return errno(err)
		}
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 && end > fl.c.size {
		fl.c.truncate(end)
	}
	return 0
}

// Fsync of a file writes its cache to the backing file and syncs it; of a
// directory, makes its journaled changes stable.
func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, flags uint32) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	if n.IsDir() {
		return n.fsyncDir()
	}
	if !n.isFile() {
		return 0
	}
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	name, named := n.rel()
	if named && n.fsys.failFsync(name) {
		lost := 0
		if fl.c != nil {
			lost = len(fl.c.pages)
		}
		fl.dropCache()
		n.fsys.logf("powercut: fsync of %s fails with EIO, %d unsynced pages lost", name, lost)
		return syscall.EIO
	}
	if err := fl.flush(); err != nil {
		n.fsys.logf("powercut: fsync of %s: %v", name, err)
		return syscall.EIO
	}
	return 0
}

func (n *node) fsyncDir() syscall.Errno {
	f := n.fsys
	p, e := n.path()
	if e != 0 {
		return e
	}
	name, _ := n.rel()
	if f.failFsync(name) {
		f.logf("powercut: fsync of directory %s fails with EIO", name)
		return syscall.EIO
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errno(err)
	}
	if err := unix.Fsync(fd); err != nil {
		return errno(err)
	}
	f.mu.Lock()
	err = f.syncDir(st.Ino)
	f.mu.Unlock()
	f.reap()
	if err != nil {
		f.logf("powercut: fsync of directory %s: %v", name, err)
		return syscall.EIO
	}
	f.dirSyncs.Add(1)
	return 0
}

func (n *node) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno { return 0 }

// Release closes the backing file with the last handle, unless the file
// has a cache (a cut or an unmount writes through it).
func (n *node) Release(ctx context.Context, _ fs.FileHandle) syscall.Errno {
	if !n.isFile() {
		return 0
	}
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.opens--
	if fl.opens <= 0 {
		fl.reapIfGone()
		if fl.c == nil && fl.fd >= 0 {
			_ = unix.Close(fl.fd)
			fl.fd = -1
		}
	}
	return 0
}

// Lseek answers SEEK_DATA and SEEK_HOLE as if the file had no holes.
func (n *node) Lseek(ctx context.Context, _ fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	if !n.fsys.enter() {
		return 0, syscall.EIO
	}
	defer n.fsys.leave()
	fl := n.file()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	var out fuse.AttrOut
	if e := fl.getattr(n, &out); e != 0 {
		return 0, e
	}
	size := out.Size
	if off >= size {
		return 0, syscall.ENXIO
	}
	switch whence {
	case unix.SEEK_DATA:
		return off, 0
	case unix.SEEK_HOLE:
		return size, 0
	}
	return 0, syscall.EINVAL
}

// create journals a new entry name made by mk in the directory's backing
// descriptor, and returns its node.
func (n *node) create(ctx context.Context, name string, out *fuse.EntryOut, mk func(dirfd int) error) (*fs.Inode, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, syscall.EIO
	}
	defer n.fsys.leave()
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	f := n.fsys
	f.mu.Lock()
	rel, _ := n.rel()
	d, err := f.dirOf(rel)
	if err != nil {
		f.mu.Unlock()
		return nil, errno(err)
	}
	if err := mk(d.fd); err != nil {
		f.unref(d)
		f.mu.Unlock()
		return nil, errno(err)
	}
	if caller, ok := fuse.FromContext(ctx); ok {
		_ = unix.Fchownat(d.fd, name, int(caller.Uid), int(caller.Gid), unix.AT_SYMLINK_NOFOLLOW)
	}
	f.record(&dirChange{kind: changeCreate, dirs: []*dirState{d}, name: name, path: n.relName(name)})
	st, id, err := statx(d.fd, name, 0)
	f.mu.Unlock()
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, st, id, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(ctx, name, out, func(dirfd int) error { return unix.Mkdirat(dirfd, name, mode&07777) })
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(ctx, name, out, func(dirfd int) error { return unix.Mknodat(dirfd, name, mode, int(dev)) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(ctx, name, out, func(dirfd int) error { return unix.Symlinkat(target, dirfd, name) })
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	tp, e := tn.path()
	if e != 0 {
		return nil, e
	}
	return n.create(ctx, name, out, func(dirfd int) error { return unix.Linkat(unix.AT_FDCWD, tp, dirfd, name, 0) })
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, syscall.EIO
	}
	defer n.fsys.leave()
	p, e := n.path()
	if e != 0 {
		return nil, e
	}
	buf := make([]byte, unix.PathMax)
	m, err := unix.Readlink(p, buf)
	if err != nil {
		return nil, errno(err)
	}
	return buf[:m], 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, true)
}

// remove moves name to a grave and journals it.
func (n *node) remove(name string, dir bool) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	if n.hidden(name) {
		return syscall.ENOENT
	}
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	rel, _ := n.rel()
	d, err := f.dirOf(rel)
	if err != nil {
		return errno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		f.unref(d)
		return errno(err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case dir && !isDir:
		f.unref(d)
		return syscall.ENOTDIR
	case !dir && isDir:
		f.unref(d)
		return syscall.EISDIR
	case dir:
		if e := emptyDir(d.fd, name); e != 0 {
			f.unref(d)
			return e
		}
	}
	g, err := f.bury(d, name)
	if err != nil {
		f.unref(d)
		return errno(err)
	}
	f.record(&dirChange{kind: changeRemove, dirs: []*dirState{d}, name: name, grave: g, path: n.relName(name)})
	return 0
}

// emptyDir answers ENOTEMPTY unless name in dirfd is an empty directory.
func emptyDir(dirfd int, name string) syscall.Errno {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	for {
		m, err := unix.Getdents(fd, buf)
		if err != nil {
			return errno(err)
		}
		if m == 0 {
			return 0
		}
		_, _, names := unix.ParseDirent(buf[:m], -1, nil)
		if len(names) > 0 {
			return syscall.ENOTEMPTY
		}
	}
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if n.hidden(name) || np.hidden(newName) {
		return syscall.EPERM
	}
	const known = unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE
	if flags&^known != 0 {
		return syscall.EINVAL
	}
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	r1, _ := n.rel()
	r2, _ := np.rel()
	d1, err := f.dirOf(r1)
	if err != nil {
		return errno(err)
	}
	d2, err := f.dirOf(r2)
	if err != nil {
		f.unref(d1)
		return errno(err)
	}
	fail := func(e syscall.Errno) syscall.Errno {
		f.unref(d1)
		f.unref(d2)
		return e
	}
	c := &dirChange{kind: changeRename, dirs: []*dirState{d1, d2}, name: name, name2: newName,
		path: n.relName(name) + " -> " + np.relName(newName)}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if err := unix.Renameat2(d1.fd, name, d2.fd, newName, unix.RENAME_EXCHANGE); err != nil {
			return fail(errno(err))
		}
		c.kind = changeExchange
		f.record(c)
		return 0
	}
	var src, dst unix.Stat_t
	if err := unix.Fstatat(d1.fd, name, &src, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fail(errno(err))
	}
	if err := unix.Fstatat(d2.fd, newName, &dst, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return fail(syscall.EEXIST)
		}
		if src.Ino == dst.Ino && src.Dev == dst.Dev {
			return fail(0) // two names of one file: rename does nothing
		}
		srcDir := src.Mode&unix.S_IFMT == unix.S_IFDIR
		dstDir := dst.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case srcDir && !dstDir:
			return fail(syscall.ENOTDIR)
		case !srcDir && dstDir:
			return fail(syscall.EISDIR)
		case dstDir:
			if e := emptyDir(d2.fd, newName); e != 0 {
				return fail(e)
			}
		}
		g, err := f.bury(d2, newName)
		if err != nil {
			return fail(errno(err))
		}
		c.grave = g
	} else if err != unix.ENOENT {
		return fail(errno(err))
	}
	if err := unix.Renameat(d1.fd, name, d2.fd, newName); err != nil {
		if c.grave != "" {
			_ = unix.Renameat(f.graveFd, c.grave, d2.fd, newName)
		}
		return fail(errno(err))
	}
	f.record(c)
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if !n.fsys.enter() {
		return nil, syscall.EIO
	}
	defer n.fsys.leave()
	p, e := n.path()
	if e != 0 {
		return nil, e
	}
	ds, e := fs.NewLoopbackDirStream(p)
	if e != 0 {
		return nil, e
	}
	defer ds.Close()
	var list []fuse.DirEntry
	for ds.HasNext() {
		de, e := ds.Next()
		if e != 0 {
			return nil, e
		}
		if n.hidden(de.Name) {
			continue
		}
		list = append(list, de)
	}
	return fs.NewListDirStream(list), 0
}

// Statfs reports the backing file system's, its free space no more than
// the write budget.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if !n.fsys.enter() {
		return syscall.EIO
	}
	defer n.fsys.leave()
	var s unix.Statfs_t
	if err := unix.Statfs(n.fsys.backing, &s); err != nil {
		return errno(err)
	}
	if b := n.fsys.budget.Load(); b >= 0 && s.Bsize > 0 {
		blocks := uint64(b) / uint64(s.Bsize)
		s.Bavail = min(s.Bavail, blocks)
		s.Bfree = min(s.Bfree, blocks)
	}
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.NameLen, out.Frsize = uint32(s.Bsize), uint32(s.Namelen), uint32(s.Frsize)
	return 0
}
