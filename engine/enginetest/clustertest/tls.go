package clustertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sift/batch/engine/cluster/clustertls"
)

// testCA is the cluster CA of the process's tests, made once, and the TLS
// configurations it has issued, by node name.
var testCA struct {
	once  sync.Once
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	pem   []byte
	err   error
	mu    sync.Mutex
	nodes map[string]*clustertls.Config
}

// makeCA makes the tests' CA, once, as `siftbatch cluster-certs` makes one
// (clustertls.Generate).
func makeCA() error {
	testCA.once.Do(func() {
		set, err := clustertls.Generate([]string{"unused"}, nil, time.Now())
		if err != nil {
			testCA.err = err
			return
		}
		testCA.pem = set.CA.Cert
		block, _ := pem.Decode(set.CA.Cert)
		if block == nil {
			testCA.err = errors.New("test CA: no PEM certificate")
			return
		}
		if testCA.cert, testCA.err = x509.ParseCertificate(block.Bytes); testCA.err != nil {
			return
		}
		kblock, _ := pem.Decode(set.CA.Key)
		if kblock == nil {
			testCA.err = errors.New("test CA: no PEM key")
			return
		}
		key, err := x509.ParsePKCS8PrivateKey(kblock.Bytes)
		if err != nil {
			testCA.err = err
			return
		}
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			testCA.err = errors.New("test CA: not an ECDSA key")
			return
		}
		testCA.key = k
		testCA.nodes = map[string]*clustertls.Config{}
	})
	return testCA.err
}

// CA returns the tests' cluster CA (made once per process): its
// certificate, its key and its certificate's PEM. For tests that issue
// certificates of their own (expired, of the wrong use).
func CA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	if err := makeCA(); err != nil {
		t.Fatal(err)
	}
	return testCA.cert, testCA.key, testCA.pem
}

// NodeTLS returns the TLS configuration of a node named name, its
// certificate issued by the tests' CA (one per name and process), as
// `siftbatch cluster-certs` issues it (clustertls.Generate's template).
func NodeTLS(t testing.TB, name string) *clustertls.Config {
	t.Helper()
	c, err := nodeTLS(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nodeTLS is [NodeTLS], its failure returned.
func nodeTLS(name string) (*clustertls.Config, error) {
	if err := makeCA(); err != nil {
		return nil, err
	}
	testCA.mu.Lock()
	defer testCA.mu.Unlock()
	if c, ok := testCA.nodes[name]; ok {
		return c, nil
	}
	c, err := issueTLS(testCA.cert, testCA.key, testCA.pem, name)
	if err != nil {
		return nil, err
	}
	testCA.nodes[name] = c
	return c, nil
}

// issueTLS signs a certificate for node name with the CA (cert, key;
// caPEM its certificate) and returns its TLS configuration.
func issueTLS(ca *x509.Certificate, caKey *ecdsa.PrivateKey, caPEM []byte, name string) (*clustertls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{name, "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return clustertls.New(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// RemoteTLS returns the options of protoactor's remote that give a bare
// protoactor actor system (a test's fake member, or a stranger) the
// cluster's mutual TLS as node name.
func RemoteTLS(t testing.TB, name string) []remote.ConfigOption {
	t.Helper()
	c := NodeTLS(t, name)
	return []remote.ConfigOption{
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(c.Server()))),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(c.Client()))),
	}
}
