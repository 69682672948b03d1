//go:build linux

package powercut_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/sift/batch/engine/enginetest/powercut"
	"github.com/sift/batch/engine/enginetest/testkit"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		// A child process of a test (runChild): it does what must not be
		// done in the process that serves the mount.
		if err := childMain(strings.Split(args, "\x1f")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// childEnv carries a child process's command (runChild).
const childEnv = "POWERCUT_TEST_CHILD"

// runChild runs a command of childMain in a child process: the test
// binary again. A memory-mapped file of the mount (Badger's logs) must
// be used from a process other than the one serving the mount: a page
// fault on it waits for the server, which a stop-the-world of the Go
// runtime (waiting for the faulting goroutine) would never let run.
func runChild(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, "\x1f"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child %q: %s", args, out)
}

// childMain runs one command in a child process.
func childMain(args []string) error {
	switch args[0] {
	case "mmap-msync":
		return mmapMsync(args[1])
	case "mmap-enospc":
		return mmapFault(args[1], syscall.ENOSPC)
	case "mmap-eio":
		return mmapFault(args[1], syscall.EIO)
	case "mmap-ok":
		return mmapFault(args[1], 0)
	case "mmap-prealloc":
		return mmapPrealloc(args[1], args[2])
	case "store-roundtrip":
		return storeRoundTrip(args[1], args[2] == "durable")
	case "store-check":
		n, _ := strconv.Atoi(args[2])
		return checkJobs(args[1], n)
	}
	return fmt.Errorf("unknown child command %q", args)
}

// bundle is a mounted file system and its two directories.
type bundle struct {
	fs      *powercut.FS
	mnt     string // the mount
	backing string // what a machine would find after a cut
	log     *logLines
}

// logLines keeps the file system's log lines (and passes them to t.Logf).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// setup mounts a file system over a new backing directory, or skips the
// test with one line when this process cannot mount (not root, no
// /dev/fuse). It is cut at cleanup if the test left it mounted.
func setup(t *testing.T, opt powercut.Options) *bundle {
	t.Helper()
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	b := &bundle{backing: t.TempDir(), mnt: t.TempDir(), log: &logLines{}}
	opt.Logf = func(format string, args ...any) {
		t.Helper()
		line := fmt.Sprintf(format, args...)
		b.log.mu.Lock()
		b.log.lines = append(b.log.lines, line)
		b.log.mu.Unlock()
		t.Log(line)
	}
	f, err := powercut.Mount(b.backing, b.mnt, opt)
	require.NoError(t, err)
	b.fs = f
	t.Cleanup(func() {
		if err := f.Cut(powercut.DropAll); err != nil && !errors.Is(err, powercut.ErrClosed) {
			t.Errorf("cut at cleanup: %v", err)
		}
	})
	return b
}

func (b *bundle) m(name string) string { return filepath.Join(b.mnt, name) }
func (b *bundle) k(name string) string { return filepath.Join(b.backing, name) }

// write writes data at off in the file name of the mount (creating it),
// fsyncing it if sync.
func (b *bundle) write(t *testing.T, name string, data []byte, off int64, sync bool) {
	t.Helper()
	f, err := os.OpenFile(b.m(name), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(data, off)
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
}

// syncDir fsyncs the directory name of the mount.
func (b *bundle) syncDir(t *testing.T, name string) {
	t.Helper()
	d, err := os.Open(b.m(name))
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Sync())
}

// file makes a file in the mount with content, synced, its entry synced.
func (b *bundle) file(t *testing.T, name string, content []byte) {
	t.Helper()
	b.write(t, name, content, 0, true)
	b.syncDir(t, filepath.Dir(name))
}

func (b *bundle) cut(t *testing.T, mode powercut.CutMode) {
	t.Helper()
	require.NoError(t, b.fs.Cut(mode))
	select {
	case <-b.fs.Done():
	default:
		t.Fatal("Done is not closed after Cut")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

func requireGone(t *testing.T, path string) {
	t.Helper()
	_, err := os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "%s should not exist", path)
}

func requireOnlyNames(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	require.ElementsMatch(t, names, got, "entries of %s", dir)
}

func fill(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

func TestFS_UnsyncedWriteIsGone(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "f", fill('a', 3*4096))
	b.write(t, "f", fill('b', 5000), 1000, false)
	b.write(t, "f", fill('c', 10), 3*4096, false) // grows the file

	want := fill('a', 3*4096)
	copy(want[1000:], fill('b', 5000))
	want = append(want, fill('c', 10)...)
	require.Equal(t, want, readFile(t, b.m("f")), "the mount reads its cache")
	require.Equal(t, fill('a', 3*4096), readFile(t, b.k("f")), "the backing file holds only what was synced")

	b.cut(t, powercut.DropAll)
	require.Equal(t, fill('a', 3*4096), readFile(t, b.k("f")))
	requireOnlyNames(t, b.backing, "f")
	st := b.fs.Stats()
	require.EqualValues(t, 3, st.PagesDropped, "pages 0, 1 and 3")
	require.EqualValues(t, 1, st.Fsyncs)
	require.EqualValues(t, 1, st.DirSyncs)
}

func TestFS_SyncedWriteStays(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "f", fill('a', 8192))
	b.write(t, "f", fill('b', 100), 4000, true)
	// fdatasync counts as well.
	f, err := os.OpenFile(b.m("f"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(fill('c', 10), 8192)
	require.NoError(t, err)
	require.NoError(t, unix.Fdatasync(int(f.Fd())))
	require.NoError(t, f.Close())
	// A truncation synced stays too.
	require.NoError(t, os.WriteFile(b.m("g"), fill('x', 9000), 0o644))
	b.syncDir(t, ".")
	require.NoError(t, os.Truncate(b.m("g"), 10))
	g, err := os.OpenFile(b.m("g"), os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, g.Sync())
	require.NoError(t, g.Close())

	b.cut(t, powercut.DropAll)
	want := fill('a', 8192)
	copy(want[4000:], fill('b', 100))
	want = append(want, fill('c', 10)...)
	require.Equal(t, want, readFile(t, b.k("f")))
	require.Equal(t, fill('x', 10), readFile(t, b.k("g")))
}

func TestFS_TruncateIsCached(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "f", fill('a', 10000))
	require.NoError(t, os.Truncate(b.m("f"), 100))
	require.NoError(t, os.Truncate(b.m("f"), 6000)) // the bytes past 100 are zeros now
	want := append(fill('a', 100), make([]byte, 5900)...)
	require.Equal(t, want, readFile(t, b.m("f")))
	st, err := os.Stat(b.m("f"))
	require.NoError(t, err)
	require.EqualValues(t, 6000, st.Size())
	require.Equal(t, fill('a', 10000), readFile(t, b.k("f")))

	b.cut(t, powercut.DropAll)
	require.Equal(t, fill('a', 10000), readFile(t, b.k("f")))
}

func TestFS_NewFileWithoutDirSyncIsGone(t *testing.T) {
	b := setup(t, powercut.Options{})
	require.NoError(t, os.Mkdir(b.m("d"), 0o755))
	b.syncDir(t, ".")
	// Its directory synced: stays.
	b.write(t, "d/kept.vlog", fill('k', 5000), 0, true)
	// Its data never synced: the directory sync made the file stable, not
	// its data.
	b.write(t, "d/empty.vlog", fill('e', 5000), 0, false)
	b.syncDir(t, "d")
	// Written and fsynced, but its directory never was since: Badger's new
	// logs.
	b.write(t, "d/new.vlog", fill('v', 5000), 0, true)
	// A new directory that its parent never saw synced, with a file in it
	// whose entry was synced: gone with it.
	require.NoError(t, os.Mkdir(b.m("lost"), 0o755))
	b.write(t, "lost/f", fill('f', 10), 0, true)
	b.syncDir(t, "lost")

	b.cut(t, powercut.DropAll)
	require.EqualValues(t, 2, b.fs.Stats().Undone, "the creations of new.vlog and of lost (lost/f's was synced)")
	requireOnlyNames(t, b.backing, "d")
	requireOnlyNames(t, b.k("d"), "kept.vlog", "empty.vlog")
	require.Equal(t, fill('k', 5000), readFile(t, b.k("d/kept.vlog")))
	require.Empty(t, readFile(t, b.k("d/empty.vlog")))
}

func TestFS_RenameNotSyncedIsUndone(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "MANIFEST", []byte("old manifest"))
	b.file(t, "a", []byte("a"))
	// Badger's manifest rewrite: write a new file, sync it, rename it over
	// the old one, sync the directory. Without that last sync the rename
	// is undone, and the new file (never synced into the directory) gone.
	b.write(t, "MANIFEST-REWRITE", []byte("new manifest"), 0, true)
	require.NoError(t, os.Rename(b.m("MANIFEST-REWRITE"), b.m("MANIFEST")))
	require.NoError(t, os.Rename(b.m("a"), b.m("b")))
	require.Equal(t, []byte("new manifest"), readFile(t, b.m("MANIFEST")))
	requireOnlyNames(t, b.mnt, "MANIFEST", "b")

	b.cut(t, powercut.DropAll)
	requireOnlyNames(t, b.backing, "MANIFEST", "a")
	require.Equal(t, []byte("old manifest"), readFile(t, b.k("MANIFEST")))
	require.Equal(t, []byte("a"), readFile(t, b.k("a")))
}

func TestFS_RenameSyncedStays(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "MANIFEST", []byte("old manifest"))
	b.write(t, "MANIFEST-REWRITE", []byte("new manifest"), 0, true)
	require.NoError(t, os.Rename(b.m("MANIFEST-REWRITE"), b.m("MANIFEST")))
	b.syncDir(t, ".")
	// Across directories, both must be synced.
	require.NoError(t, os.Mkdir(b.m("x"), 0o755))
	require.NoError(t, os.Mkdir(b.m("y"), 0o755))
	b.file(t, "x/one", []byte("1"))
	b.file(t, "x/two", []byte("2"))
	b.syncDir(t, ".")
	require.NoError(t, os.Rename(b.m("x/one"), b.m("y/one")))
	require.NoError(t, os.Rename(b.m("x/two"), b.m("y/two")))
	b.syncDir(t, "x")
	b.syncDir(t, "y")
	require.NoError(t, os.Rename(b.m("y/two"), b.m("x/two")))
	b.syncDir(t, "x") // y not: undone

	b.cut(t, powercut.DropAll)
	requireOnlyNames(t, b.backing, "MANIFEST", "x", "y")
	require.Equal(t, []byte("new manifest"), readFile(t, b.k("MANIFEST")))
	requireOnlyNames(t, b.k("x"))
	requireOnlyNames(t, b.k("y"), "one", "two")
	require.Equal(t, []byte("2"), readFile(t, b.k("y/two")))
}

