//go:build linux

package powercut

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The directory journal. A change to a directory's entries is made in the
// backing directory at once, and recorded here until it is stable: until
// each directory it touched has been fsynced after it. An entry it
// removes (an unlink, an rmdir, the target a rename replaces) is moved to
// the graves directory, not deleted. A cut undoes the changes not stable,
// newest first; a directory fsync forgets the ones it makes stable (and
// deletes their graves).
//
// Why newest first is right: when a change is undone, every later change
// to the directories it touched is unstable too (a sync of one of them
// would have made this one stable as well), so it has been undone before:
// those directories hold exactly what they held right after this change.
// Directories are named by descriptors, not paths, so that a rename of a
// parent that is stable does not lose them.

// dirState is a backing directory that an unstable change touched.
type dirState struct {
	ino    uint64
	fd     int    // O_RDONLY|O_DIRECTORY
	synced uint64 // the seq of its last fsync
	refs   int    // unstable changes that name it
}

type changeKind int

const (
	changeCreate   changeKind = iota // name appeared (create, mkdir, mknod, symlink, link)
	changeRemove                     // name went to grave
	changeRename                     // name in dirs[0] moved to name2 in dirs[1]; the entry it replaced went to grave, if any
	changeExchange                   // name in dirs[0] and name2 in dirs[1] swapped
)

// dirChange is one journaled change of directory entries.
type dirChange struct {
	seq   uint64
	kind  changeKind
	dirs  []*dirState // 1, or 2 for a rename (source, target; maybe the same)
	name  string
	name2 string
	grave string // the name in the graves directory of what it removed; "" if none
	path  string // for the log: the path, relative to the mount, at the time
}

// stable reports whether every directory the change touched has been
// synced since.
func (c *dirChange) stable() bool {
	for _, d := range c.dirs {
		if d.synced < c.seq {
			return false
		}
	}
	return true
}

// dirOf returns the journal's state of the backing directory at path
// (relative to the backing root), opening it if it has none. Under f.mu;
// the caller records a change with it or calls f.unref.
func (f *FS) dirOf(rel string) (*dirState, error) {
	fd, err := unix.Open(filepath.Join(f.backing, rel), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if d := f.dirs[st.Ino]; d != nil {
		_ = unix.Close(fd)
		d.refs++
		return d, nil
	}
	d := &dirState{ino: st.Ino, fd: fd, refs: 1}
	f.dirs[st.Ino] = d
	return d, nil
}

// unref drops a reference taken by dirOf; the last closes it. Under f.mu.
func (f *FS) unref(d *dirState) {
	d.refs--
	if d.refs == 0 {
		_ = unix.Close(d.fd)
		delete(f.dirs, d.ino)
	}
}

// record journals a change (its dirs' references pass to it). Under f.mu.
func (f *FS) record(c *dirChange) {
	c.seq = f.nextSeq()
	f.journal = append(f.journal, c)
}

// newGrave names a new entry of the graves directory. Under f.mu.
func (f *FS) newGrave() string {
	f.graves++
	return strconv.Itoa(f.graves)
}

// bury moves name in d to a new grave and returns the grave's name.
// Under f.mu.
func (f *FS) bury(d *dirState, name string) (string, error) {
	g := f.newGrave()
	if err := unix.Renameat(d.fd, name, f.graveFd, g); err != nil {
		return "", err
	}
	return g, nil
}

// syncDir makes the changes to the directory with inode ino stable:
// forgets them, deletes their graves. Under f.mu.
func (f *FS) syncDir(ino uint64) error {
	d := f.dirs[ino]
	if d == nil {
		return nil
	}
	d.synced = f.nextSeq()
	var errs []error
	kept := f.journal[:0]
	for _, c := range f.journal {
		if !c.stable() {
			kept = append(kept, c)
			continue
		}
		if err := c.forget(f); err != nil {
			errs = append(errs, err)
		}
	}
	clear(f.journal[len(kept):])
	f.journal = kept
	return errors.Join(errs...)
}

// forget drops a change that is stable: its grave is deleted, its
// directories unreferenced. Under f.mu.
func (c *dirChange) forget(f *FS) error {
	var err error
	if c.grave != "" && f.graveFd >= 0 {
		var st unix.Stat_t
		if unix.Fstatat(f.graveFd, c.grave, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			f.gone = append(f.gone, st.Ino)
		}
		err = removeAt(f.graveFd, c.grave)
	}
	for _, d := range c.dirs {
		f.unref(d)
	}
	return err
}

// undo reverts a change that is not stable.
func (c *dirChange) undo(f *FS) error {
	switch c.kind {
	case changeCreate:
		return removeAt(c.dirs[0].fd, c.name)
	case changeRemove:
		return unix.Renameat(f.graveFd, c.grave, c.dirs[0].fd, c.name)
	case changeRename:
		if err := unix.Renameat(c.dirs[1].fd, c.name2, c.dirs[0].fd, c.name); err != nil {
			return err
		}
		if c.grave != "" {
			return unix.Renameat(f.graveFd, c.grave, c.dirs[1].fd, c.name2)
		}
		return nil
	case changeExchange:
		return unix.Renameat2(c.dirs[0].fd, c.name, c.dirs[1].fd, c.name2, unix.RENAME_EXCHANGE)
	}
	return fmt.Errorf("unknown change %d", c.kind)
}

func (k changeKind) String() string {
	switch k {
	case changeCreate:
		return "create"
	case changeRemove:
		return "remove"
	case changeRename:
		return "rename"
	case changeExchange:
		return "exchange"
	}
	return strconv.Itoa(int(k))
}

// undoJournal undoes every change not stable, newest first (a cut).
func (f *FS) undoJournal() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for i := len(f.journal) - 1; i >= 0; i-- {
		c := f.journal[i]
		if err := c.undo(f); err != nil {
			errs = append(errs, fmt.Errorf("powercut: cut: undo %s of %s: %w", c.kind, c.path, err))
		} else {
			f.logf("powercut: cut: undid %s of %s", c.kind, c.path)
			f.undone.Add(1)
		}
		for _, d := range c.dirs {
			f.unref(d)
		}
	}
	f.journal = nil
	return errs
}

// removeAt removes name in the directory dirfd, and all it holds if it is
// a directory.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == unix.EISDIR || err == unix.EPERM {
		return os.RemoveAll(fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name))
	}
	return err
}
