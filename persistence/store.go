// Package persistence is siftbatch's Badger store: jobs, their targets, and
// the indexes the runner's rules need (idempotency, lease order for the sweep,
// age order and a byte total for eviction). It knows nothing of actors.
//
// The key layout and the value encodings are written down at the top of
// keys.go and records.go. Every operation is O(1) or O(the rows it touches):
// nothing scans all jobs except [Store.Jobs] and [Store.CountBytes], which
// are for inspection, and [Open] once, the first time it opens a store
// written before the caller index ([Store.CallerJobs]) or before the byte
// total counted every row (stored.go).
//
// A Store is safe for concurrent use. Writes are serialised by the store (the
// byte total is read-modify-write), so they never conflict with each other.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// The Badger options, chosen for a store embedded in a service, not for a
// database server. Badger's defaults reserve 64 MiB memtables ×5, a 256 MiB
// block cache and an unbounded index cache (≈125 MB RSS after 40 MB written);
// these keep it near 60 MB.
const (
	// memTableSize: 16 MiB on disk. One write (a transaction) may be 15% of
	// it, 2.4 MiB; results above valueThreshold go to the value log and
	// count only a pointer there.
	memTableSize = 16 << 20
	// memTableSizeInMemory: in memory every value lives in the memtables.
	// Pages are touched only as they fill.
	memTableSizeInMemory = 64 << 20
	// maxValueInMemory: in memory Badger refuses a value above its value
	// threshold, which may be 1 MiB at most: a row (a job's specs, an
	// outcome's error text) is capped at 1 MiB there. Results are stored
	// in chunks of half that (records.go), in both modes.
	maxValueInMemory = 1 << 20
	numMemtables     = 2
	// valueThreshold: values of 1 KiB or more (most results, a job's specs
	// once it has a dozen targets) go to the value log, written once; the
	// LSM tree keeps the keys, small rows and pointers. With 64 KiB, the
	// specs and results in the tree made every compaction of a big store
	// rewrite them: Submit with 100,000 32-target jobs stored took 1.75×
	// as long as with 1,000 (BenchmarkRunner_Scaling); now 1.15×.
	valueThreshold = 1 << 10
	// valueLogFileSize: Badger opens a value-log file at twice this, and
	// its blocks are allocated then (persistence/internal/ristretto: a
	// write through the map of a sparse file is a SIGBUS on a full disk):
	// 32 MiB taken at once. No value is near it: results go in 512 KiB
	// chunks, and a row is at most 15% of a memtable.
	valueLogFileSize = 16 << 20
	indexCacheSize   = 8 << 20
	// gcInterval is how often the value log is garbage collected on disk.
	gcInterval = 5 * time.Minute
)

func badgerOptions(dir string, log badger.Logger) badger.Options {
	o := badger.DefaultOptions(dir).
		WithLogger(log).
		WithMemTableSize(memTableSize).
		WithNumMemtables(numMemtables).
		WithNumLevelZeroTables(numMemtables).
		WithNumLevelZeroTablesStall(2 * numMemtables).
		WithBlockCacheSize(0).
		WithCompression(options.None).
		WithIndexCacheSize(indexCacheSize).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(valueLogFileSize).
		WithNumCompactors(2).
		// Writes are serialised by the Store, so Badger need not track
		// read sets for conflicts.
		WithDetectConflicts(false)
	if dir == "" {
		o = o.WithInMemory(true).WithMemTableSize(memTableSizeInMemory).WithValueThreshold(maxValueInMemory)
	}
	return o
}

