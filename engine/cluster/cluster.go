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
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/labstack/echo"

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

// Provider is how the nodes of a cluster find each other: one of
// protoactor's cluster providers. Make one with [Automanaged],
// [Kubernetes] or [ProtoactorProvider].
type Provider struct {
	name string
	make func() (pacluster.ClusterProvider, error)
	// check runs before the node starts: a manage port in use, say.
	check func() error
}

// Automanaged is protoactor's automanaged provider: static peers, nothing
// else to run. manageAddr is this node's HOST:PORT for it (serve's
// --manage-addr) and peers the manage addresses of every node, this one
// included (serve's --peers). Each node serves a health endpoint on
// manageAddr (its host too: protoactor's own would listen on every
// interface, so the node serves it itself, through protoactor's
// NewWithTesting) and polls every peer's every refresh (default
// [DefaultRefresh], 2s, which is also each poll's timeout). The endpoint
// says who the node is (its member id, address and port: what protoactor's
// says), in plain HTTP: it carries membership health only; every message
// between the nodes goes over the remote, under the cluster's TLS.
//
// Known behaviour of protoactor's automanaged provider, designed around: a
// member that misses one poll is dropped for good by the node that polled
// it (it comes back after a restart, under a new member id); there is no
// consensus between the nodes' views of the membership.
func Automanaged(manageAddr string, peers []string, refresh time.Duration) Provider {
	return Provider{
		name: "automanaged",
		check: func() error {
			if len(peers) == 0 {
				return errors.New("automanaged: no peers")
			}
			for _, p := range peers {
				if _, _, err := splitHostPort(p); err != nil {
					return fmt.Errorf("automanaged: peer: %w", err)
				}
			}
			_, port, err := splitHostPort(manageAddr)
			if err != nil {
				return fmt.Errorf("automanaged: manage address: %w", err)
			}
			if port == 0 {
				return errors.New("automanaged: the manage address needs a port")
			}
			return nil
		},
		make: func() (pacluster.ClusterProvider, error) {
			_, port, err := splitHostPort(manageAddr)
			if err != nil {
				return nil, err
			}
			if refresh <= 0 {
				refresh = DefaultRefresh
			}
			l, err := net.Listen("tcp", manageAddr)
			if err != nil {
				return nil, fmt.Errorf("automanaged: manage port: %w", err)
			}
			p := &automanagedProvider{port: port}
			p.echo = healthServer(l, p.health)
			p.AutoManagedProvider = automanaged.NewWithTesting(refresh, port, p.echo, peers...)
			return p, nil
		},
	}
}

// automanagedProvider is protoactor's automanaged provider, its health
// endpoint served by the node on a listener of its own: bound to the
// manage address's host.
type automanagedProvider struct {
	*automanaged.AutoManagedProvider
	port    int
	echo    *echo.Echo
	cluster atomic.Pointer[pacluster.Cluster]
}

// StartMember starts protoactor's provider, which serves p.echo.
func (p *automanagedProvider) StartMember(c *pacluster.Cluster) error {
	p.cluster.Store(c)
	return p.AutoManagedProvider.StartMember(c)
}

// health answers a peer's poll as protoactor's own endpoint does: who this
// node is; 503 before it starts.
func (p *automanagedProvider) health(ctx echo.Context) error {
	c := p.cluster.Load()
	if c == nil {
		return ctx.NoContent(http.StatusServiceUnavailable)
	}
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return ctx.NoContent(http.StatusServiceUnavailable)
	}
	return ctx.JSON(http.StatusOK, automanaged.NewNode(c.Config.Name, c.ActorSystem.ID, host, port, p.port, c.GetClusterKinds()))
}

// release closes the health endpoint's listener, when the node did not
// start (protoactor's provider closes it when the node stops).
func (p *automanagedProvider) release() { _ = p.echo.Close() }

// healthServer is an echo server of the health endpoint on l, silent (no
// banner, no address printed, no log).
func healthServer(l net.Listener, health echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	e.StdLogger = stdlog.New(io.Discard, "", 0)
	e.Listener = l
	e.GET("/_health", health)
	return e
}

