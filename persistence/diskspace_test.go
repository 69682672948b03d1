package persistence

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine/batchtype"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/stretchr/testify/require"
)

// fakeDisk is a statfs that answers free, and counts its calls.
type fakeDisk struct {
	free  atomic.Int64
	calls atomic.Int64
	err   atomic.Pointer[error]
}

func (f *fakeDisk) statfs(string) (int64, error) {
	f.calls.Add(1)
	if e := f.err.Load(); e != nil {
		return 0, *e
	}
	return f.free.Load(), nil
}

// TestStore_DiskReserveIsTheOpenFiles: the runner's default reserve is what
// the store opens its next files at.
func TestStore_DiskReserveIsTheOpenFiles(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, openFilesSize, batchtype.DefaultDiskReserve)
	o := badgerOptions(t.TempDir(), nil)
	require.EqualValues(t, 2*o.ValueLogFileSize+int64(o.NumMemtables)*memLogFileSize, batchtype.DefaultDiskReserve)
}

// TestStore_WatchDisk: the watch reports full below the reserve and not
// above it, logs the change once (a Warn), repeats it at most once per
// LogEvery by the injected clock, and logs the room coming back (an Info);
// a statfs error is logged once and leaves the state as it was; a reserve
// of 0 stops the watch; a store in memory has no disk.
func TestStore_WatchDisk(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	var logs testkit.SyncBuffer
	s.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	disk := &fakeDisk{}
	disk.free.Store(1000)
	s.SetDiskStatfs(disk.statfs)
	clock := testkit.NewClock()
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 100, Every: time.Hour, LogEvery: time.Minute, Now: clock.Now}))
	require.False(t, s.DiskFull())
	require.Equal(t, DiskState{Free: 1000, Reserve: 100, Since: clock.Now()}, s.Disk())

	warns := func() int { return strings.Count(logs.String(), "level=WARN") }
	disk.free.Store(99)
	clock.Advance(time.Second)
	st, err := s.MeasureDisk()
	require.NoError(t, err)
	require.Equal(t, DiskState{Free: 99, Reserve: 100, Full: true, Since: clock.Now()}, st)
	require.True(t, s.DiskFull())
	require.Equal(t, 1, warns())
	require.Contains(t, logs.String(), "free_bytes=99 reserve_bytes=100")

	clock.Advance(59 * time.Second)
	_, err = s.MeasureDisk()
	require.NoError(t, err)
	require.Equal(t, 1, warns(), "rate-limited: one line a minute")
	clock.Advance(time.Second)
	_, err = s.MeasureDisk()
	require.NoError(t, err)
	require.Equal(t, 2, warns())
	require.Contains(t, logs.String(), `msg="disk still below its reserve" free_bytes=99 reserve_bytes=100 full_seconds=60`)

	fail := error(syscall.EIO)
	disk.err.Store(&fail)
	for range 3 {
		_, err = s.MeasureDisk()
		require.ErrorIs(t, err, syscall.EIO)
	}
	require.True(t, s.DiskFull(), "an error measures nothing")
	require.Equal(t, 3, warns(), "a statfs error is logged once")
	disk.err.Store(nil)

	disk.free.Store(100)
	clock.Advance(time.Second)
	st, err = s.MeasureDisk()
	require.NoError(t, err)
	require.Equal(t, DiskState{Free: 100, Reserve: 100, Since: clock.Now()}, st)
	require.False(t, s.DiskFull())
	require.Contains(t, logs.String(), "level=INFO msg=\"disk has room again: jobs go on\" free_bytes=100 reserve_bytes=100 full_seconds=61")

	disk.free.Store(10)
	require.NoError(t, s.WatchDisk(DiskWatch{}))
	require.False(t, s.DiskFull(), "no reserve: never full")
	require.Zero(t, s.Disk().Reserve)

	mem := mustOpen(t, "")
	mem.SetDiskStatfs(disk.statfs)
	require.NoError(t, mem.WatchDisk(DiskWatch{Reserve: 100}))
	require.False(t, mem.DiskFull())
	require.Equal(t, DiskState{}, mem.Disk())
	testkit.RequireNoneOf(t, logs.String(), s.Dir())
}

