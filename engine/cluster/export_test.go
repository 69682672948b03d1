package cluster

// SetObserver sets the test-only observer that sees each admission a
// caller's grain makes ("admit", with the cap) and each end of an admitted
// job a node reports ("end"); nil removes it.
func SetObserver(fn func(event, caller, id string, cap int)) {
	observeFn.Lock()
	observeFn.fn = fn
	observeFn.Unlock()
}
