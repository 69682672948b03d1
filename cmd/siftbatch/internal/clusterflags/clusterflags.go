// Package clusterflags is serve's cluster flags: --cluster and the flags
// that mean something only with it, their checks (a usage error naming the
// flag, before anything starts), and the cluster node they describe.
package clusterflags

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clustertls"
)

// The cluster providers --cluster-provider names.
const (
	ProviderAutomanaged = "automanaged"
	ProviderK8s         = "k8s"
)

// Flags are serve's cluster flags. Without --cluster every other one
// is refused, and serve is a single node: no port but --addr's, no
// goroutine more.
type Flags struct {
	Name      string // --cluster
	Node      string // --node
	Addr      string // --cluster-addr
	Advertise string // --advertise-addr
	Manage    string // --manage-addr
	Peers     string // --peers
	Provider  string // --cluster-provider
	CA        string // --cluster-ca
	Cert      string // --cluster-cert
	Key       string // --cluster-key
	Insecure  bool   // --cluster-insecure

	peerList []string // peers split, once validated
}

// clusterFlagNames are the flags that mean something only with --cluster.
var clusterFlagNames = []string{"node", "cluster-addr", "advertise-addr", "manage-addr", "peers", "cluster-provider",
	"cluster-ca", "cluster-cert", "cluster-key", "cluster-insecure"}

// clusterTLSFlags are the flags of a node's mutual TLS, all three needed.
var clusterTLSFlags = []string{"cluster-ca", "cluster-cert", "cluster-key"}

// Add adds the cluster flags to fs, set into c.
func (c *Flags) Add(fs *flag.FlagSet) {
	host, _ := os.Hostname() // "" if unknown: validate asks for --node
	fs.StringVar(&c.Name, "cluster", "", "join the cluster `NAME`: a node of several serve processes, any of which answers\nfor any job (each runs the jobs submitted to it); off without it. Every node needs\nthe same --keys file")
	fs.StringVar(&c.Node, "node", host, "this node's `NAME`, stable across restarts (a StatefulSet pod's name): job ids\nbegin with a hash of it; the hostname by default")
	fs.StringVar(&c.Addr, "cluster-addr", "", "`HOST:PORT` the node listens on for the other nodes (protoactor's gRPC remote),\nalso what it advertises to them; needed with --cluster. Port 0 is a free one, which\nserve prints on stdout once joined: \"siftbatch serve: cluster node NAME at HOST:PORT\"")
	fs.StringVar(&c.Advertise, "advertise-addr", "", "`HOST:PORT` the other nodes reach this one at, if not --cluster-addr (say\n--cluster-addr 0.0.0.0:7000 --advertise-addr $POD_IP:7000)")
	fs.StringVar(&c.Manage, "manage-addr", "", "`HOST:PORT` of this node's automanaged membership endpoint (plain HTTP, membership\nhealth only, on that host: 0.0.0.0 for every interface); needed with\n--cluster-provider automanaged")
	fs.StringVar(&c.Peers, "peers", "", "the --manage-addr of every node, this one included, as `HOST:PORT,...`; each\nnode polls every peer every 2s and drops one that misses a poll; needed with\n--cluster-provider automanaged")
	fs.StringVar(&c.Provider, "cluster-provider", ProviderAutomanaged, "how the nodes find each other, `automanaged|k8s`: automanaged polls the static\n--peers; k8s asks the Kubernetes API for the cluster's pods")
	fs.StringVar(&c.CA, "cluster-ca", "", "the cluster's CA certificate(s), PEM `FILE` (several during a change of CA): a\npeer is accepted if its certificate chains to one; needed with --cluster, with\n--cluster-cert and --cluster-key (siftbatch cluster-certs makes them all)")
	fs.StringVar(&c.Cert, "cluster-cert", "", "this node's certificate, PEM `FILE`: signed by the CA, naming --node; presented\nto every peer, as a server and as a client")
	fs.StringVar(&c.Key, "cluster-key", "", "this node's private key, PEM `FILE` (--cluster-cert's)")
	fs.BoolVar(&c.Insecure, "cluster-insecure", false, "cluster traffic in plaintext, unauthenticated, instead of mutual TLS: anyone who\nreaches --cluster-addr can read and send the cluster's messages (loopback\nexperiments only; a warning is logged)")
}

