package engine

import "bytes"

// Waiting returns how many Waits for job id a runner made by Open has
// registered (see Runner.waitFor): a test closes the runner once its Wait
// is in.
func Waiting(r *Runner, id string) int {
	r.waitMu.Lock()
	defer r.waitMu.Unlock()
	if w := r.waits[id]; w != nil {
		return w.n
	}
	return 0
}

// ContentRangeMetaLen is the length of a stored result's meta part,
// `,"meta":{…}`, for tests.
func ContentRangeMetaLen(stored []byte) (int, bool) {
	i := bytes.Index(stored, metaKey)
	if i < 0 {
		return 0, false
	}
	return len(stored) - 1 - i, true
}

// ClassEntries returns how many jobs' classes the runner keeps for
// LiveByClass.
func ClassEntries(r *Runner) int {
	r.classes.mu.Lock()
	defer r.classes.mu.Unlock()
	return len(r.classes.m)
}