func TestFS_UnlinkNotSyncedIsUndone(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "000001.vlog", fill('1', 5000))
	b.file(t, "000002.vlog", fill('2', 5000))
	require.NoError(t, os.Mkdir(b.m("d"), 0o755))
	b.syncDir(t, ".")
	require.NoError(t, os.Remove(b.m("d")))
	// An unlinked file that is written on through a handle: what of it was
	// synced comes back.
	f, err := os.OpenFile(b.m("000001.vlog"), os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, os.Remove(b.m("000001.vlog")))
	_, err = f.WriteAt(fill('x', 10), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt(fill('y', 10), 10)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Remove(b.m("000002.vlog")))
	requireOnlyNames(t, b.mnt)
	// A name reused before the cut: the new file goes, the old comes back.
	b.write(t, "000002.vlog", []byte("new"), 0, true)

	b.cut(t, powercut.DropAll)
	requireOnlyNames(t, b.backing, "000001.vlog", "000002.vlog", "d")
	want := fill('1', 5000)
	copy(want, fill('x', 10))
	require.Equal(t, want, readFile(t, b.k("000001.vlog")))
	require.Equal(t, fill('2', 5000), readFile(t, b.k("000002.vlog")))
}

func TestFS_UnlinkSyncedStays(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "a", []byte("a"))
	b.file(t, "b", []byte("b"))
	require.NoError(t, os.Remove(b.m("a")))
	b.syncDir(t, ".")
	b.write(t, "b", []byte("unsynced"), 0, false)
	require.NoError(t, os.Rename(b.m("b"), b.m("c")))
	require.NoError(t, os.Remove(b.m("c")))
	b.syncDir(t, ".")
	require.True(t, containsLine(b.log.all(), "b is gone (unlinked, the unlink synced): 1 unsynced pages forgotten"),
		"a file gone for good takes its cache with it")

	b.cut(t, powercut.DropAll)
	requireOnlyNames(t, b.backing)
}

