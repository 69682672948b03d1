package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes on a new directory for the test
// and unmounts it at cleanup; it skips the test, with one line, where it
// cannot (not root, no mount(8), no tmpfs): a full disk that is real, and
// small. Linux only.
func MountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a tmpfs of its own: needs root (CI runs as root)")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// FreeBytes is the space available on dir's file system.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", filepath.Base(dir), err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// FillDisk fills dir's file system from another process (fallocate(1),
// then dd for what fallocate leaves), leaving about leave bytes free, in a
// file it returns; removing the file frees the room.
func FillDisk(t testing.TB, dir string, leave int64) string {
	t.Helper()
	f := filepath.Join(dir, "ballast-of-the-test")
	n := FreeBytes(t, dir) - leave
	if n <= 0 {
		return f
	}
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(n, 10), f).CombinedOutput(); err != nil {
		// No fallocate(1): dd writes it (and stops at a full disk).
		out2, err2 := exec.Command("dd", "if=/dev/zero", "of="+f, "bs=64k", "count="+strconv.FormatInt(n/(64<<10), 10)).CombinedOutput()
		if err2 != nil {
			t.Logf("fill the disk: fallocate: %v: %s; dd: %v: %s", err, out, err2, out2)
		}
	}
	return f
}
