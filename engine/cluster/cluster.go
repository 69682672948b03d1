// Package cluster makes a runner one node of a siftbatch cluster, on
// protoactor-go's cluster: membership through one of protoactor's providers
// (automanaged: static peers; Kubernetes; or any other), messages over
// protoactor's gRPC remote.
//
// The Kubernetes provider is in package
// github.com/sift/batch/engine/cluster/kubernetes, apart: it brings
// Kubernetes' client library (40 MB of binary, 20 MB of memory at start)
// to whoever imports it.
//
// Jobs run where they were submitted: a node's store, workers and caps
// stay its own. A job id names its node (its first 4 bytes are the node's
// [Tag], set through [engine.Config.NodeTag]), so any node can answer any
// job: the HTTP API (package httpapi, given the [Node] as its
// [github.com/sift/batch/engine/httpapi.Options].Cluster) forwards each
// request about another node's job to that node, which answers it as it
// answers its own, and streams the answer back in parts of at most 256 KiB,
// one part in flight at a time. A job whose node is not a member answers 503
// "node unavailable" with Retry-After. A caller's list merges the pages of
// every member, and names the nodes that did not answer.
//
// docs/CLUSTER.md gives the design, the messages and what a caller sees.
package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sift/batch/actors"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clustertls"
)

// The defaults a zero [Config] field takes.
const (
	// DefaultTimeout bounds how long a node waits on another before it
	// answers 503 "node unavailable" (a long-poll's wait comes on top),
	// and each request to a caller's grain. A wait on a member ends
	// sooner when it leaves the membership (the automanaged provider drops
	// a dead one within one poll: DefaultRefresh, plus the poll's timeout,
	// as long again). 2s: a live node answers in milliseconds, even loaded;
	// a dead one holds no API call for more than a few seconds.
	DefaultTimeout = 2 * time.Second
	// DefaultRetryAfter is the Retry-After of a 503 "node unavailable": about
	// the time a dead member takes to leave the membership, after which
	// the answer comes at once.
	DefaultRetryAfter = 2 * time.Second
	// DefaultRefresh is how often the automanaged provider polls its peers.
	DefaultRefresh = 2 * time.Second
)

// nodeActor is the name of each node's actor that answers the others.
const nodeActor = "siftbatch-node"

const (
	// endpointQueue is the initial size of the queue of protoactor's
	// remote for each address it sends to (it grows on demand; the
	// endpoint manager's, set alike, is unused at this version of
	// protoactor).
	endpointQueue = 1024
	// gossipFanOut is how many members each member gossips to at each
	// tick (protoactor's default is 3): more than any cluster has, so all
	// of them.
	gossipFanOut = 1 << 10
)

// Log keys. Lines carry node names, the addresses of members, job ids and
// counts; never a URL, a host of a fetched page, an address a peer named
// or a key.
const (
	logKeyNode    = "node"
	logKeyAddress = "address"
	logKeyJobID   = "job_id"
	logKeyCount   = "count"
	logKeyErr     = "err"
)

// protoactor attributes kept in its log lines besides those package actors
// keeps: addresses and member ids of the cluster's nodes (an address only
// if it is this node's or a current member's: peerLogHandler).
var safeClusterAttrs = []string{"address", "id", "memberId", "member", "cluster", "kind", "kinds", "topology", "topologyHash", "leader"}

