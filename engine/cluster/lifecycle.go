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
	// inc is the node's incarnation now: set by Start, replaced by a
	// rejoin (rejoin.go); nil before Start and while a rejoin makes the
	// next one. Components load it once per request or answer.
	inc atomic.Pointer[incarnation]
	// manage is the provider's own port (the automanaged provider's
	// manage address), bound by Start and kept until Close: nil for a
	// provider without one, and before Start.
	manage *sharedListener

	mu     sync.Mutex // guards closed and work.Add; apart from startMu, which Start holds while protoactor publishes
	closed bool
	work   sync.WaitGroup
	ctx    context.Context // cancelled by Close: ends every answer given, and every wait of the node's own
	cancel context.CancelFunc
}

// bound is what Start gives a node (its runner, through the runner's
// [engine.Peer], and the API's handler) and the addresses it settled on.
// Never changed; a Start after one that failed sets another.
type bound struct {
	runner        engine.Peer
	jobs          *engine.Runner // the same runner, for a job's reads (JobRequest)
	jobsPerCaller int            // the runner's, for the grains
	handler       http.Handler
	host          string // the remote listens on host:port (port picked, if Addr's was 0)
	port          int
	advertise     string // what it advertises, the port filled in
}

// incarnation is one life of the node in the cluster: protoactor's actor
// system, its cluster (remote, provider, gossip) and the member id they
// carry. Start makes the first; a node that its peers have blocked for good
// (rejoin.go) retires it and makes another, under a new member id, while
// the runner and its store go on. Never changed.
type incarnation struct {
	system *actor.ActorSystem
	c      *pacluster.Cluster
	ctx    context.Context // cancelled when it is retired: ends the answers given under it
	cancel context.CancelFunc
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

// cluster returns protoactor's cluster once started; nil before, once
// closing, or while a rejoin makes the node's next incarnation. It waits
// for a Start under way.
func (l *lifecycle) cluster() *pacluster.Cluster {
	if !l.running() {
		return nil
	}
	if inc := l.inc.Load(); inc != nil {
		return inc.c
	}
	return nil
}

// settled returns what Start bound, once no Start is under way; nil
// before Start.
func (l *lifecycle) settled() *bound {
	l.startMu.Lock()
	defer l.startMu.Unlock()
	return l.run
}

// system returns protoactor's actor system of the node's incarnation now;
// nil before Start, and while a rejoin makes the next one. It takes no
// lock.
func (l *lifecycle) system() *actor.ActorSystem {
	if inc := l.inc.Load(); inc != nil {
		return inc.system
	}
	return nil
}

// me returns who this node is among the members, in its incarnation now:
// its member id, and the address its remote advertises (what Start bound,
// never changed: the remote advertises it, WithAdvertisedHost). It takes
// no lock.
func (l *lifecycle) me() self {
	sys, b := l.system(), l.bound.Load()
	if sys == nil || b == nil {
		return self{}
	}
	return selfOf(sys, b.advertise)
}

// goCall runs fn, a call into protoactor that ends by itself (within its
// own timeouts), on a goroutine Close does not wait for; false, without
// running it, once the node is closing. A call to a member that hangs
// would hold up Close for protoactor's fixed 5 s (disthash's placement
// request): a node stops whatever its peers do.
func (l *lifecycle) goCall(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	go fn()
	return true
}

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
