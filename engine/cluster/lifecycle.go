package cluster

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
)

// lifecycle is what a node's components share of its life: Start's lock,
// what Start bound, whether the node is closing, and the goroutines Close
// waits for.
type lifecycle struct {
	// startMu is held by Start throughout: what asks whether the node
	// runs during a Start waits for its end. It guards started.
	startMu sync.Mutex
	started bool
	// run is what Start bound (left after a Start that failed); nil
	// before Start. Start sets it, holding startMu, before it spawns the
	// node's actor, subscribes to protoactor's events and starts its
	// member: so it is read without a lock by what runs after that (the
	// node's actor, protoactor's goroutines and events, the gRPC server's
	// guards) or has taken startMu since (running, cluster, settled,
	// isStarted). A plain field: an atomic load for each part of each
	// answer costs much under the race detector (50 readers of a large
	// result through one node missed their timeout).
	run *bound
	// bound is run again, for what may read it while Start sets it:
	// protoactor's logger (from NewActorSystem on: knownAddress) and List
	// before Start.
	bound atomic.Pointer[bound]

	mu     sync.Mutex // guards closed and work.Add; apart from startMu, which Start holds while protoactor publishes
	closed bool
	work   sync.WaitGroup
	ctx    context.Context // cancelled by Close: ends every answer given, and every wait of the node's own
	cancel context.CancelFunc
}

// bound is what Start gives a node (its runner, through the runner's
// [engine.Peer], and the API's handler) and makes (protoactor's actor
// system and cluster). Never changed; a Start after one that failed sets
// another.
type bound struct {
	runner        engine.Peer
	jobs          *engine.Runner // the same runner, for a job's reads (JobRequest)
	jobsPerCaller int            // the runner's, for the grains
	handler       http.Handler
	system        *actor.ActorSystem
	c             *pacluster.Cluster
}

func newLifecycle() *lifecycle {
	l := &lifecycle{}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// isStarted reports whether Start has succeeded, once no Start is under
// way.
func (l *lifecycle) isStarted() bool {
	l.startMu.Lock()
	defer l.startMu.Unlock()
	return l.started
}

// isClosed reports whether Close has been called.
func (l *lifecycle) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// close marks the node closing: false if it was already.
func (l *lifecycle) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.closed = true
	return true
}

// running reports whether the node has started and is not closing; it
// waits for a Start under way.
func (l *lifecycle) running() bool { return l.isStarted() && !l.isClosed() }

// cluster returns protoactor's cluster once started; nil before, or once
// closing. It waits for a Start under way.
func (l *lifecycle) cluster() *pacluster.Cluster {
	if !l.running() {
		return nil
	}
	return l.run.c
}

// settled returns what Start bound, once no Start is under way; nil
// before Start.
func (l *lifecycle) settled() *bound {
	l.startMu.Lock()
	defer l.startMu.Unlock()
	return l.run
}

// system returns protoactor's actor system; nil before Start. It takes no
// lock: see run for who may call it.
func (l *lifecycle) system() *actor.ActorSystem {
	if b := l.run; b != nil {
		return b.system
	}
	return nil
}

// me returns who this node is among the members. It takes no lock: see
// run for who may call it.
func (l *lifecycle) me() self { return selfOf(l.system()) }

// goWork runs fn on a goroutine Close waits for; false, without running
// it, once the node is closing.
func (l *lifecycle) goWork(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.work.Go(fn)
	return true
}