// Config configures a [Node]. Name, Node, Addr and Provider are required;
// a zero duration takes its default; a negative one is an error.
type Config struct {
	// Name is the cluster's name: nodes of one cluster share it (serve's
	// --cluster).
	Name string
	// Node is this node's name, stable across restarts (serve's --node;
	// a StatefulSet pod's name). Its [Tag] begins the ids of the jobs it
	// creates, so a node that comes back under its name answers for its
	// jobs again.
	Node string
	// Addr is the HOST:PORT protoactor's gRPC remote listens on (serve's
	// --cluster-addr); port 0 picks one.
	Addr string
	// AdvertiseAddr is the HOST:PORT the other nodes reach this one at
	// (serve's --advertise-addr). Default Addr.
	AdvertiseAddr string
	// Provider is how the nodes find each other: [Automanaged],
	// [Kubernetes] or [ProtoactorProvider].
	Provider Provider
	// Timeout bounds how long a node waits on another (a forwarded
	// request's first part, plus its long-poll's wait, each later part, a
	// page of a list, a caller's jobs for a grain's rebuild) before it
	// answers 503, and each attempt of a request to a caller's grain. A
	// wait on a member ends at once when it leaves the membership.
	// Default [DefaultTimeout] (2s).
	Timeout time.Duration
	// RetryAfter is the Retry-After of a 503 "node unavailable". Default
	// [DefaultRetryAfter] (2s).
	RetryAfter time.Duration
	// Log receives the node's events and protoactor's own lines (its
	// levels lowered a step, and only attributes known to be safe kept).
	// Default: nothing is logged.
	Log *slog.Logger
	// TLS is this node's side of the cluster's mutual TLS (serve's
	// --cluster-ca, --cluster-cert, --cluster-key): the node presents its
	// certificate to every peer, and accepts only peers whose certificate
	// chains to the cluster's CA and names a node (TLS 1.3). Its
	// certificate must name this node (Node). Exactly one of TLS and
	// Insecure is required.
	TLS *clustertls.Config
	// Insecure has the node speak to its peers in plaintext, and accept
	// any peer that reaches its address (serve's --cluster-insecure): for
	// experiments on a loopback address only.
	Insecure bool
}

// Tag returns node's tag: the first 4 bytes of SHA-256 of its name.
func Tag(node string) []byte {
	h := sha256.Sum256([]byte(node))
	return h[:engine.NodeTagLen]
}

// Node is one node of a siftbatch cluster. Make it with [New], give its
// [Node.Tag] to the runner's [engine.Config.NodeTag] and the node to the
// HTTP API's Options.Cluster, then [Node.Start] it with the runner and the
// API's handler. It is safe for concurrent use.
type Node struct {
	cfg Config
	log *slog.Logger

	// A Node wires components, each with its own state and lock, as
	// protoactor's own Cluster composes its member list, identity lookup
	// and gossip. They share the node's lifecycle: Start's lock, what
	// Start bound, and the goroutines Close waits for (lifecycle.go).
	life    *lifecycle
	members *memberList // who each member is, and the topology (members.go)
	admit   *admitter   // the callers' grains and the admissions held (admission.go, grain.go)
	fwd     *forwarder  // what it asks the other members: Forward, List (forward.go, list.go)
	ans     *answerer   // the node's actor, which answers them (answer.go)
	guard   *guard      // the gRPC server's guards: what peers send (guard.go)
}

// New checks cfg and returns a node not yet started.
func New(cfg Config) (*Node, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("new node: no cluster name")
	case cfg.Node == "":
		return nil, errors.New("new node: no node name")
	case cfg.Provider.make == nil:
		return nil, errors.New("new node: no provider")
	case cfg.Timeout < 0 || cfg.RetryAfter < 0:
		return nil, errors.New("new node: negative duration")
	case cfg.TLS == nil && !cfg.Insecure:
		return nil, errors.New("new node: cluster needs TLS (Config.TLS) or Config.Insecure")
	case cfg.TLS != nil && cfg.Insecure:
		return nil, errors.New("new node: cluster given both TLS (Config.TLS) and Config.Insecure")
	case cfg.TLS != nil && cfg.TLS.Node() != cfg.Node:
		return nil, fmt.Errorf("new node: the TLS certificate names node %q, not this node %q", cfg.TLS.Node(), cfg.Node)
	}
	if _, _, err := splitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("new node: address: %w", err)
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = cfg.Addr
	}
	if _, _, err := splitHostPort(cfg.AdvertiseAddr); err != nil {
		return nil, fmt.Errorf("new node: advertised address: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var tag [engine.NodeTagLen]byte
	copy(tag[:], Tag(cfg.Node))
	life := newLifecycle()
	members := newMemberList(cfg.Node, tag, log, life)
	fwd := newForwarder(cfg.Timeout, cfg.RetryAfter, tag, log, life, members)
	admit := newAdmitter(cfg.Timeout, tag, log, life, members, fwd)
	return &Node{cfg: cfg, log: log, life: life, members: members, admit: admit, fwd: fwd,
		ans:   &answerer{name: cfg.Node, tag: tag, log: log, life: life, admit: admit, members: members},
		guard: &guard{tls: cfg.TLS, node: cfg.Node, log: log, life: life, members: members}}, nil
}

// Tag returns the node's tag, for [engine.Config.NodeTag].
func (n *Node) Tag() []byte { return Tag(n.cfg.Node) }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Node }

