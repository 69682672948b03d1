// Package clustertls makes and loads the certificates of a siftbatch
// cluster's mutual TLS: one certificate authority (CA) per cluster, and one
// key pair per node, signed by it, that names the node.
//
// A node presents its certificate to every peer it dials and every peer
// that dials it, and accepts a peer only when the peer's certificate chains
// to the cluster's CA and names a node (its subject's common name, also a
// DNS name of the certificate). The address dialled is not checked: pods
// and namespaces dial each other by IP. TLS 1.3 only.
//
// [Write] is what `siftbatch cluster-certs` runs, as CockroachDB's
// `cert create-node` does; [Load] is what `serve --cluster-ca --cluster-cert
// --cluster-key` runs.
package clustertls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Validity of what [Generate] makes.
const (
	// CAValidity is how long a cluster CA is valid: 10 years.
	CAValidity = 10 * 365 * 24 * time.Hour
	// NodeValidity is how long a node's certificate is valid: 5 years.
	NodeValidity = 5 * 365 * 24 * time.Hour
)

// DefaultHosts are the names and addresses every node's certificate
// carries, besides the node's name, when [Generate] is given no hosts.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1"}

var (
	// ErrNoNode is returned when a certificate names no node: its subject
	// has no common name, or the name is not among its DNS names.
	ErrNoNode = errors.New("certificate names no node")
	// ErrBadNodeName is returned by [Generate] for a node name that cannot
	// be a DNS name in a certificate or a file name.
	ErrBadNodeName = errors.New("bad node name")
)

// PEM is one key pair, PEM-encoded.
type PEM struct {
	Cert []byte // "CERTIFICATE"
	Key  []byte // "PRIVATE KEY" (PKCS #8)
}

// Set is a cluster's certificates, PEM-encoded: its CA and one key pair
// per node.
type Set struct {
	CA    PEM
	Nodes map[string]PEM // by node name
}

// Generate makes a fresh CA (ECDSA P-256) and, for each node, a key pair
// (ECDSA P-256) signed by it. Each node's certificate names the node: its
// subject's common name and a DNS name; it also carries hosts (names and
// IP addresses), or [DefaultHosts] when hosts is empty. Node names must be
// non-empty, unique, and made of letters, digits, '-', '_' and '.'.
func Generate(nodes, hosts []string, now time.Time) (*Set, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrBadNodeName)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if !validName(n) {
			return nil, fmt.Errorf("%w: %q (letters, digits, '-', '_' and '.')", ErrBadNodeName, n)
		}
		if seen[n] {
			return nil, fmt.Errorf("%w: %q given twice", ErrBadNodeName, n)
		}
		seen[n] = true
	}
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	for _, h := range hosts {
		if strings.TrimSpace(h) == "" {
			return nil, errors.New("generate: empty host")
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "siftbatch cluster CA", Organization: []string{"siftbatch"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("generate: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("generate: CA: %w", err)
	}
	caPEM, err := encode(caDER, caKey)
	if err != nil {
		return nil, err
	}
	set := &Set{CA: caPEM, Nodes: map[string]PEM{}}
	for _, n := range nodes {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: n, Organization: []string{"siftbatch"}},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(NodeValidity),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:     []string{n},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if !slices.Contains(tmpl.DNSNames, h) {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("generate: node %s: %w", n, err)
		}
		p, err := encode(der, key)
		if err != nil {
			return nil, err
		}
		set.Nodes[n] = p
	}
	return set, nil
}

// Write generates a set (see [Generate]) and writes it into dir, created
// if missing: dir/ca.crt, dir/ca.key, and dir/NODE.crt, dir/NODE.key for
// each node. Keys are written 0600, certificates 0644. It refuses to
// overwrite a file that exists (remove it first, or use a fresh dir).
func Write(dir string, nodes, hosts []string) error {
	set, err := Generate(nodes, hosts, time.Now())
	if err != nil {
		return err
	}
	type file struct {
		name string
		data []byte
		mode os.FileMode
	}
	files := []file{{"ca.crt", set.CA.Cert, 0o644}, {"ca.key", set.CA.Key, 0o600}}
	for _, n := range nodes {
		files = append(files, file{n + ".crt", set.Nodes[n].Cert, 0o644}, file{n + ".key", set.Nodes[n].Key, 0o600})
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f.name)); err == nil {
			return fmt.Errorf("write certs: %s exists", f.name)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write certs: %w", err)
	}
	for _, f := range files {
		fh, err := os.OpenFile(filepath.Join(dir, f.name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fmt.Errorf("write certs: %w", err)
		}
		_, werr := fh.Write(f.data)
		if cerr := fh.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("write certs: %w", werr)
		}
	}
	return nil
}