// Store is the Badger store. Open one with [Open]; close it with
// [Store.Close] after every user (a runner) has stopped.
type Store struct {
	db    *badger.DB
	log   *badgerLogger
	dir   string
	mu    sync.Mutex   // serialises writes
	bytes atomic.Int64 // stored bytes in all (stored.go), as in key m stored; written under mu
	q     writeQueue   // the owner writes waiting for the writer goroutine (writer.go)
	// valueThreshold is Badger's: values this long or longer go to the
	// value log (in memory: there is none).
	valueThreshold int
	// group bounds a group commit (writer_group.go): groupWrites and
	// groupBytes, less for a small memtable (OpenWith).
	group groupBounds
	// sweepCursor is where a sweep that said "more" goes on (see Sweep).
	sweepCursor []byte
	// sweepFrom and evictFrom are where a sweep and an eviction start:
	// every x (a) key before them has been deleted. Deleted keys stay as
	// tombstones until compaction drops them, and a walk from the start of
	// the index steps over each one: with a sweep on every Submit, that
	// grew with every job ever deleted. An index key written below one of
	// them moves it back; indexGen counts the index keys written, so that a
	// sweep that let writes through while it ran does not move its start
	// past one (see indexed). An eviction goes back for them (evictLow).
	sweepFrom, evictFrom []byte
	indexGen, sweepGen   uint64
	// evictLow is the oldest age key written since the running eviction's
	// last batch (see Evict); evictMu lets one eviction run at a time.
	evictLow []byte
	evictMu  sync.Mutex
	// evictGap, when set (by tests), is called by Evict where it holds
	// no lock: before each batch.
	evictGap func()
	readOnly bool       // opened by OpenReadOnly: every write is refused
	specs    specsCache // the specs rows read, decoded (specs.go)
	closed   atomic.Bool
	reads    readGate                     // the reads in flight, that Close waits for (reads.go)
	fault    atomic.Pointer[func() error] // see SetWriteFault
	// The writer goroutine's own (writer.go): the retried writes it holds,
	// per job in order, and whether the store is closing.
	held     map[[idLen]byte][]*ownerWrite
	stopping bool
	inGroup  bool // s.mu is held for the whole group (durable.go)
	// durable: every acknowledging write is synced (durable.go); syncs
	// counts the syncs; syncFault (SetSyncFault) fails
	// a sync that succeeded.
	durable   atomic.Bool
	syncs     atomic.Int64
	syncFault atomic.Pointer[func() error]
	openFault atomic.Pointer[func() error] // SetOpenFault
	downFull  atomic.Bool                  // Badger down for want of space (downErr)
	// writeErrors and writeRetries count the writes that failed for a
	// reason of the disk, and the owner writes held to be retried
	// (counters.go).
	writeErrors  atomic.Int64
	writeRetries atomic.Int64
	// logFids: the newest memtable log and value-log file at the last
	// sync (or at SetDurable): the files from them on that are no longer
	// the newest are synced too (syncRotatedLocked). Under mu.
	logFids logFids
	// dirDirty: the directory has entries a durable sync must sync
	// (dirsync.go), under mu; dirSyncs counts the directory's syncs.
	dirDirty    bool
	dirSyncs    atomic.Int64
	dirSyncTime atomic.Int64 // ns spent in the directory's syncs (a benchmark's figure)
	// noDirSync turns the directory syncs off: a benchmark's baseline.
	noDirSync bool
	// noDiskCheck turns the free-space check of every write off (gate,
	// diskWritten): a benchmark's baseline (BenchmarkStore_DiskWatch).
	noDiskCheck bool
	// rec is what Open repaired (recover.go).
	recMu sync.Mutex
	rec   Recovery
	// unsynced: the jobs whose creation is stored but not yet synced
	// (durable.go): readers do not see them.
	unsynced unsyncedJobs
	// commitDelayNs is SetCommitDelay's delay + 1 (0: the default);
	// groupPeak the recent groups' peak size (writer goroutine's).
	commitDelayNs atomic.Int64
	abandoned     atomic.Bool                                   // AbandonRetries was called (writer_retry.go); SetDurable clears it
	heldHook      atomic.Pointer[func(jobID string, err error)] // SetHeldHook
	groupPeak     int
	// gcHolds: iterators a durable GC keeps open (durable.go); gcLoop's.
	gcHolds   []gcHold
	retryWait atomic.Int64 // SetRetryWait; 0: DefaultRetryWait
	// mustReopen: a sync failed, Badger is reopened before the next
	// write; down: Badger is closed, not open again yet (reopen.go).
	// Under mu. reopens counts them; syncWrites and opt are open's.
	mustReopen, down bool
	downNow          atomic.Bool // down, for Writable (lock-free)
	reopens          atomic.Int64
	syncWrites       bool
	opt              Options
	// fullRO: Badger is open read-only: it could not be opened for
	// writing (fullopen.go).
	fullRO atomic.Bool
	// roFull: the disk was full when Badger could not be opened for
	// writing; openTried, openBackoff: the last try to, and the wait
	// before the next (retryOpenLocked). Under mu.
	roFull      bool
	openTried   time.Time
	openBackoff time.Duration
	// levels: the tables' levels as Badger had them when a reopen closed
	// it, until the MANIFEST agrees (manifest.go). Under mu.
	levels map[uint64]int
	disk   diskWatch // WatchDisk's (diskspace.go)
	stop   chan struct{}
	wg     sync.WaitGroup
}