// Address returns the address the other nodes reach this one at: the
// remote's, once started (with the port it picked if Addr's was 0).
func (n *Node) Address() string {
	b := n.life.settled()
	if b == nil {
		return n.cfg.AdvertiseAddr
	}
	return b.advertise
}

// Start joins the cluster: it starts protoactor's remote and cluster
// member, and the node's actor, which answers the other nodes with r (a
// list's pages) and h (requests about r's jobs, as h answers its own: the
// HTTP API's handler). r must have been made with the node's Tag as its
// NodeTag. Start returns once the node is a member (about a second: what
// protoactor takes), or an error (an address in use, say), having started
// nothing. The node remembers in r's store the tag of each node it meets,
// and Start reads them back ([engine.Peer.NodeTags]): a job of a node met
// before a restart still answers 503 while that node is away.
func (n *Node) Start(r *engine.Runner, h http.Handler) error {
	if r == nil || h == nil {
		return errors.New("start node: nil runner or handler")
	}
	n.life.startMu.Lock()
	defer n.life.startMu.Unlock()
	if n.life.started || n.life.isClosed() {
		return errors.New("start node: started already")
	}
	if n.cfg.Provider.check != nil {
		if err := n.cfg.Provider.check(); err != nil {
			return fmt.Errorf("start node: %w", err)
		}
	}
	if n.cfg.Provider.listen != nil {
		l, err := n.cfg.Provider.listen()
		if err != nil {
			return fmt.Errorf("start node: %w", err)
		}
		n.life.manage = share(l)
	}
	inc, err := n.bindAndIncarnate(r, h)
	if err != nil {
		if n.life.manage != nil {
			n.life.manage.close()
			n.life.manage = nil
		}
		return fmt.Errorf("start node: %w", err)
	}
	n.life.started = true
	n.log.Info("cluster node started", slog.String(logKeyNode, n.cfg.Node), slog.String(logKeyAddress, inc.system.Address()),
		slog.String("provider", n.cfg.Provider.name))
	n.life.goWork(n.watchRejoin)
	return nil
}

// portAttempts is how many ports Start tries when Addr's port is 0:
// protoactor's remote binds its address itself, so the port Start picked
// may be taken by another program before the remote binds it.
const portAttempts = 5

// bindAndIncarnate settles the node's addresses and makes its first
// incarnation. With Addr's port 0 it picks a free port and, should
// another program take it before protoactor's remote binds it, another.
func (n *Node) bindAndIncarnate(r *engine.Runner, h http.Handler) (*incarnation, error) {
	host, port, _ := splitHostPort(n.cfg.Addr)
	for attempt := 1; ; attempt++ {
		b, err := n.bind(r, h, host, port)
		if err != nil {
			return nil, err
		}
		inc, err := n.incarnate(b)
		// protoactor's panic carries the error as text only.
		if err != nil && port == 0 && attempt < portAttempts && strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) {
			continue
		}
		return inc, err
	}
}

// bind sets what Start bound: the runner, the handler and the remote's
// address, host:port (port 0: a free port, picked now).
func (n *Node) bind(r *engine.Runner, h http.Handler, host string, port int) (*bound, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))) // protoactor panics on an address in use
	if err != nil {
		return nil, fmt.Errorf("cluster address: %w", err)
	}
	if port == 0 {
		port = l.Addr().(*net.TCPAddr).Port
	}
	_ = l.Close() // protoactor's remote binds it itself: bindAndIncarnate tries again if it is taken meanwhile
	advertise := n.cfg.AdvertiseAddr
	if _, aport, _ := splitHostPort(advertise); aport == 0 {
		ahost, _, _ := splitHostPort(advertise)
		advertise = net.JoinHostPort(ahost, strconv.Itoa(port))
	}
	peer := engine.PeerOf(r)
	b := &bound{runner: peer, jobs: r, jobsPerCaller: r.Config().JobsPerCaller, handler: h, host: host, port: port, advertise: advertise}
	n.life.run = b
	n.life.bound.Store(b)
	n.members.loadTags(peer)
	return b, nil
}

