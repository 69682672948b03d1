//go:build unix

package persistence

import (
	"os"
	"syscall"
)

// statfsFree is the space available to an unprivileged process on dir's
// file system.
func statfsFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// statfsSize is the size of dir's file system, less the blocks kept for
// root (which statfsFree never counts): the most it could ever have free.
func statfsSize(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks-(st.Bfree-st.Bavail)) * int64(st.Bsize), nil
}

// dirUsage is the space the files of dir (not its subdirectories') take on
// its file system: their blocks, as du counts them.
func dirUsage(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && info.Mode().IsRegular() {
			n += st.Blocks * 512
		}
	}
	return n, nil
}