func TestMount_RefusesNesting(t *testing.T) {
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	inside := filepath.Join(dir, "in")
	require.NoError(t, os.Mkdir(inside, 0o755))
	_, err := powercut.Mount(dir, inside, powercut.Options{})
	require.ErrorContains(t, err, "must not contain each other")
	_, err = powercut.Mount(inside, dir, powercut.Options{})
	require.ErrorContains(t, err, "must not contain each other")
	_, err = powercut.Mount(inside, t.TempDir(), powercut.Options{ControlPath: filepath.Join(inside, "ctl")})
	require.ErrorContains(t, err, "must lie outside")
	_, err = powercut.Mount(filepath.Join(dir, "missing"), t.TempDir(), powercut.Options{})
	require.ErrorIs(t, err, os.ErrNotExist)
	requireOnlyNames(t, inside)
}

// TestFS_MmapMsync: a shared writable mapping (Badger's memtable logs)
// reaches the file system when the kernel writes its pages back; only
// msync(MS_SYNC) (an fsync of the file) makes them stable.
func TestFS_MmapMsync(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "00001.mem", make([]byte, mmapSize))
	runChild(t, "mmap-msync", b.m("00001.mem"))
	got := readFile(t, b.m("00001.mem"))
	require.Equal(t, []byte("not msynced"), got[8*4096:8*4096+11], "the mount reads the mapping's last page")

	b.cut(t, powercut.DropAll)
	want := make([]byte, mmapSize)
	copy(want[0:], "msynced")
	copy(want[4096+100:], "msynced too")
	require.Equal(t, want, readFile(t, b.k("00001.mem")))
}