// NewProvider is a provider made by make when the node starts: for a
// provider whose making needs its environment (package
// github.com/sift/batch/engine/cluster/kubernetes's, say). name is for the
// logs.
func NewProvider(name string, make func() (pacluster.ClusterProvider, error)) Provider {
	return Provider{name: name, make: make}
}

// ProtoactorProvider is any protoactor cluster provider: the test
// provider, Consul, etcd.
func ProtoactorProvider(p pacluster.ClusterProvider) Provider {
	return Provider{name: "protoactor", make: func() (pacluster.ClusterProvider, error) { return p, nil }}
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
	tag [engine.NodeTagLen]byte
	log *slog.Logger

	mu      sync.Mutex
	started bool

	workMu  sync.Mutex // guards closed and work.Add; apart from mu, which Start holds while protoactor publishes
	closed  bool
	runner  *engine.Runner
	handler http.Handler
	system  *actor.ActorSystem
	c       *pacluster.Cluster
	infos   map[string]nodeInfo                // by member id: who each member is
	asked   map[string]time.Time               // by member id: when it may be asked who it is again
	asking  map[string]chan struct{}           // by member id: closed once it has answered who it is, or not in time
	seen    map[[engine.NodeTagLen]byte]string // every node met since the start, by tag
	stored  map[[engine.NodeTagLen]byte]string // every node met before, by tag: the runner's store's, and those stored since
	refused int                                // tags not remembered: past persistence.MaxNodeTags
	self    membership                         // whether this node is in its own member list

	changed chan struct{} // closed at the next change of the members (Changed)
	ending  chan struct{} // closed by EndWaits
	endOnce sync.Once
	// topo is the members of the last topology protoactor published: its
	// MemberList.Members reads them without the lock its provider writes
	// them under, a data race.
	topo          atomic.Pointer[topology]
	admitMu       sync.Mutex
	pending       map[string]pending // by job id: admissions held for jobs being created
	jobsPerCaller int                // the runner's, for the grains
	sessions      sync.Map           // uint64 → *session: answers this node is giving
	work          sync.WaitGroup
	peerPanics    atomic.Int64 // calls of peers that panicked (PeerPanics)
	peerRefusals  atomic.Int64 // messages of peers refused (PeerRefusals)
	panicLogged   atomic.Int64 // when a peer's panic was last logged (UnixNano)
	refusalLogged atomic.Int64 // when a refusal was last logged (UnixNano)
	// actorSystem is system, for the gRPC server's guards, which must not
	// take mu (Start holds it while protoactor starts).
	actorSystem atomic.Pointer[actor.ActorSystem]
	// names is infos' names, by member id (string → string), for the
	// guards as actorSystem.
	names sync.Map
	// dialled is, by address dialled (HOST:PORT), the node whose
	// certificate answered there at the last TLS handshake (string →
	// string), for the guards: who may answer a Hello sent there.
	dialled sync.Map
	ctx     context.Context // cancelled by Close: ends every answer given
	cancel  context.CancelFunc
}

// nodeInfo is who a member is.
type nodeInfo struct {
	name string
	tag  [engine.NodeTagLen]byte
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
	n := &Node{cfg: cfg, log: cfg.Log, pending: map[string]pending{}, infos: map[string]nodeInfo{}, asked: map[string]time.Time{},
		asking: map[string]chan struct{}{}, seen: map[[engine.NodeTagLen]byte]string{}, changed: make(chan struct{}), ending: make(chan struct{})}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	copy(n.tag[:], Tag(cfg.Node))
	n.seen[n.tag] = cfg.Node
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n, nil
}

// Tag returns the node's tag, for [engine.Config.NodeTag].
func (n *Node) Tag() []byte { return Tag(n.cfg.Node) }

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Node }

// Address returns the address the other nodes reach this one at: the
// remote's, once started (with the port it picked if Addr's was 0).
func (n *Node) Address() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.system == nil {
		return n.cfg.AdvertiseAddr
	}
	return n.system.Address()
}

