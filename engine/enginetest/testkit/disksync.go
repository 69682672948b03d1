package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// diskSyncBlock and diskSyncFile: DiskSyncRate writes 4 KiB blocks over a
// 1 MiB file, allocated (and synced) first, so that no write changes the
// file's size: each one costs what a sync of an allocated log page costs,
// as Badger's preallocated, memory-mapped logs do.
const (
	diskSyncBlock = 4 << 10
	diskSyncFile  = 1 << 20
)

// DiskSyncRate measures how many synced writes per second the disk under
// dir takes: a loop of 4 KiB writes to a file opened O_DSYNC in dir, for
// at least d and at least 50 writes. The file is removed before it
// returns. It is a benchmark's reference for a durable store's syncs (one
// such write is about one fdatasync of a log page); not for tests.
func DiskSyncRate(dir string, d time.Duration) (float64, error) {
	name := filepath.Join(dir, fmt.Sprintf("disksync-%d.probe", os.Getpid()))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("disk sync rate: %w", err)
	}
	defer os.Remove(name)
	defer f.Close()
	block := make([]byte, diskSyncBlock)
	for i := range block {
		block[i] = byte(i)
	}
	for off := int64(0); off < diskSyncFile; off += diskSyncBlock {
		if _, err := f.WriteAt(block, off); err != nil {
			return 0, fmt.Errorf("disk sync rate: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("disk sync rate: %w", err)
	}
	ds, err := os.OpenFile(name, os.O_WRONLY|syscall.O_DSYNC, 0)
	if err != nil {
		return 0, fmt.Errorf("disk sync rate: %w", err)
	}
	defer ds.Close()
	n, start := 0, time.Now()
	for ; n < 50 || time.Since(start) < d; n++ {
		block[0] = byte(n)
		if _, err := ds.WriteAt(block, int64(n%(diskSyncFile/diskSyncBlock))*diskSyncBlock); err != nil {
			return 0, fmt.Errorf("disk sync rate: %w", err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
