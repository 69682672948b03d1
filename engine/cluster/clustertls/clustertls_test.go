package clustertls_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sift/batch/engine/cluster/clustertls"
)

func mustGenerate(t *testing.T, nodes, hosts []string) *clustertls.Set {
	t.Helper()
	set, err := clustertls.Generate(nodes, hosts, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func mustConfig(t *testing.T, set *clustertls.Set, node string) *clustertls.Config {
	t.Helper()
	c, err := clustertls.New(set.CA.Cert, set.Nodes[node].Cert, set.Nodes[node].Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func leaf(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGenerate_NamesAndHosts(t *testing.T) {
	set := mustGenerate(t, []string{"n1", "n2"}, nil)
	c := leaf(t, set.Nodes["n1"].Cert)
	if c.Subject.CommonName != "n1" || !slices.Equal(c.DNSNames, []string{"n1", "localhost"}) || len(c.IPAddresses) != 2 {
		t.Fatalf("n1: cn %q dns %v ips %v", c.Subject.CommonName, c.DNSNames, c.IPAddresses)
	}
	if c.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("key algorithm %v, want ECDSA", c.PublicKeyAlgorithm)
	}
	set = mustGenerate(t, []string{"n1"}, []string{"10.0.0.7", "n1.svc"})
	c = leaf(t, set.Nodes["n1"].Cert)
	if !slices.Equal(c.DNSNames, []string{"n1", "n1.svc"}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Fatalf("with hosts: dns %v ips %v", c.DNSNames, c.IPAddresses)
	}
	if !leaf(t, set.CA.Cert).IsCA {
		t.Fatal("CA is not a CA")
	}
}

func TestGenerate_BadNames(t *testing.T) {
	for _, nodes := range [][]string{nil, {""}, {"a/b"}, {"../x"}, {"ca"}, {"n1", "n1"}, {"a b"}} {
		if _, err := clustertls.Generate(nodes, nil, time.Now()); !errors.Is(err, clustertls.ErrBadNodeName) {
			t.Errorf("%q: err %v, want ErrBadNodeName", nodes, err)
		}
	}
}

func TestWrite_FilesAndModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := clustertls.Write(dir, []string{"n1", "n2", "n3"}, nil); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "n1.crt": 0o644, "n1.key": 0o600, "n3.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	c, err := clustertls.Load(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "n2.crt"), filepath.Join(dir, "n2.key"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node() != "n2" || time.Until(c.NotAfter()) < 4*365*24*time.Hour {
		t.Fatalf("node %q, not after %v", c.Node(), c.NotAfter())
	}
	if err := clustertls.Write(dir, []string{"n1"}, nil); err == nil {
		t.Fatal("Write overwrote existing files")
	}
}

// conns returns the two ends of a loopback TCP connection (buffered by
// the kernel: a TLS alert never blocks its writer), closed at the end.
func conns(t *testing.T) (server, client net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return server, client
}

// handshake runs one TLS 1.3 handshake and a one-byte write, and returns
// each side's error.
func handshake(t *testing.T, server, client *tls.Config) (serr, cerr error) {
	t.Helper()
	a, b := conns(t)
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			_, err = io.ReadFull(s, make([]byte, 1)) // TLS 1.3: the client's certificate is checked by now
		}
		_ = s.Close()
		done <- err
	}()
	c := tls.Client(b, client)
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Write([]byte{1})
	}
	_ = c.Close()
	return <-done, cerr
}

func TestConfig_MutualHandshake(t *testing.T) {
	set := mustGenerate(t, []string{"n1", "n2"}, nil)
	n1, n2 := mustConfig(t, set, "n1"), mustConfig(t, set, "n2")
	if serr, cerr := handshake(t, n1.Server(), n2.Client()); serr != nil || cerr != nil {
		t.Fatalf("same CA: server %v, client %v", serr, cerr)
	}

	other := mustGenerate(t, []string{"n2"}, nil)
	stranger := mustConfig(t, other, "n2")
	if serr, _ := handshake(t, n1.Server(), stranger.Client()); serr == nil {
		t.Fatal("server accepted a client certificate from another CA")
	}
	if _, cerr := handshake(t, stranger.Server(), n1.Client()); cerr == nil {
		t.Fatal("client accepted a server certificate from another CA")
	}
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	if serr, _ := handshake(t, n1.Server(), noCert); serr == nil {
		t.Fatal("server accepted a client without a certificate")
	}
	tls12 := n2.Client()
	tls12.MaxVersion = tls.VersionTLS12
	if serr, _ := handshake(t, n1.Server(), tls12); serr == nil {
		t.Fatal("server accepted TLS 1.2")
	}
}

