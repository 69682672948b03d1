package engine

import (
	"log/slog"

	"github.com/sift/batch/persistence"
)

// logRecovery says what the store's Open repaired in a store a crash or a
// power cut left (persistence.Recovery): nothing is repaired silently.
// Tables and logs are a cut's or a crash's expected leftovers (Info); a
// MANIFEST listed again follows a failed sync of it, and index keys or a
// byte total that disagreed with the rows are not expected (Warn).
func logRecovery(log *slog.Logger, rec persistence.Recovery) {
	if rec.UnlistedTables > 0 || rec.EmptyLogs > 0 {
		log.Info("store recovered at open", slog.Int(keyUnlistedTables, rec.UnlistedTables), slog.Int(keyEmptyLogs, rec.EmptyLogs))
	}
	if rec.LostTables > 0 { // the default mode's unsynced writes, at a power cut
		log.Warn("store lost tables a power cut took with their memtable logs: the default mode's unsynced writes",
			slog.Int(keyLostTables, rec.LostTables))
	}
	if rec.RelistedTables > 0 { // the disk failed a sync of the MANIFEST before a cut
		log.Warn("store's table list repaired at open", slog.Int(keyRelistedTables, rec.RelistedTables))
	}
	if rec.IndexKeys > 0 || rec.BytesCounted {
		log.Warn("store repaired at open", slog.Int(keyIndexKeys, rec.IndexKeys), slog.Bool(keyBytesCounted, rec.BytesCounted))
	}
}

// dropUnreadable drops the results of the unsettled jobs that a power cut
// left unreadable (persistence's DropUnreadableResults: never
// acknowledged), so that each job's other results read, and returns the
// unsettled jobs as they then are.
func (r *Runner) dropUnreadable() ([]persistence.JobRecord, error) {
	left, err := r.store.Unsettled()
	if err != nil {
		return nil, err
	}
	dropped := 0
	for i := range left {
		n, err := r.store.DropUnreadableResults(left[i].ID)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			r.log.Info("dropped results a power cut left unreadable", slog.String(keyJobID, left[i].ID), slog.Int(keyCount, n))
		}
		dropped += n
	}
	if dropped == 0 {
		return left, nil
	}
	return r.store.Unsettled()
}
