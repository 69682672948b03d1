//go:build linux

package powercut

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// cache is what a file holds that is not synced: its pages written since
// its last fsync, its size, and how far it was truncated. The backing file
// holds the synced state; the file reads as the cache over it.
type cache struct {
	born uint64 // the seq at which the file became dirty: cut order
	size int64  // the file's size as written
	// floor is the smallest size the file had since it was last synced:
	// bytes of the backing file at or past it are gone (truncated), and
	// read as zeros unless a page was written over them.
	floor int64
	pages map[int64]*page // by page index
}

type page struct {
	seq  uint64 // the seq of its latest write: its place in write order
	data [pageSize]byte
}

// newCache starts the cache of a file whose backing file has size bytes.
func newCache(born uint64, size int64) *cache {
	return &cache{born: born, size: size, floor: size, pages: map[int64]*page{}}
}

// readAt reads len(p) bytes at off (fewer at the end of the file) from the
// cache over the backing file fd.
func (c *cache) readAt(fd int, p []byte, off int64) (int, error) {
	if off >= c.size {
		return 0, nil
	}
	p = p[:min(int64(len(p)), c.size-off)]
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		idx, in := pos/pageSize, pos%pageSize
		n := min(int64(len(p)-done), pageSize-in)
		dst := p[done : done+int(n)]
		if pg := c.pages[idx]; pg != nil {
			copy(dst, pg.data[in:in+n])
		} else if err := c.readBacking(fd, dst, pos); err != nil {
			return done, err
		}
		done += int(n)
	}
	return done, nil
}

// readBacking reads dst at off from the backing file: zeros past its end
// and past the floor.
func (c *cache) readBacking(fd int, dst []byte, off int64) error {
	clear(dst)
	if off >= c.floor {
		return nil
	}
	dst = dst[:min(int64(len(dst)), c.floor-off)]
	for len(dst) > 0 {
		n, err := unix.Pread(fd, dst, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		dst, off = dst[n:], off+int64(n)
	}
	return nil
}

// writeAt writes p at off into the cache, each page it touches numbered
// by next().
func (c *cache) writeAt(fd int, p []byte, off int64, next func() uint64) error {
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		idx, in := pos/pageSize, pos%pageSize
		n := min(int64(len(p)-done), pageSize-in)
		pg, err := c.page(fd, idx)
		if err != nil {
			return err
		}
		copy(pg.data[in:in+n], p[done:done+int(n)])
		pg.seq = next()
		done += int(n)
	}
	c.size = max(c.size, off+int64(len(p)))
	return nil
}

// page returns the cached page idx, read from the backing file first.
func (c *cache) page(fd int, idx int64) (*page, error) {
	if pg := c.pages[idx]; pg != nil {
		return pg, nil
	}
	pg := &page{}
	if err := c.readBacking(fd, pg.data[:], idx*pageSize); err != nil {
		return nil, err
	}
	c.pages[idx] = pg
	return pg, nil
}

// truncate sets the size: pages past it are dropped, the rest of the page
// it falls in zeroed.
func (c *cache) truncate(size int64) {
	if size < c.size {
		for idx, pg := range c.pages {
			start := idx * pageSize
			switch {
			case start >= size:
				delete(c.pages, idx)
			case start+pageSize > size:
				clear(pg.data[size-start:])
			}
		}
		c.floor = min(c.floor, size)
	}
	c.size = size
}

// zero writes zeros over [off, off+n) within the file's size (a punched
// hole or a zeroed range).
func (c *cache) zero(fd int, off, n int64, next func() uint64) error {
	end := min(off+n, c.size)
	for pos := off; pos < end; {
		idx, in := pos/pageSize, pos%pageSize
		m := min(end-pos, pageSize-in)
		pg, err := c.page(fd, idx)
		if err != nil {
			return err
		}
		clear(pg.data[in : in+m])
		pg.seq = next()
		pos += m
	}
	return nil
}

// flush writes the cache to the backing file fd and syncs it.
func (c *cache) flush(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if c.floor < st.Size {
		if err := unix.Ftruncate(fd, c.floor); err != nil {
			return fmt.Errorf("truncate: %w", err)
		}
	}
	for _, idx := range c.order() {
		if err := c.writePage(fd, idx, pageSize); err != nil {
			return err
		}
	}
	if err := unix.Ftruncate(fd, c.size); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
}

// writePage writes the first n bytes of page idx (no further than the
// file's size) to the backing file.
func (c *cache) writePage(fd int, idx int64, n int64) error {
	start := idx * pageSize
	n = min(n, c.size-start)
	if n <= 0 {
		return nil
	}
	buf := c.pages[idx].data[:n]
	for off := start; len(buf) > 0; {
		w, err := unix.Pwrite(fd, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		buf, off = buf[w:], off+int64(w)
	}
	return nil
}

// order returns the indexes of the cached pages in write order (oldest
// latest-write first).
func (c *cache) order() []int64 {
	idx := make([]int64, 0, len(c.pages))
	for i := range c.pages {
		idx = append(idx, i)
	}
	slices.SortFunc(idx, func(a, b int64) int {
		return int64Cmp(c.pages[a].seq, c.pages[b].seq)
	})
	return idx
}

// pageLen is how many bytes of page idx lie within the file.
func (c *cache) pageLen(idx int64) int64 {
	return max(0, min(pageSize, c.size-idx*pageSize))
}
