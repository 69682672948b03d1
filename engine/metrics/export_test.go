package metrics

import "time"

// SetNow sets the clock of siftbatch_fetch_oldest_seconds; call it before
// the first fetch.
func SetNow(m *Metrics, now func() time.Time) { m.fetches.now = now }
