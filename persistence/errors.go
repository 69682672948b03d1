package persistence

// The store's errors: its sentinels, and the conversion of Badger's errors
// into them at the package's boundary (convert): no Badger error, and no
// Badger text with keys or values in it, leaves the package.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/sift/batch/engine/batchtype"
)

// The errors the store returns. Badger's own errors never leave this package.
var (
	// ErrNotFound is returned for a job id that is not stored.
	ErrNotFound = errors.New("not found")
	// ErrBadRange is returned by [Store.ResultRange] for a negative
	// offset or length.
	ErrBadRange = errors.New("bad range")
	// ErrInUse is returned by [Open] when another process (or another Store
	// in this one) holds the directory.
	ErrInUse = errors.New("store in use by another process")
	// ErrCorrupt is returned for a row that does not decode, and by [Open] for
	// a directory that is not a readable store.
	ErrCorrupt = errors.New("store corrupt")
	// ErrTooLarge is returned when a row is larger than one write may be,
	// and for a result over [MaxResultSize].
	ErrTooLarge = errors.New("row too large")
	// ErrClosed is returned after [Store.Close].
	ErrClosed = errors.New("store closed")
	// ErrNoStore is returned by [OpenReadOnly] for a directory that is not
	// a store: missing, empty, a file, or holding other files; nothing is
	// created.
	ErrNoStore = errors.New("not a store")
	// ErrReadOnly is returned by every write on a store opened with
	// [OpenReadOnly].
	ErrReadOnly = errors.New("store opened read-only")
	// ErrUnclean is returned by [OpenReadOnly] for a store a crash left to
	// recover (its memtable log not closed, a table not yet listed, an
	// empty log file): recovering writes, which [Open] does; after that it
	// opens read-only.
	ErrUnclean = errors.New("store not closed cleanly")
	// ErrBadCursor is returned by [Store.CallerJobs] for a cursor it did
	// not make.
	ErrBadCursor = errors.New("bad cursor")
	// ErrRetrying is the first answer of a retried owner write that failed
	// for a reason that may pass: the store's writer holds it and tries it
	// again (see [WriteDone]).
	ErrRetrying = errors.New("write failed, retried by the store's writer")
	// ErrTooManyNodeTags is returned by [Store.PutNodeTag] for a new tag
	// once the store holds [MaxNodeTags] of them.
	ErrTooManyNodeTags = errors.New("too many node tags")
	// ErrNotSynced is wrapped by a write of a durable store
	// ([Store.SetDurable]) that committed but whose sync to stable storage
	// failed: it is readable, but may not survive a power cut. An owner
	// write that fails so is retried (written and synced again).
	ErrNotSynced = errors.New("write not synced to disk")
	// ErrDiskFull is wrapped by a write that failed because the store's
	// file system is full (ENOSPC, EDQUOT). An owner write that fails so
	// is retried. It is [batchtype.ErrDiskFull], which the runner returns
	// too ([Store.DiskFull]).
	ErrDiskFull = batchtype.ErrDiskFull
	// ErrDiskReserve is returned by [Store.WatchDisk] for a reserve as large
	// as the store's file system less the store's own files. It is
	// [batchtype.ErrDiskReserve].
	ErrDiskReserve = batchtype.ErrDiskReserve
	// ErrUnavailable is wrapped by a read (and a write) of a store whose
	// Badger is down: it did not open again after a failed sync
	// (reopen.go). It is [batchtype.ErrUnavailable].
	ErrUnavailable = batchtype.ErrUnavailable
)

// errTruncateNeeded is Badger's refusal, read-only, of a memtable log with
// entries past its end.
var errTruncateNeeded = fmt.Errorf("%w: a memtable log to truncate", ErrUnclean)

// convert turns Badger's errors into the store's own.
func convert(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt), errors.Is(err, ErrClosed), errors.Is(err, ErrTooLarge),
		errors.Is(err, ErrReadOnly), errors.Is(err, ErrTooManyNodeTags), errors.Is(err, ErrNotSynced), errors.Is(err, ErrDiskFull), errors.Is(err, ErrUnavailable):
		return fmt.Errorf("%s: %w", op, err)
	case isDiskFull(err):
		return fmt.Errorf("%s: %w", op, ErrDiskFull)
	case errors.Is(err, badger.ErrReadOnlyTxn):
		return fmt.Errorf("%s: %w", op, ErrReadOnly)
	case errors.Is(err, badger.ErrKeyNotFound):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case errors.Is(err, badger.ErrTxnTooBig), errors.Is(err, badger.ErrValueLogSize),
		strings.Contains(err.Error(), "exceeded") && strings.Contains(err.Error(), "limit"):
		return fmt.Errorf("%s: %w", op, ErrTooLarge)
	case errors.Is(err, badger.ErrDBClosed), errors.Is(err, badger.ErrBlockedWrites):
		return fmt.Errorf("%s: %w", op, ErrClosed)
	default:
		// Keep the first line of the text, not the type: Badger's texts
		// can go on with keys and values.
		return fmt.Errorf("%s: %s", op, firstLine(err.Error()))
	}
}

// firstLine is the first line of s: Badger's texts go on with keys and
// values on the next lines.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