// Open opens the store in dir, creating the directory if missing; dir ""
// opens an in-memory store. An empty directory becomes a new store. A
// directory held by another process gives an error wrapping [ErrInUse];
// one that is not a store (no Badger MANIFEST, and other files in it) an
// error wrapping [ErrCorrupt], with nothing in it deleted or written; a
// damaged store an error wrapping [ErrCorrupt] too. A store written before the caller index
// or the index of every job ([Store.AllJobs]) gets it here, once (a walk
// of every job row). Badger's own log
// lines are dropped until [Store.SetLogger].
func Open(dir string) (*Store, error) { return open(dir, false) }

// open is Open; syncWrites sets Badger's own SyncWrites (a sync in every
// commit, whatever it writes), which the benchmarks weigh against a
// durable store's one sync per group (durable.go).
func open(dir string, syncWrites bool) (*Store, error) {
	return openWith(dir, Options{}, syncWrites)
}

// openWith is OpenWith, with open's syncWrites.
func openWith(dir string, opt Options, syncWrites bool) (s *Store, err error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	if dir != "" {
		if err := mkdirSynced(dir); err != nil { // a cut must not take the store's own entry (dirsync.go)
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	var rec Recovery
	if dir != "" {
		unreadable := false
		if err := checkTables(dir); errors.Is(err, errManifestUnreadable) {
			unreadable = true // a hole a power cut left: prepareDir lists its tables again (manifest.go)
		} else if err != nil {
			return nil, err
		}
		if err := prepareDir(dir, &rec, opt.Durable || syncWrites); err != nil { // not a store; crash leftovers: see vlog.go, recover.go
			return nil, err
		}
		if unreadable {
			if err := checkTables(dir); err != nil {
				return nil, err
			}
		}
	}
	log := &badgerLogger{}
	db, err := openBadger(opt.badger(dir, log).WithSyncWrites(syncWrites))
	if errors.Is(err, errEmptyValueLog) {
		// Left by a crash: see vlog.go.
		if rerr := prepareDir(dir, &rec, opt.Durable || syncWrites); rerr != nil {
			return nil, rerr
		}
		db, err = openBadger(opt.badger(dir, log).WithSyncWrites(syncWrites))
	}
	full := false
	if err != nil && dir != "" && isDiskFull(err) { // serve reads on a full disk (fullopen.go)
		db, err = openFull(dir, opt, log, &rec, err)
		full = err == nil
	}
	if err != nil {
		return nil, err
	}
	bo := opt.badger(dir, log)
	s = &Store{db: db, log: log, dir: dir, stop: make(chan struct{}), valueThreshold: int(bo.ValueThreshold), rec: rec,
		group: groupBoundsFor(bo.MemTableSize), syncWrites: syncWrites, opt: opt}
	s.fullRO.Store(full)
	s.roFull = full
	if err := s.loadBytes(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.indexes(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.disk.init()
	s.q.wake = make(chan struct{}, 1)
	s.q.full = make(chan struct{}, 1)
	s.q.abandon = make(chan chan struct{})
	s.wg.Add(1)
	go s.writeLoop()
	if dir != "" {
		s.wg.Add(1)
		go s.gcLoop()
	}
	return s, nil
}

// openBadger opens Badger and turns its panics (it panics on some option
// combinations and damaged files) and its lock error into our errors.
func openBadger(o badger.Options) (db *badger.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("open store: %w: badger panicked opening it", ErrCorrupt)
		}
	}()
	db, err = badger.Open(o)
	if err == nil {
		return db, nil
	}
	// Badger formats the errors it wraps with %+v: the OS's are known by
	// their text. A read-only or full disk is not a damaged store.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Cannot acquire directory lock"):
		return nil, fmt.Errorf("open store %s: %w", o.Dir, ErrInUse)
	case isEmptyValueLogError(msg):
		return nil, fmt.Errorf("open store %s: %w", o.Dir, errEmptyValueLog)
	case strings.Contains(msg, badger.ErrTruncateNeeded.Error()): // wrapped with %+v, not %w
		return nil, fmt.Errorf("open store %s: %w", o.Dir, errTruncateNeeded)
	case errors.Is(err, os.ErrPermission), strings.Contains(msg, syscall.EACCES.Error()):
		return nil, fmt.Errorf("open store %s: %w", o.Dir, os.ErrPermission)
	case strings.Contains(msg, syscall.EROFS.Error()):
		return nil, fmt.Errorf("open store %s: %w", o.Dir, syscall.EROFS)
	case strings.Contains(msg, syscall.ENOSPC.Error()):
		return nil, fmt.Errorf("open store %s: %w", o.Dir, syscall.ENOSPC)
	case strings.Contains(msg, syscall.EIO.Error()): // a disk that fails
		return nil, fmt.Errorf("open store %s: %w", o.Dir, syscall.EIO)
	default:
		return nil, fmt.Errorf("open store %s: %w: %s", o.Dir, ErrCorrupt, firstLine(msg))
	}
}

// SetLogger routes Badger's own log lines to l: its warnings and errors at
// Warn and Error, its info at Debug, its debug lines below Debug. A nil l drops them. Safe to call at any
// time.
func (s *Store) SetLogger(l *slog.Logger) { s.log.l.Store(l) }

// Dir returns the store's directory, "" for an in-memory store.
func (s *Store) Dir() string { return s.dir }

// Close stops the store's background work and closes Badger. Call it once,
// after every runner using the store has been closed; later calls return nil.
// It waits for the reads in flight (a reader's page, a find); a read that
// begins once Close has begun is an error wrapping ErrClosed. Safe to call
// while other goroutines read.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	s.reads.close() // a read in flight ends before Badger closes; later ones fail
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil // closed by a reopen that did not open it again (reopen.go)
	}
	var levels map[uint64]int
	if s.dir != "" && !s.readOnly && !s.fullRO.Load() {
		levels = tableLevels(s.db)
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	if levels != nil { // the MANIFEST as Badger had it (manifest.go)
		if _, err := relistTables(s.dir, levels); err != nil {
			return fmt.Errorf("close store: %w", err)
		}
	}
	return nil
}