// Config is a node's side of the cluster's mutual TLS: the cluster's CA
// and this node's certificate and key. Make one with [Load] or [New]. Its
// methods are safe for concurrent use.
type Config struct {
	roots *x509.CertPool
	cert  tls.Certificate
	node  string
}

// Load reads a node's TLS files: the cluster's CA certificate, and this
// node's certificate and key (PEM). See [New].
func Load(caFile, certFile, keyFile string) (*Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("load cluster TLS: CA: %w", err)
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("load cluster TLS: certificate: %w", err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("load cluster TLS: key: %w", err)
	}
	return New(ca, cert, key)
}

// New makes a node's TLS configuration from PEM: the cluster's CA
// certificate(s), this node's certificate and its key. The certificate
// must chain to the CA and name a node ([ErrNoNode] otherwise).
func New(caPEM, certPEM, keyPEM []byte) (*Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("cluster TLS: no CA certificate in the CA file")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: %w", err)
	}
	c := &Config{roots: roots, cert: cert}
	node, err := c.verify(cert.Certificate, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: this node's certificate: %w", err)
	}
	c.node = node
	return c, nil
}

// Node returns the node this configuration's certificate names.
func (c *Config) Node() string { return c.node }

// NotAfter returns when this node's certificate expires.
func (c *Config) NotAfter() time.Time {
	if c.cert.Leaf == nil {
		return time.Time{}
	}
	return c.cert.Leaf.NotAfter
}

// Server returns the TLS configuration a node's gRPC server uses: TLS 1.3,
// this node's certificate, and a client certificate required and verified
// against the cluster's CA and to name a node.
func (c *Config) Server() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAnyClientCert, // verified below: chains to the CA, for client use, names a node
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := c.verify(raw, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
}

// Client returns the TLS configuration a node dials its peers with: TLS
// 1.3, this node's certificate, and the server's certificate verified
// against the cluster's CA and to name a node. The dialled address is not
// checked (peers dial each other by IP).
func (c *Config) Client() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{c.cert},
		InsecureSkipVerify: true, // the chain, server use and the node's name are verified below; the address is not
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := c.verify(raw, x509.ExtKeyUsageServerAuth)
			return err
		},
	}
}

// PeerNode returns the node a server's TLS connection's client
// certificate names; false if the connection has none that chains to the
// cluster's CA for client use.
func (c *Config) PeerNode(state tls.ConnectionState) (string, bool) {
	if len(state.PeerCertificates) == 0 {
		return "", false
	}
	raw := make([][]byte, len(state.PeerCertificates))
	for i, pc := range state.PeerCertificates {
		raw[i] = pc.Raw
	}
	node, err := c.verify(raw, x509.ExtKeyUsageClientAuth)
	return node, err == nil
}

// verify checks that the chain raw (leaf first) chains to the cluster's
// CA for each of usages (a node's own certificate is checked for both),
// and returns the node its leaf names.
func (c *Config) verify(raw [][]byte, usages ...x509.ExtKeyUsage) (string, error) {
	if len(raw) == 0 {
		return "", errors.New("no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		cert, err := x509.ParseCertificate(r)
		if err != nil {
			return "", fmt.Errorf("parse certificate: %w", err)
		}
		certs[i] = cert
	}
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	leaf := certs[0]
	// x509 accepts a chain valid for any one of KeyUsages: ask for each.
	for _, u := range usages {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return "", fmt.Errorf("verify certificate: %w", err)
		}
	}
	node := leaf.Subject.CommonName
	if node == "" || !slices.Contains(leaf.DNSNames, node) {
		return "", ErrNoNode
	}
	return node, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return PEM{}, fmt.Errorf("generate: key: %w", err)
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil { // crypto/rand does not fail on Linux; a fixed serial is still valid
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func validName(n string) bool {
	if n == "" || len(n) > 63 || n == "ca" || n == "." || n == ".." {
		return false
	}
	for _, r := range n {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
