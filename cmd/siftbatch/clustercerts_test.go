package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/clusterflags"
	"github.com/sift/batch/engine/cluster/clustertls"
)

// readCert reads the one PEM certificate in path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%s: want one PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// isP256 reports whether c's public key is ECDSA P-256.
func isP256(c *x509.Certificate) bool {
	k, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && k.Curve == elliptic.P256()
}

// TestClusterCerts_WritesCAAndNodeKeyPairs: cluster-certs writes the CA
// and a key pair per node, keys 0600, ECDSA P-256, each node's certificate
// signed by the CA for server and client use and naming the node and,
// without --hosts, localhost, 127.0.0.1 and ::1; what serve loads is what
// it wrote; it prints the files and the serve flags.
func TestClusterCerts_WritesCAAndNodeKeyPairs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs") // created by the command
	nodes := []string{"n1", "n2", "siftbatch-0"}
	out, _, err := run(t, "cluster-certs", "--dir", dir, "--nodes", strings.Join(nodes, ","))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ca.crt", "ca.key"}
	for _, n := range nodes {
		want = append(want, n+".crt", n+".key")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		wantMode := os.FileMode(0o644)
		if strings.HasSuffix(e.Name(), ".key") {
			wantMode = 0o600
		}
		if fi.Mode().Perm() != wantMode {
			t.Errorf("%s: mode %v, want %v", e.Name(), fi.Mode().Perm(), wantMode)
		}
	}
	if slices.Sort(want); !slices.Equal(got, want) {
		t.Fatalf("wrote %v, want %v", got, want)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the directory: %v, %v: want it the owner's only", fi.Mode(), err)
	}

	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	if !ca.IsCA || !isP256(ca) || ca.CheckSignatureFrom(ca) != nil {
		t.Fatalf("ca.crt: IsCA %v, P-256 %v: want a self-signed ECDSA P-256 CA", ca.IsCA, isP256(ca))
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")); err != nil {
		t.Errorf("ca.key does not match ca.crt: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, n := range nodes {
		c := readCert(t, filepath.Join(dir, n+".crt"))
		if !isP256(c) || c.Subject.CommonName != n {
			t.Errorf("%s.crt: P-256 %v, CN %q", n, isP256(c), c.Subject.CommonName)
		}
		if !slices.Equal(c.DNSNames, []string{n, "localhost"}) {
			t.Errorf("%s.crt: DNS names %v, want [%s localhost]", n, c.DNSNames, n)
		}
		var ips []string
		for _, ip := range c.IPAddresses {
			ips = append(ips, ip.String())
		}
		if !slices.Equal(ips, []string{"127.0.0.1", "::1"}) {
			t.Errorf("%s.crt: IP addresses %v, want [127.0.0.1 ::1]", n, ips)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s.crt as a server: %v", n, err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s.crt as a client: %v", n, err)
		}
		conf, err := clustertls.Load(filepath.Join(dir, "ca.crt"), filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"))
		if err != nil || conf.Node() != n {
			t.Fatalf("serve's load of %s's files: %v", n, err)
		}
		flags := "--node " + n + " --cluster-ca " + filepath.Join(dir, "ca.crt") + " --cluster-cert " + filepath.Join(dir, n+".crt") + " --cluster-key " + filepath.Join(dir, n+".key")
		if !strings.Contains(out, flags) {
			t.Errorf("the output lacks %s's serve flags %q:\n%s", n, flags, out)
		}
		if !strings.Contains(out, n+".key") {
			t.Errorf("the output does not name %s.key:\n%s", n, out)
		}
	}
	for _, w := range []string{"ca.crt", "ca.key", "keep it off the nodes", "localhost, 127.0.0.1, ::1"} {
		if !strings.Contains(out, w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
}

// TestClusterCerts_Hosts: --hosts puts its names and addresses in every
// node's certificate instead of the loopback defaults.
func TestClusterCerts_Hosts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, _, err := run(t, "cluster-certs", "--dir", dir, "--nodes", "a,b", "--hosts", "siftbatch-cluster.ns.svc, 10.0.0.7,fd00::7,*.siftbatch-cluster")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		c := readCert(t, filepath.Join(dir, n+".crt"))
		if want := []string{n, "siftbatch-cluster.ns.svc", "*.siftbatch-cluster"}; !slices.Equal(c.DNSNames, want) {
			t.Errorf("%s.crt: DNS names %v, want %v", n, c.DNSNames, want)
		}
		if len(c.IPAddresses) != 2 || !c.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) || !c.IPAddresses[1].Equal(net.ParseIP("fd00::7")) {
			t.Errorf("%s.crt: IP addresses %v, want [10.0.0.7 fd00::7] only", n, c.IPAddresses)
		}
	}
	if !strings.Contains(out, "siftbatch-cluster.ns.svc, 10.0.0.7") || strings.Contains(out, "localhost") {
		t.Errorf("the output does not say which hosts:\n%s", out)
	}
}