// gcLoop runs Badger's value-log garbage collection: deleted and replaced
// results leave garbage in the value log that only this reclaims.
func (s *Store) gcLoop() {
	defer s.wg.Done()
	t := time.NewTicker(gcInterval)
	defer t.Stop()
	defer s.releaseGC()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			for !s.DiskFull() && s.runGC() == nil { // a GC writes: not on a full disk (diskspace.go)
				select {
				case <-s.stop:
					return
				default:
				}
			}
		}
	}
}

// runGC collects one value-log file's garbage. On a durable store it is
// durableGC (durable.go).
func (s *Store) runGC() error {
	if s.durable.Load() {
		return s.durableGC()
	}
	return s.db.RunValueLogGC(0.5)
}

// badgerLogger adapts Badger's logger to slog, quietly.
type badgerLogger struct{ l atomic.Pointer[slog.Logger] }

func (b *badgerLogger) logf(level slog.Level, format string, args ...any) {
	l := b.l.Load()
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, args...)), slog.String("lib", "badger"))
}

func (b *badgerLogger) Errorf(f string, a ...any)   { b.logf(slog.LevelError, f, a...) }
func (b *badgerLogger) Warningf(f string, a ...any) { b.logf(slog.LevelWarn, f, a...) }
func (b *badgerLogger) Infof(f string, a ...any)    { b.logf(slog.LevelDebug, f, a...) }
func (b *badgerLogger) Debugf(f string, a ...any)   { b.logf(levelBadgerDebug, f, a...) }

// levelBadgerDebug is below Debug: Badger's debug lines (one per write) are
// seen only by a handler that asks for them.
const levelBadgerDebug = slog.LevelDebug - 4