// TestStore_DiskMeasuredAfterWrites: between two ticks the store's own
// writes, once they may have used up the room above the reserve, make the
// watch measure at once.
func TestStore_DiskMeasuredAfterWrites(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	disk := &fakeDisk{}
	disk.free.Store(100 + 3<<20) // 3 MiB above the reserve: 1.5 MiB of writes (counted twice)
	s.SetDiskStatfs(disk.statfs)
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 100, Every: time.Hour}))
	base := disk.calls.Load()
	j := putJobRecord(t, s, 1, 1, 1, false)
	require.Equal(t, base, disk.calls.Load(), "a small write measures nothing")
	disk.free.Store(50)
	for i := range 2 {
		tr := TargetRecord{Idx: i, Status: TargetDone, Result: result(1<<20, i), Stored: 2}
		require.NoError(t, s.SaveOutcome(j.ID, &tr))
	}
	testkit.WaitFor(t, "the watch to measure after 2 MiB written", func() bool { return s.DiskFull() })
	require.Greater(t, disk.calls.Load(), base)
}

// TestStore_DiskFullError: a write that fails for a full disk wraps
// ErrDiskFull, whether Badger kept the errno or only its text, and is
// retryable.
func TestStore_DiskFullError(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		syscall.ENOSPC,
		fmt.Errorf("while allocating file: 000003.vlog: %w", &os.PathError{Op: "fallocate", Path: "x", Err: syscall.ENOSPC}),
		errors.New("Unable to create memtable file. Path=x. Error=fallocate x: no space left on device"),
		syscall.EDQUOT,
	} {
		got := convert("save outcome", err)
		require.ErrorIs(t, got, ErrDiskFull, "%v", err)
		require.ErrorIs(t, got, batchtype.ErrDiskFull)
		require.True(t, retryable(got))
		require.Equal(t, "save outcome: disk full", got.Error())
	}
	require.NotErrorIs(t, convert("x", syscall.EIO), ErrDiskFull)
}

// TestStore_DiskFullTmpfs fills a real disk from another process while the
// store writes: a tmpfs, where a write through a sparse map of a full disk
// is a SIGBUS. Each write that finds no room fails with an error wrapping
// ErrDiskFull (the process lives: Badger's files are preallocated, see
// internal/ristretto), the store keeps reading what it stored, and once
// the filler is removed the writes work again, on the same store. Root
// only.
func TestStore_DiskFullTmpfs(t *testing.T) {
	testkit.Long(t)
	mnt := testkit.MountTmpfs(t, 96<<20)
	s := mustOpen(t, mnt+"/store")
	j := putJobRecord(t, s, 1, 1, 1, false)
	filler := testkit.FillDisk(t, mnt, 4<<20)
	var stored []int
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		tr := TargetRecord{Idx: i % 2, Status: TargetDone, Result: result(1<<20, i), Stored: 2}
		if err := s.SaveOutcome(j.ID, &tr); err != nil {
			full = err
			break
		}
		stored = append(stored, i)
	}
	require.Error(t, full, "the disk never filled")
	require.ErrorIs(t, full, ErrDiskFull)
	_, ts, err := s.JobWithTargets(j.ID)
	require.NoError(t, err, "reads work on a full disk")
	require.Len(t, ts, 2)
	require.NoError(t, os.Remove(filler))
	var again error
	testkit.WaitFor(t, "a write to work once there is room", func() bool {
		tr := TargetRecord{Idx: 1, Status: TargetDone, Result: result(1<<20, 7), Stored: 3}
		again = s.SaveOutcome(j.ID, &tr)
		return again == nil
	})
	_, ts, err = s.JobWithTargets(j.ID)
	require.NoError(t, err)
	require.Equal(t, result(1<<20, 7), ts[1].Result)
	t.Logf("%d writes of 1 MiB before the disk was full (%v); written again once the filler was removed", len(stored), full)
}