// TestClusterCerts_Refuses: a bad command line is a usage error with a hint
// that names the flag, and writes nothing; files that exist are never
// overwritten, and the error says so.
func TestClusterCerts_Refuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{"--nodes", "n1"}, "--dir is required"},
		{"no nodes", []string{"--dir", "D"}, "--nodes is required"},
		{"blank nodes", []string{"--dir", "D", "--nodes", " "}, "--nodes is required"},
		{"a space", []string{"--dir", "D", "--nodes", "n1,n 2"}, `--nodes: bad node name: "n 2"`},
		{"a slash", []string{"--dir", "D", "--nodes", "../n1"}, `--nodes: bad node name: "../n1"`},
		{"ca", []string{"--dir", "D", "--nodes", "n1,ca"}, `--nodes: bad node name: "ca"`},
		{"empty item", []string{"--dir", "D", "--nodes", "n1,,n2"}, `--nodes: bad node name: ""`},
		{"twice", []string{"--dir", "D", "--nodes", "n1,n2,n1"}, `"n1" given twice`},
		{"bad host", []string{"--dir", "D", "--nodes", "n1", "--hosts", "a b"}, `--hosts: "a b" is neither a DNS name nor an IP address`},
		{"empty host", []string{"--dir", "D", "--nodes", "n1", "--hosts", "h,"}, `--hosts: "" is neither`},
		{"argument", []string{"--dir", "D", "--nodes", "n1", "extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"--dir", "D", "--nodes", "n1", "--ca", "x"}, "flag provided but not defined: -ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			args := []string{"cluster-certs"}
			for _, a := range tc.args {
				if a == "D" {
					a = dir
				}
				args = append(args, a)
			}
			_, _, err := run(t, args...)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
			var msg bytes.Buffer
			if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), `"siftbatch cluster-certs --help"`) {
				t.Fatalf("exit %d, %q", code, msg.String())
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("cluster-certs made %s before refusing", dir)
			}
		})
	}

	t.Run("files exist", func(t *testing.T) {
		dir := t.TempDir()
		if _, _, err := run(t, "cluster-certs", "--dir", dir, "--nodes", "n1,n2"); err != nil {
			t.Fatal(err)
		}
		before := map[string][]byte{}
		for _, f := range []string{"ca.crt", "ca.key", "n1.crt", "n1.key", "n2.crt", "n2.key"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			before[f] = b
		}
		// n3 is new, but the CA and n1 are there: nothing is written.
		_, _, err := run(t, "cluster-certs", "--dir", dir, "--nodes", "n3,n1")
		var msg bytes.Buffer
		if code := report(err, &msg); code != exitError || !strings.Contains(msg.String(), "ca.crt exists") || !strings.Contains(msg.String(), "never overwrites") {
			t.Fatalf("exit %d, %q: want 1 and a message that names the file", code, msg.String())
		}
		for f, b := range before {
			if now, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !bytes.Equal(now, b) {
				t.Errorf("%s changed (%v)", f, err)
			}
		}
		for _, f := range []string{"n3.crt", "n3.key"} {
			if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s written beside the old files", f)
			}
		}
	})
}

// handshake runs a TLS handshake between a node dialling with client and
// one answering with server, over an in-memory connection; it returns the
// client's error, else the server's.
func handshake(client, server *clustertls.Config) error {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	serr := make(chan error, 1)
	go func() {
		ts := tls.Server(s, server.Server())
		err := ts.Handshake()
		_ = ts.Close()
		serr <- err
	}()
	tc := tls.Client(c, client.Client())
	cerr := tc.Handshake()
	if cerr == nil {
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake has returned; a read sees its refusal.
		_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, cerr = tc.Read(make([]byte, 1))
		if errors.Is(cerr, io.EOF) {
			cerr = nil
		}
	}
	_ = c.Close()
	if err := <-serr; cerr == nil {
		return err
	}
	return cerr
}

// TestClusterCerts_RotationWithCABundle follows the change of CA that
// docs/CLUSTER.md gives, with two runs of cluster-certs: a --cluster-ca
// file holding the old and the new CA is accepted, and with it a node on
// a certificate of either CA accepts and is accepted by the others, so the
// nodes move one by one; a node that trusts only the old CA refuses a
// certificate of the new one (the bundle must be everywhere first).
func TestClusterCerts_RotationWithCABundle(t *testing.T) {
	t.Parallel()
	old, next := filepath.Join(t.TempDir(), "old"), filepath.Join(t.TempDir(), "new")
	for _, d := range []string{old, next} {
		if _, _, err := run(t, "cluster-certs", "--dir", d, "--nodes", "n1,n2"); err != nil {
			t.Fatal(err)
		}
	}
	var bundle []byte
	for _, d := range []string{old, next} {
		b, err := os.ReadFile(filepath.Join(d, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	bundleFile := filepath.Join(t.TempDir(), "ca-bundle.crt")
	if err := os.WriteFile(bundleFile, bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(ca, certs, node string) *clustertls.Config {
		t.Helper()
		c := clusterflags.Flags{Node: node, CA: ca, Cert: filepath.Join(certs, node+".crt"), Key: filepath.Join(certs, node+".key")}
		conf, err := c.LoadTLS()
		if err != nil {
			t.Fatalf("%s on %s with CA %s: %v", node, certs, ca, err)
		}
		return conf
	}
	// Midway: n1 is on the new certificate, n2 still on the old; both
	// trust the bundle.
	n1 := load(bundleFile, next, "n1")
	n2 := load(bundleFile, old, "n2")
	for _, pair := range [][2]*clustertls.Config{{n1, n2}, {n2, n1}} {
		if err := handshake(pair[0], pair[1]); err != nil {
			t.Errorf("%s dialling %s, both trusting the bundle: %v", pair[0].Node(), pair[1].Node(), err)
		}
	}
	// A node that still trusts the old CA only refuses n1's new
	// certificate, both ways.
	oldOnly := load(filepath.Join(old, "ca.crt"), old, "n2")
	if err := handshake(n1, oldOnly); err == nil {
		t.Error("a node trusting the old CA only accepted a client certificate of the new one")
	}
	if err := handshake(oldOnly, n1); err == nil {
		t.Error("a node trusting the old CA only accepted a server certificate of the new one")
	}
	// The end: the new CA alone, every node on its new certificate.
	if err := handshake(load(filepath.Join(next, "ca.crt"), next, "n1"), load(filepath.Join(next, "ca.crt"), next, "n2")); err != nil {
		t.Errorf("after the change: %v", err)
	}
}
