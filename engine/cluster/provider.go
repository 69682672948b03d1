package cluster

import (
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
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
