package engine

import (
	"log/slog"

	"github.com/sift/batch/persistence"
)

// logRecovery says what the store's Open repaired in a store a crash or a
// power cut left (persistence.Recovery): nothing is repaired silently.
// Tables and logs are a cut's or a crash's expected leftovers (Info);
// index keys or a byte total that disagreed with the rows are not (Warn).
func logRecovery(log *slog.Logger, rec persistence.Recovery) {
	if rec.UnlistedTables > 0 || rec.EmptyLogs > 0 {
		log.Info("store recovered at open", slog.Int("unlisted_tables", rec.UnlistedTables), slog.Int("empty_logs", rec.EmptyLogs))
	}
	if rec.IndexKeys > 0 || rec.BytesCounted {
		log.Warn("store repaired at open", slog.Int("index_keys", rec.IndexKeys), slog.Bool("bytes_counted", rec.BytesCounted))
	}
}
