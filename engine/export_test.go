package engine

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

// ClassEntries returns how many jobs' classes the runner keeps for
// LiveByClass.
func ClassEntries(r *Runner) int {
	r.classes.mu.Lock()
	defer r.classes.mu.Unlock()
	return len(r.classes.m)
}
