/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import (
	"fmt"
)

// Truncate would truncate the mmapped file to the given size. On Linux, we truncate
// the underlying file and then call mremap, but on other systems, we unmap first,
// then truncate, then re-map.
func (m *MmapFile) Truncate(maxSz int64) error {
	if err := m.Sync(); err != nil {
		return fmt.Errorf("while sync file: %s, error: %v\n", m.Fd.Name(), err)
	}
	// Patched for siftbatch: a file that grows gets its blocks first (it
	// was a sparse truncate: see allocate), and the error keeps its cause.
	if old := int64(len(m.Data)); maxSz > old {
		if err := allocate(m.Fd, maxSz); err != nil {
			_ = m.Fd.Truncate(old) // fallocate may have grown it part of the way
			return fmt.Errorf("while allocating file: %s: %w", m.Fd.Name(), err)
		}
	}
	if err := m.Fd.Truncate(maxSz); err != nil {
		return fmt.Errorf("while truncate file: %s, error: %w", m.Fd.Name(), err)
	}

	var err error
	m.Data, err = mremap(m.Data, int(maxSz)) // Mmap up to max size.
	return err
}