const mmapSize = 16 * 4096

// mmapMsync (in a child process) maps the file, writes two pages and
// msyncs them, writes a third and does not: closing the file writes that
// page to the file system, unsynced.
func mmapMsync(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	copy(m[0:], "msynced")
	copy(m[4096+100:], "msynced too")
	if err := unix.Msync(m[:2*4096], unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	copy(m[8*4096:], "not msynced")
	if err := unix.Munmap(m); err != nil {
		return err
	}
	return f.Close()
}

// TestFS_MmapFaults: a mapping's pages meet the faults too: the kernel's
// write-back into a hole past the write budget fails and msync says
// ENOSPC (as on the full disk Badger's sparse memory-mapped logs meet),
// while a file written before takes them on a full disk; a failed fsync
// makes msync say EIO, once, and its pages are lost.
func TestFS_MmapFaults(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "00001.mem", make([]byte, mmapSize)) // written: allocated
	f, err := os.Create(b.m("sparse.mem"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(mmapSize)) // a hole: no space
	require.NoError(t, f.Close())
	b.fs.SetWriteBudget(4096)
	runChild(t, "mmap-enospc", b.m("sparse.mem"))
	b.fs.SetWriteBudget(0)
	runChild(t, "mmap-ok", b.m("00001.mem"))
	b.fs.SetWriteBudget(-1)
	b.fs.FailNextFsync("00001.mem")
	runChild(t, "mmap-eio", b.m("00001.mem"))
	b.cut(t, powercut.DropAll)
	want := make([]byte, mmapSize)
	for p := range 3 {
		want[p*4096] = 1 // the mmap-ok child's, synced; not the failed one's
	}
	require.Equal(t, want, readFile(t, b.k("00001.mem")))
}

// mmapFault (in a child process) writes three pages of the mapping and
// expects msync to fail with want, then to succeed.
func mmapFault(path string, want syscall.Errno) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(m)
	for p := range 3 {
		m[p*4096]++
	}
	if err := unix.Msync(m, unix.MS_SYNC); want != 0 && !errors.Is(err, want) || want == 0 && err != nil {
		return fmt.Errorf("msync: %v, want %v", err, want)
	}
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync again: %v, want it reported once", err)
	}
	return nil
}