// BenchmarkStore_DiskWatch: the free-space check's cost per write, side by
// side: 8 writers, each the owner of one live job, write one 1 KiB outcome
// after another on a directory store, with the disk watched (a reserve:
// every write passes the gate and counts its bytes; statfs every second and
// when the room above the reserve may be used up) and with the check off
// (no watch, and no gate nor count in any write: noDiskCheck). With -count 1
// the two alternate, ABBA, DISK_BENCH_ROUNDS pairs (3 by default). One op
// is one outcome written.
func BenchmarkStore_DiskWatch(b *testing.B) {
	rounds, _ := strconv.Atoi(os.Getenv("DISK_BENCH_ROUNDS"))
	for i := range max(rounds, 3) * 2 {
		// ABBA: each pair's first run is the other arm every other pair,
		// so that neither pays for going first (the last run's files
		// removed, a cold cache).
		watch := i%4 == 1 || i%4 == 2
		b.Run(fmt.Sprintf("watch=%v", watch), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.noDiskCheck = !watch
			if watch {
				if err := s.WatchDisk(DiskWatch{Reserve: batchtype.DefaultDiskReserve}); err != nil {
					b.Fatal(err)
				}
				if s.DiskFull() {
					b.Skip("the disk is below the reserve")
				}
			}
			const writers = 8
			jobs := make([]JobRecord, writers)
			for i := range jobs {
				jobs[i] = putJobRecord(b, s, i, 1, 1, false)
			}
			res := result(1<<10, 1)
			var next atomic.Int64
			errs := make(chan error, writers)
			b.ResetTimer()
			for w := range writers {
				go func() {
					var err error
					for i := next.Add(1); i <= int64(b.N) && err == nil; i = next.Add(1) {
						err = s.SaveOutcome(jobs[w].ID, &TargetRecord{Idx: int(i % 0xffff), Status: TargetDone, Result: res, Stored: i})
					}
					errs <- err
				}()
			}
			for range writers {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}

// BenchmarkStore_DiskCheck is what the free-space check adds to one write
// of a watched store, alone: the gate before Badger and the count of its
// bytes after (diskspace.go); the dispatch's and Submit's DiskFull is one
// atomic load more.
func BenchmarkStore_DiskCheck(b *testing.B) {
	s := mustOpen(b, b.TempDir())
	if err := s.WatchDisk(DiskWatch{Reserve: 1}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := s.gate("save outcome"); err != nil {
			b.Fatal(err)
		}
		s.diskWritten(1)
		if s.DiskFull() {
			b.Fatal("full")
		}
	}
}

// A reserve as large as the whole file system, or as the file system less
// the store's own files, could never be kept: WatchDisk refuses it, naming
// the sizes, and changes nothing.
func TestStore_DiskReserveBeyondTheFileSystem(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	err := s.WatchDisk(DiskWatch{Reserve: 1 << 62})
	require.ErrorIs(t, err, ErrDiskReserve)
	require.Contains(t, err.Error(), strconv.FormatInt(1<<62, 10))
	require.False(t, s.DiskFull())
	require.Zero(t, s.Disk().Reserve, "not watched")
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 1}), "a reserve that fits is taken")
	require.EqualValues(t, 1, s.Disk().Reserve)

	// Smaller than the file system, larger than it less the store's own
	// (preallocated) files: it could never be kept either.
	size, err := statfsSize(s.Dir())
	require.NoError(t, err)
	own, err := dirUsage(s.Dir())
	require.NoError(t, err)
	require.Positive(t, own, "Badger's files are preallocated")
	err = s.WatchDisk(DiskWatch{Reserve: size - own/2})
	require.ErrorIs(t, err, ErrDiskReserve)
	require.Contains(t, err.Error(), "the store's own files take")
	require.EqualValues(t, 1, s.Disk().Reserve, "unchanged")
}

