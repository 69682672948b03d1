package persistence

// The write counters, for an operator's metrics: how many writes failed
// for a reason of the disk, and how many owner writes were held to be
// retried (writer_retry.go). Both only grow.

// counted counts err in the write errors when it is a failure of the disk
// (one a retry may get past: see retryable), and returns it.
func (s *Store) counted(err error) error {
	if err != nil && retryable(err) {
		s.writeErrors.Add(1)
	}
	return err
}

// WriteErrors returns how many writes have failed for a reason of the disk
// since [Open]: a commit or a sync that failed, a held write given up
// (the store closing, [Store.AbandonRetries]). A write refused because
// the store is closed or read-only, a row too large, an unknown job or a
// corrupt row is not counted. A held write that later commits is counted
// in [Store.WriteRetries], not here. Safe for concurrent use.
func (s *Store) WriteErrors() int64 { return s.writeErrors.Load() }

// WriteRetries returns how many owner writes (a job's row and outcomes,
// [Store.SaveTargetRetried] and the like) have failed and been held to be
// tried again since [Open]. Safe for concurrent use.
func (s *Store) WriteRetries() int64 { return s.writeRetries.Load() }
