package testkit

import (
	"context"
	"sync"
	"sync/atomic"
)

// gateEntered is how many Waits a [Gate] reports on Entered unreceived.
const gateEntered = 4096

// Gate is a brake for a fake fetch: every Wait blocks until the test calls
// Open (or the Wait's context ends), and reports on Entered that it began,
// so the test knows a fetch is under way without polling. A Gate is safe
// for concurrent use; make one with [NewGate].
type Gate struct {
	open    chan struct{}
	once    sync.Once
	entered chan struct{}
	count   atomic.Int64
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{open: make(chan struct{}), entered: make(chan struct{}, gateEntered)}
}

// Wait reports on Entered that it began, then blocks until the gate is
// open, when it returns nil, or until ctx is done, when it returns
// ctx.Err(). On an open gate it returns nil at once (and still counts).
func (g *Gate) Wait(ctx context.Context) error {
	g.count.Add(1)
	select {
	case g.entered <- struct{}{}:
	default: // more than 4096 unreceived: Count still tells.
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Open opens the gate for good: every Wait, blocked or to come, returns.
// Opening an open gate does nothing.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// Entered yields one value each time a Wait begins (up to 4096 kept
// unreceived): receive from it, with [Recv], to wait until a fetch reaches
// the gate.
func (g *Gate) Entered() <-chan struct{} { return g.entered }

// Count returns how many Waits have begun.
func (g *Gate) Count() int { return int(g.count.Load()) }
