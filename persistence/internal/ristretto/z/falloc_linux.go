/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Patched for siftbatch (see ../PATCH.md): not part of ristretto v2.2.0.

package z

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// allocate gives fd disk blocks for its first size bytes, growing the file
// to size if it is shorter, so that a write through a map of them cannot
// fault for want of space (a SIGBUS, which kills a Go program): a full disk
// fails here instead, with an error wrapping ENOSPC. A file system without
// fallocate gets the sparse truncate of before.
func allocate(fd *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(fd.Fd()), 0, 0, size)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			fi, serr := fd.Stat()
			if serr != nil {
				return serr
			}
			if fi.Size() < size {
				return fd.Truncate(size)
			}
			return nil
		}
		return &os.PathError{Op: "fallocate", Path: fd.Name(), Err: err}
	}
}

// allocateHoles allocates the holes of a file that is mapped writable
// (one written sparse by an older version): it stays the same size.
func allocateHoles(fd *os.File, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Blocks*512 >= fi.Size() {
		return nil
	}
	return allocate(fd, fi.Size())
}