// incarnate makes the node's incarnation (rejoin.go): a provider, an actor
// system, protoactor's cluster on them, and the node's actor; it sets it
// as the node's, and starts its member. An error if any of that fails,
// having left nothing started.
func (n *Node) incarnate(b *bound) (*incarnation, error) {
	var manage net.Listener
	if n.life.manage != nil {
		manage = n.life.manage.view()
	}
	provider, err := n.cfg.Provider.make(manage)
	if err != nil {
		return nil, err
	}
	started := false
	if p, ok := provider.(*automanagedProvider); ok {
		p.members = n.members.memberIDs
		defer func() {
			if !started {
				p.release()
			}
		}()
	}
	log := peerLogger(actors.ActorSystemLoggerKeeping(n.log, safeClusterAttrs...), n.members)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	// At most 8 messages to a gRPC message: protoactor's endpoint writer
	// batches up to 1,000 queued messages into one, and 17 parts of an
	// answer (256 KiB each) would pass gRPC's 4 MiB limit and break the
	// stream for every answer on it (a crowd of readers of large results).
	//
	// Each peer's endpoint writer starts with a queue of endpointQueue
	// entries, not protoactor's 1,000,000 (16 MiB of slots, for each
	// address it ever sends to): its ring buffer doubles when full, so a
	// member with much to send loses nothing.
	remoteCfg := remote.Configure(b.host, b.port, append(n.guard.transport(), remote.WithAdvertisedHost(b.advertise), remote.WithEndpointWriterBatchSize(8),
		remote.WithEndpointWriterQueueSize(endpointQueue), remote.WithEndpointManagerQueueSize(endpointQueue))...)
	grain := actor.PropsFromProducer(func() actor.Actor { return &callerGrain{a: n.admit} })
	ccfg := pacluster.Configure(n.cfg.Name, provider, disthash.New(), remoteCfg,
		pacluster.WithRequestTimeout(n.cfg.Timeout), pacluster.WithKinds(pacluster.NewKind(callerKind, grain)))
	// Each member's gossip goes to every other member at each tick: the
	// screen keeps a member's heartbeat only from that member
	// (screenGossip), so it is not relayed.
	ccfg.GossipFanOut = gossipFanOut
	c := pacluster.New(system, ccfg)
	inc := &incarnation{system: system, c: c}
	inc.ctx, inc.cancel = context.WithCancel(n.life.ctx)
	n.life.inc.Store(inc)
	system.EventStream.Subscribe(func(evt any) {
		if n.life.inc.Load() == inc { // a retired incarnation's events are its own
			n.members.onTopology(evt)
		}
	})
	fail := func(err error) (*incarnation, error) {
		n.life.inc.CompareAndSwap(inc, nil)
		inc.cancel()
		return nil, err
	}
	if _, err := system.Root.SpawnNamed(actor.PropsFromFunc(n.ans.receive), nodeActor); err != nil {
		system.Shutdown()
		return fail(err)
	}
	// protoactor panics where it could return an error (a port taken since
	// the check above, a provider that fails): this is its boundary.
	if err := startMember(c); err != nil {
		stopRemote(c) // else its server keeps the port, and goroutines, for good
		system.Shutdown()
		waitFreed(net.JoinHostPort(b.host, strconv.Itoa(b.port)))
		return fail(err)
	}
	started = true
	return inc, nil
}

// startMember is protoactor's StartMember, its panics turned into errors.
func startMember(c *pacluster.Cluster) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("cluster member: %v", v)
		}
	}()
	c.StartMember()
	return nil
}

// stopRemote stops the server of protoactor's remote, if StartMember
// started it before it failed.
func stopRemote(c *pacluster.Cluster) {
	defer func() { _ = recover() }() // a remote that failed to listen has no server to stop
	if c.Remote != nil {
		c.Remote.Shutdown(false)
	}
}

// waitFreed waits, at most a second, until addr can be listened on again:
// the gRPC server protoactor starts closes its listener on a goroutine of
// its own once stopped.
func waitFreed(addr string) {
	for range 100 {
		if l, err := net.Listen("tcp", addr); err == nil {
			_ = l.Close()
			return
		}
		time.Sleep(10 * time.Millisecond) // the listener is closed by gRPC's goroutine: nothing to wait on
	}
}

