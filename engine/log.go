package engine

import (
	"errors"

	"github.com/sift/batch/persistence"
)

// Log keys. Log lines carry job ids, counts and statuses: never a URL, a
// host, a key, a result or a panic value.
const (
	keyJobID = "job_id"
	keyCount = "count"
	keyErr   = "err"
	// What Open repaired in a store (recovery.go).
	keyUnlistedTables = "unlisted_tables"
	keyRelistedTables = "relisted_tables"
	keyLostTables     = "lost_tables"
	keyEmptyLogs      = "empty_logs"
	keyIndexKeys      = "index_keys"
	keyBytesCounted   = "bytes_counted"
)

// storeErrText is a store error for a log line: the store's own sentinels
// by name, anything else as "store failed" (Badger's texts may carry keys).
func storeErrText(err error) string {
	for _, e := range []error{persistence.ErrClosed, persistence.ErrTooLarge, persistence.ErrNotFound, persistence.ErrCorrupt} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "store failed"
}
