package testkit

import (
	"sync"
	"time"
)

// Start is the time a [NewClock] starts at: 2026-01-02T03:04:05Z. Tests
// read it; none should change it.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Clock is a fake clock for a Config.Now: it stands still until the test
// moves it. Its methods are safe for concurrent use; the zero value reads
// the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at [Start].
func NewClock() *Clock { return &Clock{now: Start} }

// Now returns the clock's time. It has the type of a Config.Now.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d (back if d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