func TestConfig_PeerNode(t *testing.T) {
	set := mustGenerate(t, []string{"n1", "n2"}, nil)
	n1, n2 := mustConfig(t, set, "n1"), mustConfig(t, set, "n2")
	a, b := conns(t)
	got := make(chan tls.ConnectionState, 1)
	go func() {
		s := tls.Server(a, n1.Server())
		_, _ = io.ReadFull(s, make([]byte, 1))
		got <- s.ConnectionState()
		_ = s.Close()
	}()
	c := tls.Client(b, n2.Client())
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	state := <-got
	_ = c.Close()
	if node, ok := n1.PeerNode(state); !ok || node != "n2" {
		t.Fatalf("PeerNode = %q, %v; want n2", node, ok)
	}
	if _, ok := n1.PeerNode(tls.ConnectionState{}); ok {
		t.Fatal("PeerNode of no certificate is ok")
	}
}

func TestNew_RefusesCertOfAnotherCA(t *testing.T) {
	a, b := mustGenerate(t, []string{"n1"}, nil), mustGenerate(t, []string{"n1"}, nil)
	if _, err := clustertls.New(a.CA.Cert, b.Nodes["n1"].Cert, b.Nodes["n1"].Key); err == nil {
		t.Fatal("New accepted a certificate that does not chain to the CA")
	}
	if _, err := clustertls.New([]byte("junk"), a.Nodes["n1"].Cert, a.Nodes["n1"].Key); err == nil {
		t.Fatal("New accepted a CA file without a certificate")
	}
	if _, err := clustertls.New(a.CA.Cert, a.Nodes["n1"].Cert, b.Nodes["n1"].Key); err == nil {
		t.Fatal("New accepted a key that does not match")
	}
}

// signLeaf signs a certificate for node with set's CA, for usages only.
func signLeaf(t *testing.T, set *clustertls.Set, node string, usages ...x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	ca := leaf(t, set.CA.Cert)
	kb, _ := pem.Decode(set.CA.Key)
	caKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: node},
		DNSNames:     []string{node},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TestConfig_KeyUsages: a client must present a certificate for client
// use, a server one for server use; a node's own must be good for both.
func TestConfig_KeyUsages(t *testing.T) {
	set := mustGenerate(t, []string{"n1"}, nil)
	n1 := mustConfig(t, set, "n1")
	serverOnly, serverOnlyKey := signLeaf(t, set, "n2", x509.ExtKeyUsageServerAuth)
	clientOnly, clientOnlyKey := signLeaf(t, set, "n3", x509.ExtKeyUsageClientAuth)
	if _, err := clustertls.New(set.CA.Cert, serverOnly, serverOnlyKey); err == nil {
		t.Fatal("New accepted a node certificate for server use only")
	}
	// Presented as a client by a hand-made TLS config.
	as := func(certPEM, keyPEM []byte) *tls.Config {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{c}}
	}
	if serr, _ := handshake(t, n1.Server(), as(serverOnly, serverOnlyKey)); serr == nil {
		t.Fatal("server accepted a client certificate for server use only")
	}
	if serr, cerr := handshake(t, n1.Server(), as(clientOnly, clientOnlyKey)); serr != nil || cerr != nil {
		t.Fatalf("client certificate for client use: server %v, client %v", serr, cerr)
	}
	srv := as(clientOnly, clientOnlyKey)
	if _, cerr := handshake(t, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: srv.Certificates}, n1.Client()); cerr == nil {
		t.Fatal("client accepted a server certificate for client use only")
	}
}