// Start joins the cluster: it starts protoactor's remote and cluster
// member, and the node's actor, which answers the other nodes with r (a
// list's pages) and h (requests about r's jobs, as h answers its own: the
// HTTP API's handler). r must have been made with the node's Tag as its
// NodeTag. Start returns once the node is a member (about a second: what
// protoactor takes), or an error (an address in use, say), having started
// nothing. The node remembers in r's store the tag of each node it meets,
// and Start reads them back ([engine.Runner.NodeTags]): a job of a node met
// before a restart still answers 503 while that node is away.
func (n *Node) Start(r *engine.Runner, h http.Handler) error {
	if r == nil || h == nil {
		return errors.New("start node: nil runner or handler")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.workMu.Lock()
	closed := n.closed
	n.workMu.Unlock()
	if n.started || closed {
		return errors.New("start node: started already")
	}
	if n.cfg.Provider.check != nil {
		if err := n.cfg.Provider.check(); err != nil {
			return fmt.Errorf("start node: %w", err)
		}
	}
	host, port, _ := splitHostPort(n.cfg.Addr)
	l, err := net.Listen("tcp", n.cfg.Addr) // protoactor panics on an address in use
	if err != nil {
		return fmt.Errorf("start node: cluster address: %w", err)
	}
	if port == 0 {
		port = l.Addr().(*net.TCPAddr).Port
	}
	_ = l.Close()
	advertise := n.cfg.AdvertiseAddr
	if _, aport, _ := splitHostPort(advertise); aport == 0 {
		ahost, _, _ := splitHostPort(advertise)
		advertise = net.JoinHostPort(ahost, strconv.Itoa(port))
	}
	provider, err := n.cfg.Provider.make()
	if err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	started := false
	defer func() {
		if p, ok := provider.(*automanagedProvider); ok && !started {
			p.release()
		}
	}()
	log := n.peerLogger(actors.ActorSystemLoggerKeeping(n.log, safeClusterAttrs...))
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
	remoteCfg := remote.Configure(host, port, append(n.transport(), remote.WithAdvertisedHost(advertise), remote.WithEndpointWriterBatchSize(8),
		remote.WithEndpointWriterQueueSize(endpointQueue), remote.WithEndpointManagerQueueSize(endpointQueue))...)
	n.jobsPerCaller = r.Config().JobsPerCaller
	grain := actor.PropsFromProducer(func() actor.Actor { return &callerGrain{n: n} })
	ccfg := pacluster.Configure(n.cfg.Name, provider, disthash.New(), remoteCfg,
		pacluster.WithRequestTimeout(n.cfg.Timeout), pacluster.WithKinds(pacluster.NewKind(callerKind, grain)))
	// Each member's gossip goes to every other member at each tick: the
	// screen keeps a member's heartbeat only from that member
	// (screenGossip), so it is not relayed.
	ccfg.GossipFanOut = gossipFanOut
	c := pacluster.New(system, ccfg)
	n.runner, n.handler, n.system, n.c = r, h, system, c
	n.actorSystem.Store(system)
	n.stored = n.loadTags(r)
	// Each change of the members: learn who the new ones are, then tell
	// whoever waits on Changed.
	system.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*pacluster.ClusterTopology); ok {
			members := t.Members
			// Our own copy: protoactor's MemberList.Members reads its
			// member set without the lock its writer holds (a data race).
			// The one it replaces is closed: a wait on a member that
			// has left ends (Node.request).
			if old := n.topo.Swap(&topology{hash: t.TopologyHash, members: members, next: make(chan struct{})}); old != nil {
				close(old.next)
			}
			n.self.note(selfOf(system), members, time.Now())
			n.goWork(func() {
				// A member that did not say who it is in time is asked
				// again, a few times, until this node closes or the
				// members change again.
				for attempt := 0; ; attempt++ {
					n.learn(members)
					n.mu.Lock()
					close(n.changed)
					n.changed = make(chan struct{})
					n.mu.Unlock()
					if n.knowsAll(members) || attempt == 10 || n.topologyHash() != t.TopologyHash {
						return
					}
					retry := time.NewTimer(helloTimeout)
					select {
					case <-retry.C:
					case <-n.ctx.Done():
						retry.Stop()
						return
					}
				}
			})
		}
	})
	if _, err := system.Root.SpawnNamed(actor.PropsFromFunc(n.receive), nodeActor); err != nil {
		system.Shutdown()
		return fmt.Errorf("start node: %w", err)
	}
	// protoactor panics where it could return an error (a port taken since
	// the check above, a provider that fails): this is its boundary.
	if err := startMember(c); err != nil {
		stopRemote(c) // else its server keeps the port, and goroutines, for good
		system.Shutdown()
		waitFreed(net.JoinHostPort(host, strconv.Itoa(port)))
		return fmt.Errorf("start node: %w", err)
	}
	n.started, started = true, true
	n.log.Info("cluster node started", slog.String(logKeyNode, n.cfg.Node), slog.String(logKeyAddress, system.Address()),
		slog.String("provider", n.cfg.Provider.name))
	return nil
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