// Close leaves the cluster gracefully (about 1.5 s, whatever the peers do:
// protoactor's stop is bounded, and a grain request into protoactor to a
// member that hangs is not waited for) and ends every answer the node was
// giving another node. It does not close the runner. It is idempotent.
func (n *Node) Close() error {
	if !n.life.close() {
		return nil
	}
	started := n.life.isStarted() // waits for a Start under way
	n.life.cancel()
	n.life.work.Wait()
	if started {
		if inc := n.life.inc.Swap(nil); inc != nil {
			inc.cancel()
			if ok, _ := shutdown(inc.c); !ok {
				n.log.Warn("cluster remote stopped hard: protoactor panicked in its graceful stop")
			}
		}
		if n.life.manage != nil {
			n.life.manage.close()
		}
		n.log.Info("cluster node stopped", slog.String(logKeyNode, n.cfg.Node))
	}
	return nil
}

const (
	// leaveWait is how long a node that stops lets its gossip tell its
	// peers that it leaves (protoactor's own stop waits 2 s; the gossip
	// goes out every 300 ms). The peers' providers drop it anyway: the
	// automanaged provider at its next poll of the health endpoint, closed
	// by now; the Kubernetes provider when the pod's labels go.
	leaveWait = 500 * time.Millisecond
	// remoteStopWait bounds the graceful stop of the gossip and the
	// remote: protoactor's endpoint manager waits for each peer's endpoint
	// writer to stop, and one that is trying to connect to a dead peer
	// stops only after its attempts (about 8 s after a peer's SIGKILL).
	// Past it the remote's gRPC server is stopped hard (its port freed,
	// its streams ended), and protoactor's stop ends by itself, on a
	// goroutine of its own.
	remoteStopWait = time.Second
)

// shutdown is protoactor's graceful Shutdown, bounded: about leaveWait
// plus remoteStopWait at most, where protoactor's own waits 2 s, then up
// to 10 s more while a peer it was connecting to is dead. protoactor's stop
// panics (send on a closed channel, in its endpoint manager's stop) when a
// peer's stream ends while it stops: two nodes stopping at once
// (docs/CLUSTER.md, protoactor bug 8); the gRPC server of its remote is
// then stopped hard, so that it frees the port. false if it panicked.
// stopped is closed once protoactor's stop has ended (its connections
// closed), maybe after shutdown returns.
func shutdown(c *pacluster.Cluster) (ok bool, stopped <-chan struct{}) {
	ended := make(chan struct{})
	stopped = ended
	defer func() {
		if v := recover(); v != nil {
			ok = false
			stopRemote(c)
			close(ended)
		}
	}()
	c.Gossip.SetState(pacluster.GracefullyLeftKey, &emptypb.Empty{})
	c.ActorSystem.Shutdown()
	_ = c.Config.ClusterProvider.Shutdown(true)
	c.IdentityLookup.Shutdown()
	time.Sleep(leaveWait) // the gossip's next ticks: nothing to wait on
	done := make(chan bool, 1)
	go func() {
		defer close(ended)
		done <- stopGracefully(c)
	}()
	t := time.NewTimer(remoteStopWait)
	defer t.Stop()
	select {
	case ok = <-done:
		return ok, stopped
	case <-t.C:
		stopRemote(c)
		return true, stopped
	}
}

// stopGracefully stops protoactor's gossip and remote, as its graceful
// Shutdown does; false if it panicked (the remote is then stopped hard).
func stopGracefully(c *pacluster.Cluster) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			stopRemote(c)
		}
	}()
	c.Gossip.Shutdown()
	c.Remote.Shutdown(true)
	return true
}

// EndWaits has every long-poll this node forwards (GET
// /v1/batch/{id}?wait=… about another node's job) that is still waiting
// answer at once with the job as it stands, and later ones too, so that
// none holds up a graceful stop: register it with the server's
// [http.Server.RegisterOnShutdown], as the API's own EndWaits. It is
// idempotent and safe for concurrent use.
func (n *Node) EndWaits() { n.fwd.endWaits() }

// Members returns the names of the nodes that are members now, as this
// node knows them (a member not yet asked who it is reads as its address).
func (n *Node) Members() []string { return n.members.names() }

