//go:build !linux

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Patched for siftbatch (see ../PATCH.md): not part of ristretto v2.2.0.

package z

import "os"

// allocate grows fd to size (sparse): only Linux preallocates.
func allocate(fd *os.File, size int64) error {
	fi, err := fd.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < size {
		return fd.Truncate(size)
	}
	return nil
}

// allocateHoles does nothing: only Linux preallocates.
func allocateHoles(*os.File, os.FileInfo) error { return nil }