// TestFS_MmapOfPreallocatedFile: Badger's way with a new log: create,
// grow with ftruncate or fallocate, map, write, msync, sync the directory.
func TestFS_MmapOfPreallocatedFile(t *testing.T) {
	b := setup(t, powercut.Options{})
	for _, alloc := range []string{"ftruncate", "fallocate"} {
		runChild(t, "mmap-prealloc", b.m(alloc+".vlog"), alloc)
	}
	b.syncDir(t, ".")
	b.cut(t, powercut.DropAll)
	for _, alloc := range []string{"ftruncate", "fallocate"} {
		got := readFile(t, b.k(alloc+".vlog"))
		require.Len(t, got, 1<<20, alloc)
		require.Equal(t, []byte("entry"), got[300000:300005], alloc)
	}
}

func mmapPrealloc(path, alloc string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if alloc == "ftruncate" {
		err = f.Truncate(1 << 20)
	} else {
		err = unix.Fallocate(int(f.Fd()), 0, 0, 1<<20)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", alloc, err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	copy(m[300000:], "entry")
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	if err := unix.Munmap(m); err != nil {
		return err
	}
	return f.Close()
}

var tornRe = regexp.MustCompile(`page (\d+) torn: kept (\d+) of its (\d+) bytes`)

// TestFS_TearLastKeepsAPrefix: the last page written keeps exactly a
// prefix of its new bytes, the rest as synced; the same seed tears it at
// the same byte.
func TestFS_TearLastKeepsAPrefix(t *testing.T) {
	torn := func(seed int64) int {
		b := setup(t, powercut.Options{Seed: seed})
		b.file(t, "f", fill('a', 3*4096))
		b.write(t, "f", fill('x', 4096), 0, false)    // dropped
		b.write(t, "f", fill('b', 4096), 4096, false) // the last page: torn
		b.cut(t, powercut.TearLast)
		got := readFile(t, b.k("f"))
		require.Len(t, got, 3*4096)
		require.Equal(t, fill('a', 4096), got[:4096], "an earlier unsynced page is dropped")
		require.Equal(t, fill('a', 4096), got[2*4096:])
		page := got[4096 : 2*4096]
		k := bytes.IndexByte(page, 'a')
		require.Greater(t, k, 0, "the torn page keeps at least one new byte")
		require.Equal(t, fill('b', k), page[:k])
		require.Equal(t, fill('a', 4096-k), page[k:], "past the tear: the synced bytes")
		var logged []string
		for _, l := range b.log.all() {
			if m := tornRe.FindStringSubmatch(l); m != nil {
				logged = m[1:]
			}
		}
		require.Equal(t, []string{"1", strconv.Itoa(k), "4096"}, logged, "the log says where it tore")
		st := b.fs.Stats()
		require.EqualValues(t, 1, st.PagesKept)
		require.EqualValues(t, 1, st.PagesDropped)
		return k
	}
	k1 := torn(7)
	require.Equal(t, k1, torn(7), "the same seed tears at the same byte")
}

var keptRe = regexp.MustCompile(`kept the (\d+) oldest of (\d+) unsynced pages`)

// TestFS_DropRandomKeepsOlderPages: what a random cut keeps of a file's
// unsynced pages is a prefix of them in write order: older kept, newer
// lost.
func TestFS_DropRandomKeepsOlderPages(t *testing.T) {
	const pages = 8
	order := []int{3, 0, 7, 1, 6, 2, 5, 4} // page written i-th
	kept := map[int]bool{}
	for seed := int64(1); seed <= 6; seed++ {
		b := setup(t, powercut.Options{Seed: seed})
		b.file(t, "f", fill('.', pages*4096))
		for i, p := range order {
			b.write(t, "f", fill(byte('A'+i), 4096), int64(p)*4096, false)
		}
		b.cut(t, powercut.DropRandom)
		got := readFile(t, b.k("f"))
		require.Len(t, got, pages*4096)
		k := 0
		for k < pages && got[order[k]*4096] != '.' {
			k++
		}
		for i, p := range order {
			page := got[p*4096 : (p+1)*4096]
			if i < k {
				require.Equal(t, fill(byte('A'+i), 4096), page, "seed %d: write %d (page %d) kept whole", seed, i, p)
			} else {
				require.Equal(t, fill('.', 4096), page, "seed %d: write %d (page %d) lost, as every later one", seed, i, p)
			}
		}
		var logged []string
		for _, l := range b.log.all() {
			if m := keptRe.FindStringSubmatch(l); m != nil {
				logged = m[1:]
			}
		}
		require.Equal(t, []string{strconv.Itoa(k), strconv.Itoa(pages)}, logged, "seed %d", seed)
		require.Equal(t, powercut.Stats{Fsyncs: 1, DirSyncs: 1, PagesKept: int64(k), PagesDropped: int64(pages - k)}, b.fs.Stats())
		kept[k] = true
	}
	require.Greater(t, len(kept), 1, "different seeds keep different prefixes")
}

func TestFS_FailNextFsyncDropsPages(t *testing.T) {
	b := setup(t, powercut.Options{})
	require.NoError(t, os.Mkdir(b.m("d"), 0o755))
	b.syncDir(t, ".")
	b.file(t, "d/f", fill('a', 8192))
	f, err := os.OpenFile(b.m("d/f"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(fill('b', 4096), 0)
	require.NoError(t, err)
	b.fs.FailNextFsync("d/f")
	require.ErrorIs(t, f.Sync(), syscall.EIO)
	require.NoError(t, f.Sync(), "the error is returned once")
	require.EqualValues(t, 1, b.fs.Stats().FailedSyncs)
	require.NoError(t, f.Close())
	require.Equal(t, fill('a', 8192), readFile(t, b.m("d/f")), "the pages of the failed fsync are lost")
	// The file system goes on: a later write and fsync stay.
	b.write(t, "d/f", fill('c', 10), 0, true)

	require.NoError(t, b.fs.Unmount())
	want := fill('a', 8192)
	copy(want, fill('c', 10))
	require.Equal(t, want, readFile(t, b.k("d/f")))
}

// TestFS_FailNextFsyncOfADirectory: a directory's failed fsync leaves its
// changes unstable; the next one makes them stable.
func TestFS_FailNextFsyncOfADirectory(t *testing.T) {
	b := setup(t, powercut.Options{})
	require.NoError(t, os.Mkdir(b.m("d"), 0o755))
	b.syncDir(t, ".")
	b.write(t, "d/lost", []byte("x"), 0, true)
	b.fs.FailNextFsync("d")
	d, err := os.Open(b.m("d"))
	require.NoError(t, err)
	defer d.Close()
	require.ErrorIs(t, d.Sync(), syscall.EIO)
	b.cut(t, powercut.DropAll)
	requireOnlyNames(t, b.k("d"))

	b = setup(t, powercut.Options{})
	b.write(t, "kept", []byte("x"), 0, true)
	b.fs.FailNextFsync(".")
	d, err = os.Open(b.mnt)
	require.NoError(t, err)
	defer d.Close()
	require.ErrorIs(t, d.Sync(), syscall.EIO)
	require.NoError(t, d.Sync())
	b.cut(t, powercut.DropAll)
	requireOnlyNames(t, b.backing, "kept")
}

// TestFS_CutUnderLoad: writers append records to their files, each fsync
// acknowledged; a cut in the middle, in each mode, keeps every
// acknowledged record, whatever it does to the rest, and returns although
// the writers are still at it.
func TestFS_CutUnderLoad(t *testing.T) {
	for _, mode := range []powercut.CutMode{powercut.DropAll, powercut.DropRandom, powercut.TearLast} {
		t.Run(mode.String(), func(t *testing.T) {
			b := setup(t, powercut.Options{})
			const writers, record = 4, 1000
			for w := range writers {
				b.write(t, "w"+strconv.Itoa(w), nil, 0, true)
			}
			b.syncDir(t, ".")
			acked := make([]atomic.Int64, writers) // records acknowledged by an fsync
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					f, err := os.OpenFile(b.m("w"+strconv.Itoa(w)), os.O_RDWR, 0)
					if err != nil {
						return
					}
					defer f.Close()
					for i := int64(0); ; i++ {
						if _, err := f.WriteAt(fill(byte('a'+i%26), record), i*record); err != nil {
							return
						}
						if i%3 == 2 { // some records are written and never synced
							continue
						}
						if err := f.Sync(); err != nil {
							return
						}
						acked[w].Store(i + 1)
					}
				}()
			}
			testkit.WaitFor(t, "20 records acknowledged by each writer", func() bool {
				for w := range writers {
					if acked[w].Load() < 20 {
						return false
					}
				}
				return true
			})
			b.cut(t, mode)
			wg.Wait()
			for w := range writers {
				got := readFile(t, b.k("w"+strconv.Itoa(w)))
				n := acked[w].Load()
				require.GreaterOrEqual(t, int64(len(got)), n*record, "writer %d: %d records acknowledged", w, n)
				for i := range n {
					require.Equal(t, fill(byte('a'+i%26), record), got[i*record:(i+1)*record], "writer %d record %d", w, i)
				}
			}
		})
	}
}

func TestFS_FailFsyncs(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "f", []byte("synced"))
	b.fs.FailFsyncs(1)
	f, err := os.OpenFile(b.m("f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	for range 3 {
		_, err = f.WriteAt([]byte("lost!!"), 0)
		require.NoError(t, err)
		require.ErrorIs(t, f.Sync(), syscall.EIO)
	}
	d, err := os.Open(b.mnt)
	require.NoError(t, err)
	defer d.Close()
	require.ErrorIs(t, d.Sync(), syscall.EIO, "a directory's fsync fails too")
	b.fs.FailFsyncs(0)
	_, err = f.WriteAt([]byte("kept!!"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	b.cut(t, powercut.DropAll)
	require.Equal(t, []byte("kept!!"), readFile(t, b.k("f")))
}

func TestFS_WriteBudget(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "f", nil)
	b.fs.SetWriteBudget(3 * 4096)
	f, err := os.OpenFile(b.m("f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	// Page-aligned: the kernel sends each write(2) here as one request.
	_, err = f.WriteAt(fill('a', 2*4096), 0)
	require.NoError(t, err)
	n, err := f.WriteAt(fill('b', 2*4096), 2*4096)
	require.ErrorIs(t, err, syscall.ENOSPC, "past the budget")
	require.Zero(t, n, "a write that does not fit writes nothing")
	_, err = f.WriteAt(fill('b', 4096), 2*4096)
	require.NoError(t, err, "one that fits does")
	_, err = f.WriteAt([]byte("x"), 3*4096)
	require.ErrorIs(t, err, syscall.ENOSPC, "the disk is full")
	_, err = f.WriteAt([]byte("x"), 0)
	require.NoError(t, err, "an overwrite needs no space")
	require.ErrorIs(t, unix.Fallocate(int(f.Fd()), 0, 0, 1<<20), syscall.ENOSPC, "fallocate needs space")
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(b.mnt, &st))
	require.Zero(t, st.Bavail, "statfs shows the budget")
	require.EqualValues(t, 3, b.fs.Stats().NoSpace)

	// Preallocated, as Badger's mapped files: the writes into it need no
	// more space.
	g, err := os.OpenFile(b.m("g"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer g.Close()
	b.fs.SetWriteBudget(1 << 20)
	require.ErrorIs(t, unix.Fallocate(int(g.Fd()), 0, 0, 2<<20), syscall.ENOSPC)
	require.NoError(t, unix.Fallocate(int(g.Fd()), 0, 0, 1<<20))
	_, err = g.WriteAt(fill('g', 1<<20), 0)
	require.NoError(t, err)
	_, err = g.WriteAt([]byte("x"), 1<<20)
	require.ErrorIs(t, err, syscall.ENOSPC)
	// ftruncate makes a hole: a write into it needs the space.
	require.NoError(t, g.Truncate(4<<20))
	_, err = g.WriteAt([]byte("x"), 3<<20)
	require.ErrorIs(t, err, syscall.ENOSPC)

	b.fs.SetWriteBudget(-1)
	_, err = f.WriteAt([]byte("y"), 1)
	require.NoError(t, err)
	require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 1<<20))
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	b.cut(t, powercut.DropAll)
	got := readFile(t, b.k("f"))
	require.Len(t, got, 1<<20)
	require.Equal(t, append([]byte("xy"), fill('a', 2*4096-2)...), got[:2*4096])
	require.Equal(t, fill('b', 4096), got[2*4096:3*4096])
	require.Equal(t, make([]byte, 1<<20-3*4096), got[3*4096:])
}

// TestFS_UnmountKeepsEverything: a clean unmount is a clean shutdown:
// nothing is lost.
func TestFS_UnmountKeepsEverything(t *testing.T) {
	b := setup(t, powercut.Options{})
	b.file(t, "old", []byte("old"))
	require.NoError(t, os.MkdirAll(b.m("d/e"), 0o755))
	b.write(t, "d/e/new", []byte("never synced"), 0, false)
	require.NoError(t, os.Rename(b.m("old"), b.m("d/renamed")))
	require.NoError(t, b.fs.Unmount())
	require.ErrorIs(t, b.fs.Unmount(), powercut.ErrClosed)
	require.ErrorIs(t, b.fs.Cut(powercut.DropAll), powercut.ErrClosed)
	requireOnlyNames(t, b.backing, "d")
	requireOnlyNames(t, b.k("d"), "e", "renamed")
	require.Equal(t, []byte("never synced"), readFile(t, b.k("d/e/new")))
	require.Equal(t, []byte("old"), readFile(t, b.k("d/renamed")))
}

// TestFS_CutWithFilesOpen: a cut does not wait for the processes that use
// the mount; what they do after it fails.
func TestFS_CutWithFilesOpen(t *testing.T) {
	b := setup(t, powercut.Options{})
	f, err := os.OpenFile(b.m("f"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write([]byte("x"))
	require.NoError(t, err)
	b.cut(t, powercut.DropAll)
	_, err = f.Write([]byte("y"))
	require.Error(t, err)
	requireOnlyNames(t, b.backing)
}

// TestFS_ControlFile: a process outside the test drives the faults and
// the cut through the control FIFO.
func TestFS_ControlFile(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "control")
	b := setup(t, powercut.Options{ControlPath: ctl})
	st, err := os.Stat(ctl)
	require.NoError(t, err)
	require.NotZero(t, st.Mode()&os.ModeNamedPipe)
	b.file(t, "f", []byte("synced"))
	send := func(cmd string) {
		w, err := os.OpenFile(ctl, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = w.WriteString(cmd + "\n")
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	send("bogus")
	send("stats")
	send("eio f")
	testkit.WaitFor(t, "eio f done", func() bool { return containsLine(b.log.all(), `"eio f" done`) })
	f, err := os.OpenFile(b.m("f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("lost"), 0)
	require.NoError(t, err)
	require.ErrorIs(t, f.Sync(), syscall.EIO)
	send("enospc 3")
	testkit.WaitFor(t, "enospc 3 done", func() bool { return containsLine(b.log.all(), `"enospc 3" done`) })
	_, err = f.WriteAt([]byte("abcdefghij"), 0)
	require.ErrorIs(t, err, syscall.ENOSPC, "4 bytes past the file's 6")
	_, err = f.WriteAt([]byte("abcdefghi"), 0)
	require.NoError(t, err, "3 bytes past them")
	require.NoError(t, f.Truncate(3))
	_, err = f.WriteAt([]byte("abc"), 0)
	require.NoError(t, err, "an overwrite")
	send("cut tear")
	testkit.RequireClosed(t, b.fs.Done())
	require.ErrorIs(t, b.fs.Cut(powercut.DropAll), powercut.ErrClosed)
	require.True(t, containsLine(b.log.all(), `unknown command "bogus"`))
	require.True(t, containsLine(b.log.all(), `powercut: stats: {Fsyncs:1 DirSyncs:1 FailedSyncs:0`))
	got := readFile(t, b.k("f"))
	require.Len(t, got, 6, "the truncation is dropped")
	k := 0
	for k < 3 && got[k] == "abc"[k] {
		k++
	}
	require.Greater(t, k, 0)
	require.Equal(t, "abc"[:k]+"synced"[k:], string(got), "torn at %d", k)
	requireGone(t, ctl)
}

func containsLine(lines []string, sub string) bool {
	for _, l := range lines {
		if bytes.Contains([]byte(l), []byte(sub)) {
			return true
		}
	}
	return false
}