// Validate checks the cluster flags; set holds the names of the flags
// given on the command line. It returns a usage error naming the flag.
func (c *Flags) Validate(set map[string]bool, apiAddr string) error {
	if !set["cluster"] {
		for _, f := range clusterFlagNames {
			if set[f] {
				return cli.CmdUsagef("serve", "--%s needs --cluster NAME (cluster mode is off without it)", f)
			}
		}
		return nil
	}
	if strings.TrimSpace(c.Name) == "" {
		return cli.CmdUsagef("serve", "--cluster must name the cluster (got %q)", c.Name)
	}
	if strings.TrimSpace(c.Node) == "" {
		return cli.CmdUsagef("serve", "--node must name this node (got %q; the default, the hostname, is unknown here)", c.Node)
	}
	if c.Provider != ProviderAutomanaged && c.Provider != ProviderK8s {
		return cli.CmdUsagef("serve", "--cluster-provider must be %s or %s (got %q)", ProviderAutomanaged, ProviderK8s, c.Provider)
	}
	if c.Addr == "" {
		return cli.CmdUsagef("serve", "--cluster needs --cluster-addr HOST:PORT (where this node listens for the others)")
	}
	host, port, err := hostPortOrZero(c.Addr)
	if err != nil {
		return cli.CmdUsagef("serve", "--cluster-addr %q is not HOST:PORT with a port from 0 to 65535 (0: a free one, reported on stdout)", c.Addr)
	}
	if c.Advertise != "" {
		if host, _, err = hostPort(c.Advertise); err != nil {
			return cli.CmdUsagef("serve", "--advertise-addr %q is not HOST:PORT with a port from 1 to 65535", c.Advertise)
		}
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return cli.CmdUsagef("serve", "--cluster-addr %q cannot be advertised to the other nodes: give --advertise-addr HOST:PORT, an address they reach this node at", c.Addr)
	}
	if _, apiPort, err := net.SplitHostPort(apiAddr); err == nil && port != 0 && apiPort == strconv.Itoa(port) {
		return cli.CmdUsagef("serve", "--cluster-addr and --addr need different ports (both are %d)", port)
	}
	if c.Provider == ProviderK8s {
		for _, f := range []string{"manage-addr", "peers"} {
			if set[f] {
				return cli.CmdUsagef("serve", "--%s is for --cluster-provider %s; the %s provider finds the nodes itself", f, ProviderAutomanaged, ProviderK8s)
			}
		}
		return c.validateTLS()
	}
	if c.Manage == "" || c.Peers == "" {
		return cli.CmdUsagef("serve", "--cluster-provider %s needs --manage-addr HOST:PORT and --peers HOST:PORT,... (the --manage-addr of every node)", ProviderAutomanaged)
	}
	mhost, mport, err := hostPort(c.Manage)
	if err != nil {
		return cli.CmdUsagef("serve", "--manage-addr %q is not HOST:PORT with a port from 1 to 65535", c.Manage)
	}
	if mport == port {
		return cli.CmdUsagef("serve", "--manage-addr and --cluster-addr need different ports (both are %d)", port)
	}
	if _, apiPort, err := net.SplitHostPort(apiAddr); err == nil && apiPort == strconv.Itoa(mport) {
		return cli.CmdUsagef("serve", "--manage-addr and --addr need different ports (both are %d)", mport)
	}
	c.peerList = nil
	self := false
	for p := range strings.SplitSeq(c.Peers, ",") {
		p = strings.TrimSpace(p)
		phost, pport, err := hostPort(p)
		if err != nil || phost == "" {
			return cli.CmdUsagef("serve", "--peers: %q is not HOST:PORT with a host and a port from 1 to 65535", p)
		}
		// A --manage-addr of 0.0.0.0:7001 listens on every interface: it is
		// the peer 10.0.0.5:7001.
		if pport == mport && (phost == mhost || mhost == "" || net.ParseIP(mhost) != nil && net.ParseIP(mhost).IsUnspecified()) {
			self = true
		}
		c.peerList = append(c.peerList, p)
	}
	if !self {
		return cli.CmdUsagef("serve", "--peers must include this node's --manage-addr %s: each node polls every peer, itself included", c.Manage)
	}
	return c.validateTLS()
}