// Close leaves the cluster gracefully (protoactor takes about 2 seconds to
// hand over) and ends every answer the node was giving another node. It
// does not close the runner. It is idempotent.
func (n *Node) Close() error {
	n.workMu.Lock()
	if n.closed {
		n.workMu.Unlock()
		return nil
	}
	n.closed = true
	n.workMu.Unlock()
	n.mu.Lock() // waits for a Start under way
	started := n.started
	n.mu.Unlock()
	n.cancel()
	n.work.Wait()
	if started {
		if !shutdown(n.c) {
			n.log.Warn("cluster remote stopped hard: protoactor panicked in its graceful stop")
		}
		n.log.Info("cluster node stopped", slog.String(logKeyNode, n.cfg.Node))
	}
	return nil
}

// shutdown is protoactor's graceful Shutdown, which panics (send on a
// closed channel, in its endpoint manager's stop) when a peer's stream
// ends while it stops: two nodes stopping at once (docs/CLUSTER.md,
// protoactor bug 8). The gRPC server of its remote is then stopped hard,
// so that it frees the port. false if it panicked.
func shutdown(c *pacluster.Cluster) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			stopRemote(c)
		}
	}()
	c.Shutdown(true)
	return true
}

// EndWaits has every long-poll this node forwards (GET
// /v1/batch/{id}?wait=… about another node's job) that is still waiting
// answer at once with the job as it stands, and later ones too, so that
// none holds up a graceful stop: register it with the server's
// [http.Server.RegisterOnShutdown], as the API's own EndWaits. It is
// idempotent and safe for concurrent use.
func (n *Node) EndWaits() { n.endOnce.Do(func() { close(n.ending) }) }

// Members returns the names of the nodes that are members now, as this
// node knows them (a member not yet asked who it is reads as its address).
func (n *Node) Members() []string {
	ms := n.members()
	out := make([]string, 0, len(ms))
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range ms {
		if info, ok := n.infos[m.Id]; ok {
			out = append(out, info.name)
		} else if selfOf(n.system).is(m) {
			out = append(out, n.cfg.Node)
		} else {
			out = append(out, m.Address())
		}
	}
	return out
}

// knowsAll reports whether every one of members has said who it is.
func (n *Node) knowsAll(members []*pacluster.Member) bool {
	self := n.me()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range members {
		if _, ok := n.infos[m.Id]; !ok && !self.is(m) {
			return false
		}
	}
	return true
}

// Changed returns a channel closed at the next change of the cluster's
// members, once this node has asked the new ones who they are: wait on it,
// then read [Node.Members].
func (n *Node) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// members returns the members now, as protoactor last published them;
// none before Start or after Close.
func (n *Node) members() []*pacluster.Member {
	n.mu.Lock()
	ok := n.started
	n.mu.Unlock()
	n.workMu.Lock()
	closed := n.closed
	n.workMu.Unlock()
	if !ok || closed {
		return nil
	}
	if t := n.topo.Load(); t != nil {
		return t.members
	}
	return nil
}

// topology is the members as this node last heard of them.
type topology struct {
	hash    uint64
	members []*pacluster.Member
	next    chan struct{} // closed once a newer topology replaces this one
}

// hasAddress reports whether a member of t has address addr.
func (t *topology) hasAddress(addr string) bool {
	for _, m := range t.members {
		if m.Address() == addr {
			return true
		}
	}
	return false
}

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