// TestStore_DiskFullAfterAFailedWrite: with a reserve smaller than what
// Badger's next file needs (or another process filling the disk between
// measures), a write fails for want of space while the free space is above
// the reserve. The disk then counts as full (DiskFull, Disk().Full, a Warn
// line) until a measure finds a memtable log's more room than then, so that
// /healthz and the metric say what submits meet; a failure with all that
// Badger needs free (a quota) does not hold it full past the next measure.
func TestStore_DiskFullAfterAFailedWrite(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	var logs testkit.SyncBuffer
	s.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	disk := &fakeDisk{}
	disk.free.Store(15 << 20)
	s.SetDiskStatfs(disk.statfs)
	clock := testkit.NewClock()
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 1, Every: time.Hour, Now: clock.Now}))
	require.False(t, s.DiskFull())

	s.diskFailed(fmt.Errorf("put: %w", ErrDiskFull))
	st, err := s.MeasureDisk()
	require.NoError(t, err)
	require.True(t, st.Full, "a write found no room: full though above the reserve")
	require.True(t, s.DiskFull())
	require.Contains(t, logs.String(), "disk full: a write found no room above the reserve")
	require.Contains(t, logs.String(), fmt.Sprintf("free_bytes=%d reserve_bytes=1 room_bytes=%d", 15<<20, 15<<20+memLogFileSize))

	disk.free.Store(15<<20 + memLogFileSize - 1)
	st, err = s.MeasureDisk()
	require.NoError(t, err)
	require.True(t, st.Full, "grown by less than a memtable log")
	disk.free.Store(15<<20 + memLogFileSize)
	st, err = s.MeasureDisk()
	require.NoError(t, err)
	require.False(t, st.Full, "room again")
	require.False(t, s.DiskFull())
	require.Contains(t, logs.String(), "disk has room again: jobs go on")

	disk.free.Store(rotateSize) // room for every file Badger opens next: a quota's ENOSPC, say
	s.diskFailed(fmt.Errorf("put: %w", ErrDiskFull))
	st, err = s.MeasureDisk()
	require.NoError(t, err)
	require.False(t, st.Full)
	s.diskFailed(errors.New("put: some other error"))
	st, err = s.MeasureDisk()
	require.NoError(t, err)
	require.False(t, st.Full, "only a failure for want of space counts")
}

// TestStore_DiskFlapsLogOnce: a disk that goes below its reserve and back
// again and again logs one Warn (and one Info) per LogEvery, not one per
// flap; the next Warn counts the flaps it did not log.
func TestStore_DiskFlapsLogOnce(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, t.TempDir())
	var logs testkit.SyncBuffer
	s.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	disk := &fakeDisk{}
	disk.free.Store(1000)
	s.SetDiskStatfs(disk.statfs)
	clock := testkit.NewClock()
	require.NoError(t, s.WatchDisk(DiskWatch{Reserve: 100, Every: time.Hour, LogEvery: time.Minute, Now: clock.Now}))
	count := func(level string) int { return strings.Count(logs.String(), "level="+level) }
	flap := func() {
		for _, free := range []int64{10, 1000} {
			disk.free.Store(free)
			clock.Advance(time.Second)
			_, err := s.MeasureDisk()
			require.NoError(t, err)
		}
	}
	flap()
	require.Equal(t, 1, count("WARN"))
	require.Equal(t, 1, count("INFO"))
	for range 6 {
		flap() // within the minute: quiet
	}
	require.Equal(t, 1, count("WARN"), "six flaps within LogEvery: no more lines")
	require.Equal(t, 1, count("INFO"))
	require.False(t, s.DiskFull(), "the state follows every flap")
	clock.Advance(time.Minute)
	flap()
	require.Equal(t, 2, count("WARN"))
	require.Equal(t, 2, count("INFO"))
	require.Contains(t, logs.String(), "flaps_since_last_line=6")
}