// Changed returns a channel closed at the next change of the cluster's
// members, once this node has asked the new ones who they are: wait on it,
// then read [Node.Members].
func (n *Node) Changed() <-chan struct{} { return n.members.changes() }

// Membership returns whether this node is in its own member list now, and
// since when (the members as protoactor last published them to this
// node). A node that has joined and has been out of its own list for long
// is out for good under the Kubernetes provider (docs/CLUSTER.md,
// Kubernetes): a liveness check may restart it. It is safe for concurrent
// use.
func (n *Node) Membership() Membership { return n.members.self.get() }

// Admission returns the node's [engine.Admission], for the runner's
// [engine.Config].Admission: each new job is admitted by its caller's
// grain, against JobsPerCaller across the cluster, and an idempotent
// resubmit on any node returns the same job while that job's node is a
// member.
func (n *Node) Admission() engine.Admission { return n.admit }

// Forward answers r, a request about job id, when that job is another
// node's: it forwards r to that node, which answers it as it answers its
// own requests (authenticating the caller again, with the same keys), and
// writes that answer as it comes, a part at a time; or it answers 503
// "node unavailable", with Retry-After, when that node is not a member or
// does not answer within the Timeout (or when a member has not said who it
// is: it may hold the job). A long-poll (GET ?wait=) still
// waiting when [Node.EndWaits] is called is answered at once with the job
// as it stands, as a node answers its own. It returns false, having written
// nothing, when the job is this node's to answer: its id has this node's
// tag, or a tag of no node this node ever met (since it started, or before:
// the tags its store remembers), or r was itself
// forwarded (a node never forwards twice). An answer the other node cut
// short, or that stops coming, is cut short here too: the connection is
// dropped (net/http's [http.ErrAbortHandler]) before the end of its body.
func (n *Node) Forward(w http.ResponseWriter, r *http.Request, id string) bool {
	return n.fwd.forward(w, r, id)
}

// List returns a page of caller's jobs across the cluster, as
// [engine.Runner.List] does on one node: newest first, filtered by
// opt.Status, at most opt.Limit, and the cursor of the next page ("" on
// the last). Each member lists its own page after the cursor; the pages
// merge into one, whose cursor (the cursor of its last job) is good on
// every node. unavailable names the nodes whose jobs the page may lack:
// members that did not answer within the Timeout, and nodes met since this
// one started that are not members now. A bad status, limit or cursor is
// an error wrapping [engine.ErrBadList]. Safe for concurrent use.
func (n *Node) List(ctx context.Context, caller string, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error) {
	return n.fwd.list(ctx, caller, false, opt)
}

// ListAll is [Node.List] over every caller's jobs, as
// [engine.Runner.ListAll] lists them on one node: each member lists its
// own page of every caller's jobs after the cursor, and the pages merge
// into one, each job with its caller. A member older than ListAll answers
// no job. Safe for concurrent use.
func (n *Node) ListAll(ctx context.Context, opt engine.ListOptions) (jobs []engine.Job, next string, unavailable []string, err error) {
	return n.fwd.list(ctx, "", true, opt)
}

// PeerPanics returns how many calls of peers to this node's gRPC server
// have panicked (in protoactor's remote, on what a peer sent) since it
// started: each ended that call or stream, and the node went on. It is
// safe for concurrent use.
func (n *Node) PeerPanics() int64 { return n.guard.peerPanics.Load() }

// PeerRefusals returns how many messages of peers this node's gRPC server
// has refused since it started (see the guard's screen, guard.go). It is
// safe for concurrent use.
func (n *Node) PeerRefusals() int64 { return n.guard.peerRefusals.Load() }

// idTag returns the tag at the start of a job id; false if id is not 32
// hex digits.
func idTag(id string) ([engine.NodeTagLen]byte, bool) {
	var tag [engine.NodeTagLen]byte
	if len(id) != 32 {
		return tag, false
	}
	for i := 0; i < len(id); i++ {
		if !isHex(id[i]) {
			return tag, false
		}
	}
	_, _ = hex.Decode(tag[:], []byte(id[:2*engine.NodeTagLen]))
	return tag, true
}

// isHex reports a lowercase hex digit: ids are written in lowercase, so
// another spelling names no job and is answered as such, here.
func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f'
}

// splitHostPort splits HOST:PORT, the port a number from 0 to 65535.
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return host, int(port), nil
}
