package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/labstack/echo"
)

// Provider is how the nodes of a cluster find each other: one of
// protoactor's cluster providers. Make one with [Automanaged],
// [Kubernetes] or [ProtoactorProvider].
type Provider struct {
	name string
	// make makes the provider of one incarnation of the node; manage is
	// a view of the port listen bound (nil if listen is nil).
	make func(manage net.Listener) (pacluster.ClusterProvider, error)
	// check runs before the node starts: a bad peer address, say.
	check func() error
	// listen binds the provider's own port (the automanaged provider's
	// manage address) when the node starts; the node keeps it until it
	// closes, across its incarnations. nil for a provider without one.
	listen func() (net.Listener, error)
	// views asks every peer who it is and which members it counts (the
	// automanaged provider's health endpoints); nil for a provider that
	// cannot tell (rejoin.go).
	views func(ctx context.Context) []peerView
	// refresh is how often the provider polls its peers; 0 if it does not.
	refresh time.Duration
}

// peerView is what a peer's health endpoint says: its member id, and the
// member ids of the members it counts now (nil: it has no view yet, having
// just started; an older node says nothing of them either).
type peerView struct {
	ID      string   `json:"id"`
	Members []string `json:"siftbatch_members"`
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
// between the nodes goes over the remote, under the cluster's TLS. The node
// binds manageAddr when it starts and keeps it until it closes, a rejoin
// under a new member id included.
//
// Known behaviour of protoactor's automanaged provider, designed around: a
// member that misses one poll is dropped for good by the node that polled
// it (it comes back after a restart, under a new member id); there is no
// consensus between the nodes' views of the membership.
func Automanaged(manageAddr string, peers []string, refresh time.Duration) Provider {
	p := automanagedBase(peers, refresh)
	p.check = func() error {
		if err := checkPeers(peers); err != nil {
			return err
		}
		_, port, err := splitHostPort(manageAddr)
		if err != nil {
			return fmt.Errorf("automanaged: manage address: %w", err)
		}
		if port == 0 {
			return errors.New("automanaged: the manage address needs a port")
		}
		return nil
	}
	p.listen = func() (net.Listener, error) {
		l, err := net.Listen("tcp", manageAddr)
		if err != nil {
			return nil, fmt.Errorf("automanaged: manage port: %w", err)
		}
		return l, nil
	}
	return p
}

// AutomanagedOn is [Automanaged] with the health endpoint served on l, a
// TCP listener the caller made: its address is the node's manage address
// (one of peers). The node takes l over when it starts (it closes it when
// it closes, or when Start fails), so no port is picked, closed and bound
// again: nothing else can take it meanwhile. A provider made by
// AutomanagedOn serves one node, once.
func AutomanagedOn(l net.Listener, peers []string, refresh time.Duration) Provider {
	p := automanagedBase(peers, refresh)
	p.check = func() error {
		if l == nil {
			return errors.New("automanaged: no manage listener")
		}
		if _, ok := l.Addr().(*net.TCPAddr); !ok {
			return errors.New("automanaged: the manage listener is not TCP")
		}
		return checkPeers(peers)
	}
	var once sync.Once
	p.listen = func() (net.Listener, error) {
		var given net.Listener
		once.Do(func() { given = l })
		if given == nil {
			return nil, errors.New("automanaged: the manage listener was used already")
		}
		return given, nil
	}
	return p
}

// automanagedBase is what [Automanaged] and [AutomanagedOn] share: the
// provider of each incarnation, on a view of the manage port.
func automanagedBase(peers []string, refresh time.Duration) Provider {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	return Provider{
		name:    "automanaged",
		refresh: refresh,
		views:   func(ctx context.Context) []peerView { return peerViews(ctx, peers, max(refresh, viewTimeout)) },
		make: func(manage net.Listener) (pacluster.ClusterProvider, error) {
			addr, ok := manage.Addr().(*net.TCPAddr)
			if !ok {
				return nil, errors.New("automanaged: the manage listener is not TCP")
			}
			p := &automanagedProvider{port: addr.Port, manage: manage}
			p.echo = healthServer(manage, p.health)
			p.AutoManagedProvider = automanaged.NewWithTesting(refresh, addr.Port, p.echo, peers...)
			return p, nil
		},
	}
}

// checkPeers checks the automanaged provider's peers.
func checkPeers(peers []string) error {
	if len(peers) == 0 {
		return errors.New("automanaged: no peers")
	}
	for _, p := range peers {
		if _, _, err := splitHostPort(p); err != nil {
			return fmt.Errorf("automanaged: peer: %w", err)
		}
	}
	return nil
}

// automanagedProvider is protoactor's automanaged provider, its health
// endpoint served by the node on a listener of its own: bound to the
// manage address's host.
type automanagedProvider struct {
	*automanaged.AutoManagedProvider
	port    int
	echo    *echo.Echo
	manage  net.Listener // its view of the node's manage port
	cluster atomic.Pointer[pacluster.Cluster]
	// members returns the member ids of the members the node counts now,
	// which the health endpoint tells (set before StartMember).
	members func() []string
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
	var members []string
	if p.members != nil {
		members = p.members()
	}
	return ctx.JSON(http.StatusOK, health{NodeModel: automanaged.NewNode(c.Config.Name, c.ActorSystem.ID, host, port, p.port, c.GetClusterKinds()),
		Members: members})
}

// health is the health endpoint's answer: what protoactor's says (who the
// node is), and the member ids of the members the node counts now, which
// its peers read to find out whether they are blocked (rejoin.go).
type health struct {
	*automanaged.NodeModel
	Members []string `json:"siftbatch_members"`
}

// peerViews asks the health endpoint of each of peers (manage addresses)
// what it says, each within timeout; a peer that does not answer 200 with
// a member id in time is left out.
func peerViews(ctx context.Context, peers []string, timeout time.Duration) []peerView {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	views := make([]*peerView, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p+"/_health", nil)
			if err != nil {
				return
			}
			res, err := client.Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			var v peerView
			if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&v) != nil || v.ID == "" {
				return
			}
			views[i] = &v
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	var out []peerView
	for _, v := range views {
		if v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// release closes the health endpoint's server and its view of the manage
// port, when the node did not start (protoactor's provider closes it when
// the node stops); the port stays the node's.
func (p *automanagedProvider) release() {
	_ = p.echo.Close()
	_ = p.manage.Close() // echo closes it only if it had begun to serve it
}

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
	return Provider{name: name, make: func(net.Listener) (pacluster.ClusterProvider, error) { return make() }}
}

// ProtoactorProvider is any protoactor cluster provider: the test
// provider, Consul, etcd.
func ProtoactorProvider(p pacluster.ClusterProvider) Provider {
	return Provider{name: "protoactor", make: func(net.Listener) (pacluster.ClusterProvider, error) { return p, nil }}
}
