//go:build !linux

package powercut

// FS is a mounted power-cut file system: Linux only. Elsewhere [Mount]
// fails with [Available]'s error, so there is never one to call.
type FS struct{}

// Mount fails outside Linux, with [Available]'s error.
func Mount(backing, mountpoint string, opt Options) (*FS, error) { return nil, Available() }

// Seed: see the Linux build.
func (f *FS) Seed() int64 { return 0 }

// Mountpoint: see the Linux build.
func (f *FS) Mountpoint() string { return "" }

// Done: see the Linux build.
func (f *FS) Done() <-chan struct{} { return nil }

// Stats: see the Linux build.
func (f *FS) Stats() Stats { return Stats{} }

// Cut: see the Linux build.
func (f *FS) Cut(mode CutMode) error { return Available() }

// Unmount: see the Linux build.
func (f *FS) Unmount() error { return Available() }

// FailNextFsync: see the Linux build.
func (f *FS) FailNextFsync(name string) {}

// FailFsyncs: see the Linux build.
func (f *FS) FailFsyncs(p float64) {}

// SetWriteBudget: see the Linux build.
func (f *FS) SetWriteBudget(n int64) {}
