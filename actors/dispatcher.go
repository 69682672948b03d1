package actors

import (
	"sync"
)

// poolDispatcher runs mailboxes on a few long-lived goroutines. protoactor's
// default dispatcher starts a new goroutine each time an idle actor gets
// mail; a job actor's Badger write then grows that fresh goroutine's stack
// every time (a quarter of the CPU per target in the profile). The pool's
// goroutines keep their grown stacks.
//
// It serves the supervisor and the job actors, which never block for long;
// workers, which run the FetchFunc, keep a goroutine of their own. When the
// pool is busy or closed, Schedule falls back to a new goroutine, so it never
// blocks a sender.
type poolDispatcher struct {
	work       chan func()
	throughput int
	mu         sync.RWMutex // held for writing to close work
	closed     bool
	wg         sync.WaitGroup
}

func newPoolDispatcher(goroutines, throughput int) *poolDispatcher {
	d := &poolDispatcher{work: make(chan func(), 1024), throughput: throughput}
	d.wg.Add(goroutines)
	for range goroutines {
		go d.serve()
	}
	return d
}

// serve runs what is scheduled until the pool closes. A goroutine that
// ends early (a handler called runtime.Goexit: see mailbox.run) is
// replaced.
func (d *poolDispatcher) serve() {
	closed := false
	defer func() {
		if closed {
			d.wg.Done()
			return
		}
		go d.serve()
	}()
	for fn := range d.work {
		fn()
	}
	closed = true
}

// Schedule implements actor.Dispatcher.
func (d *poolDispatcher) Schedule(fn func()) {
	d.mu.RLock()
	if !d.closed {
		select {
		case d.work <- fn:
			d.mu.RUnlock()
			return
		default:
		}
	}
	d.mu.RUnlock()
	go fn()
}

// Throughput implements actor.Dispatcher: how many messages a mailbox
// processes before it yields.
func (d *poolDispatcher) Throughput() int { return d.throughput }

// closeNoWait stops the goroutines once they have run what is queued,
// without waiting for them: one may be held by user code.
func (d *poolDispatcher) closeNoWait() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.work)
	}
	d.mu.Unlock()
}

// close runs what is queued and stops the goroutines.
func (d *poolDispatcher) close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.work)
	}
	d.mu.Unlock()
	d.wg.Wait()
}