// validateTLS checks the TLS flags: all three files, or --cluster-insecure
// alone. The files are read when the node is made ([Flags.NewNode]).
func (c *Flags) validateTLS() error {
	given := map[string]bool{"cluster-ca": c.CA != "", "cluster-cert": c.Cert != "", "cluster-key": c.Key != ""}
	if c.Insecure {
		for _, f := range clusterTLSFlags {
			if given[f] {
				return cli.CmdUsagef("serve", "--cluster-insecure and --%s exclude each other: give --cluster-ca, --cluster-cert and --cluster-key (mutual TLS), or --cluster-insecure alone", f)
			}
		}
		return nil
	}
	if !given["cluster-ca"] && !given["cluster-cert"] && !given["cluster-key"] {
		return cli.CmdUsagef("serve", "--cluster needs --cluster-ca FILE, --cluster-cert FILE and --cluster-key FILE: cluster traffic is mutually authenticated and encrypted (make the files with \"siftbatch cluster-certs --dir DIR --nodes %s,...\"); --cluster-insecure runs without them, in plaintext (loopback experiments only)", c.Node)
	}
	for _, f := range clusterTLSFlags {
		if !given[f] {
			return cli.CmdUsagef("serve", "--%s FILE is missing: mutual TLS needs --cluster-ca, --cluster-cert and --cluster-key (\"siftbatch cluster-certs\" makes them)", f)
		}
	}
	return nil
}

// hostPort splits HOST:PORT, the port a number from 1 to 65535.
func hostPort(addr string) (string, int, error) {
	host, port, err := hostPortOrZero(addr)
	if err == nil && port == 0 {
		err = errors.New("port 0")
	}
	return host, port, err
}

// hostPortOrZero splits HOST:PORT, the port a number from 0 to 65535.
func hostPortOrZero(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, int(port), nil
}

// NewNode returns the cluster node the flags describe, not yet started;
// nil without --cluster. manage, if not nil, is a socket listening on
// --manage-addr, handed to serve (package activation): the node serves its
// membership endpoint on it instead of binding the address itself.
func (c *Flags) NewNode(log *slog.Logger, manage net.Listener) (*cluster.Node, error) {
	if c.Name == "" {
		return nil, nil
	}
	tlsConf, err := c.LoadTLS()
	if err != nil {
		return nil, err
	}
	var p cluster.Provider
	switch c.Provider {
	case ProviderK8s:
		var err error
		if p, err = kubernetesProvider(); err != nil {
			return nil, err
		}
	case ProviderAutomanaged:
		if manage != nil {
			p = cluster.AutomanagedOn(manage, c.peerList, 0)
		} else {
			p = cluster.Automanaged(c.Manage, c.peerList, 0)
		}
	}
	if c.Insecure {
		log.Warn("cluster traffic is plaintext and unauthenticated (--cluster-insecure): whoever reaches the cluster port can read and send the cluster's messages",
			slog.String(logKeyNode, c.Node))
	} else {
		log.Info("cluster traffic is mutually authenticated and encrypted (TLS 1.3)",
			slog.String(logKeyNode, c.Node), slog.Time(logKeyCertExpiry, tlsConf.NotAfter()))
	}
	node, err := cluster.New(cluster.Config{Name: c.Name, Node: c.Node, Addr: c.Addr, AdvertiseAddr: c.Advertise, Provider: p,
		TLS: tlsConf, Insecure: c.Insecure, Log: log})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return node, nil
}

// LoadTLS reads the node's TLS files (nil with --cluster-insecure) and
// checks that its certificate names --node.
func (c *Flags) LoadTLS() (*clustertls.Config, error) {
	if c.Insecure {
		return nil, nil
	}
	conf, err := clustertls.Load(c.CA, c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w (--cluster-ca, --cluster-cert, --cluster-key)", err)
	}
	if conf.Node() != c.Node {
		return nil, fmt.Errorf("cluster: --cluster-cert %s names node %q, not --node %q: each node needs its own certificate, naming it (siftbatch cluster-certs --nodes %s,...)",
			c.Cert, conf.Node(), c.Node, c.Node)
	}
	return conf, nil
}

// Log keys of the node's first lines: never a URL, a host or a key.
const (
	// logKeyNode is a cluster node's name (--node).
	logKeyNode = "node"
	// logKeyCertExpiry is when this node's cluster certificate expires.
	logKeyCertExpiry = "cert_not_after"
)
