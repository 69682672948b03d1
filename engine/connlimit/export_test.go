package connlimit

// IdleCount is how many connections of l are idle now.
func IdleCount(l *Limiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle.Len()
}
