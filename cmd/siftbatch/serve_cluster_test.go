package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clustertls"
	"github.com/sift/batch/engine/enginetest/loopback"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// runMainEnv, set in a child process of the test binary, makes it the
// siftbatch command itself: main with the child's arguments.
const runMainEnv = "SIFTBATCH_TEST_MAIN"

// Keys of the cluster test; long and unique, so that a search of the logs
// for them cannot miss or hit by chance.
const (
	clusterAlice = "alice-c1u5t3r-8e2f0a7d4b"
	clusterBob   = "bob-c1u5t3r-3d9a6c1e5f"
)

// TestServe_ClusterFlags: the cluster flags are checked before anything
// starts: a mistake is a usage error (exit 2) that names the flag, and
// creates nothing.
func TestServe_ClusterFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	auto := []string{"--cluster", "c", "--node", "n1", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "127.0.0.1:7201"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"node alone", []string{"--node", "n1"}, "--node needs --cluster NAME (cluster mode is off without it)"},
		{"peers alone", []string{"--peers", "127.0.0.1:7201"}, "--peers needs --cluster NAME"},
		{"provider alone", []string{"--cluster-provider", "k8s"}, "--cluster-provider needs --cluster NAME"},
		{"advertise alone", []string{"--advertise-addr", "10.0.0.1:7101"}, "--advertise-addr needs --cluster NAME"},
		{"empty cluster", []string{"--cluster", "", "--cluster-addr", "127.0.0.1:7101"}, `--cluster must name the cluster (got "")`},
		{"empty node", []string{"--cluster", "c", "--node", "", "--cluster-addr", "127.0.0.1:7101"}, `--node must name this node (got ""`},
		{"provider", []string{"--cluster", "c", "--cluster-provider", "consul", "--cluster-addr", "127.0.0.1:7101"}, `--cluster-provider must be automanaged or k8s (got "consul")`},
		{"no cluster-addr", []string{"--cluster", "c"}, "--cluster needs --cluster-addr HOST:PORT"},
		{"cluster-addr", []string{"--cluster", "c", "--cluster-addr", "nowhere"}, `--cluster-addr "nowhere" is not HOST:PORT with a port from 0 to 65535 (0: a free one, reported on stdout)`},
		{"cluster-addr port 0: a free one, then the next check", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:0"}, "--cluster-provider automanaged needs --manage-addr"},
		{"cluster-addr and --addr both port 0: no clash", []string{"--addr", "127.0.0.1:0", "--cluster", "c", "--cluster-addr", "127.0.0.1:0"}, "--cluster-provider automanaged needs --manage-addr"},
		{"unspecified", []string{"--cluster", "c", "--cluster-addr", "0.0.0.0:7101"}, `--cluster-addr "0.0.0.0:7101" cannot be advertised to the other nodes: give --advertise-addr`},
		{"no host", []string{"--cluster", "c", "--cluster-addr", ":7101"}, `--cluster-addr ":7101" cannot be advertised`},
		{"advertise", []string{"--cluster", "c", "--cluster-addr", "0.0.0.0:7101", "--advertise-addr", "10.0.0.1"}, `--advertise-addr "10.0.0.1" is not HOST:PORT`},
		{"same port as --addr", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:18080"}, "--cluster-addr and --addr need different ports (both are 18080)"},
		{"no manage-addr", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:7101", "--peers", "127.0.0.1:7201"}, "--cluster-provider automanaged needs --manage-addr HOST:PORT and --peers"},
		{"no peers", auto, "--cluster-provider automanaged needs --manage-addr HOST:PORT and --peers"},
		{"manage-addr", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "7201", "--peers", "127.0.0.1:7201"}, `--manage-addr "7201" is not HOST:PORT`},
		{"manage port is cluster port", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "127.0.0.1:7101", "--peers", "127.0.0.1:7101"}, "--manage-addr and --cluster-addr need different ports (both are 7101)"},
		{"bad peer", append(slices.Clip(auto), "--peers", "127.0.0.1:7201,127.0.0.1"), `--peers: "127.0.0.1" is not HOST:PORT`},
		{"peer without host", append(slices.Clip(auto), "--peers", "127.0.0.1:7201,:7202"), `--peers: ":7202" is not HOST:PORT with a host`},
		{"self not a peer", append(slices.Clip(auto), "--peers", "127.0.0.1:7202,127.0.0.1:7203"), "--peers must include this node's --manage-addr 127.0.0.1:7201"},
		{"k8s with peers", []string{"--cluster", "c", "--cluster-provider", "k8s", "--cluster-addr", "127.0.0.1:7101", "--peers", "127.0.0.1:7201"}, "--peers is for --cluster-provider automanaged"},
		{"k8s with manage-addr", []string{"--cluster", "c", "--cluster-provider", "k8s", "--cluster-addr", "127.0.0.1:7101", "--manage-addr", "127.0.0.1:7201"}, "--manage-addr is for --cluster-provider automanaged"},
		{"ca alone", []string{"--cluster-ca", "ca.crt"}, "--cluster-ca needs --cluster NAME"},
		{"cert alone", []string{"--cluster-cert", "n1.crt"}, "--cluster-cert needs --cluster NAME"},
		{"key alone", []string{"--cluster-key", "n1.key"}, "--cluster-key needs --cluster NAME"},
		{"insecure alone", []string{"--cluster-insecure"}, "--cluster-insecure needs --cluster NAME"},
		{"no TLS", append(slices.Clip(auto), "--peers", "127.0.0.1:7201"), `--cluster needs --cluster-ca FILE, --cluster-cert FILE and --cluster-key FILE: cluster traffic is mutually authenticated and encrypted (make the files with "siftbatch cluster-certs --dir DIR --nodes n1,...")`},
		{"no TLS, k8s", []string{"--cluster", "c", "--cluster-provider", "k8s", "--cluster-addr", "127.0.0.1:7101"}, "--cluster needs --cluster-ca FILE, --cluster-cert FILE and --cluster-key FILE"},
		{"no TLS says insecure", append(slices.Clip(auto), "--peers", "127.0.0.1:7201"), "--cluster-insecure runs without them, in plaintext"},
		{"TLS and insecure", append(slices.Clip(auto), "--peers", "127.0.0.1:7201", "--cluster-insecure", "--cluster-ca", "ca.crt", "--cluster-cert", "n1.crt", "--cluster-key", "n1.key"), "--cluster-insecure and --cluster-ca exclude each other"},
		{"key and insecure", append(slices.Clip(auto), "--peers", "127.0.0.1:7201", "--cluster-key", "n1.key", "--cluster-insecure"), "--cluster-insecure and --cluster-key exclude each other"},
		{"no key", append(slices.Clip(auto), "--peers", "127.0.0.1:7201", "--cluster-ca", "ca.crt", "--cluster-cert", "n1.crt"), "--cluster-key FILE is missing"},
		{"no cert", append(slices.Clip(auto), "--peers", "127.0.0.1:7201", "--cluster-ca", "ca.crt", "--cluster-key", "n1.key"), "--cluster-cert FILE is missing"},
		{"no ca", append(slices.Clip(auto), "--peers", "127.0.0.1:7201", "--cluster-cert", "n1.crt", "--cluster-key", "n1.key"), "--cluster-ca FILE is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--keys", keys, "--data", data, "--addr", "127.0.0.1:18080"}, tc.args...)
			_, _, err := run(t, args...)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
			var msg bytes.Buffer
			if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), `"siftbatch serve --help"`) {
				t.Fatalf("exit %d, %q", code, msg.String())
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("serve created --data before refusing its flags")
			}
		})
	}
}

// testCertNodes are the nodes testClusterCerts has certificates for:
// every --node of the tests that start cluster processes.
var testCertNodes = []string{"n1", "n2", "n3", "holder", "forwarder"}

// testCerts is the directory of the test binary's cluster certificates,
// made once (removeTestCerts removes it at the end of TestMain).
var testCerts struct {
	once sync.Once
	dir  string
	err  error
}

// testClusterCerts returns a directory of cluster certificates for
// testCertNodes, made by `siftbatch cluster-certs` once per test binary.
func testClusterCerts(t testing.TB) string {
	t.Helper()
	testCerts.once.Do(func() {
		dir, err := testkit.RunDir("siftbatch-test-certs")
		if err != nil {
			testCerts.err = err
			return
		}
		testCerts.dir = dir
		certs := filepath.Join(dir, "certs")
		testCerts.err = Run(context.Background(), []string{"cluster-certs", "--dir", certs, "--nodes", strings.Join(testCertNodes, ",")}, io.Discard, io.Discard)
	})
	if testCerts.err != nil {
		t.Fatalf("cluster-certs: %v", testCerts.err)
	}
	return filepath.Join(testCerts.dir, "certs")
}

// removeTestCerts removes testClusterCerts' directory, if it was made.
func removeTestCerts() {
	if testCerts.dir != "" {
		_ = os.RemoveAll(testCerts.dir)
	}
}

// clusterTLSArgs are serve's TLS flags for node, with testClusterCerts'
// files.
func clusterTLSArgs(t testing.TB, node string) []string {
	t.Helper()
	dir := testClusterCerts(t)
	return []string{"--cluster-ca", filepath.Join(dir, "ca.crt"),
		"--cluster-cert", filepath.Join(dir, node+".crt"), "--cluster-key", filepath.Join(dir, node+".key")}
}

// TestServe_ClusterTLSFiles: serve reads the TLS files before anything
// starts, and refuses a certificate that does not name --node, one of
// another CA, a key of another certificate and a missing file, with an
// error that names the flag; no store is created.
func TestServe_ClusterTLSFiles(t *testing.T) {
	t.Parallel()
	certs := testClusterCerts(t)
	other := filepath.Join(t.TempDir(), "other")
	if _, _, err := run(t, "cluster-certs", "--dir", other, "--nodes", "n1"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	file := func(d, name string) string { return filepath.Join(d, name) }
	for _, tc := range []struct {
		name          string
		ca, cert, key string
		want1, want2  string
	}{
		{"another node's certificate", file(certs, "ca.crt"), file(certs, "n2.crt"), file(certs, "n2.key"),
			`names node "n2", not --node "n1"`, "siftbatch cluster-certs --nodes n1,..."},
		{"another CA", file(certs, "ca.crt"), file(other, "n1.crt"), file(other, "n1.key"),
			"this node's certificate: verify certificate", "--cluster-ca, --cluster-cert, --cluster-key"},
		{"another certificate's key", file(certs, "ca.crt"), file(certs, "n1.crt"), file(certs, "n2.key"),
			"private key does not match public key", "--cluster-ca, --cluster-cert, --cluster-key"},
		{"no CA file", file(certs, "nope.crt"), file(certs, "n1.crt"), file(certs, "n1.key"),
			"CA: open", "no such file"},
		{"a key for a CA", file(certs, "n1.key"), file(certs, "n1.crt"), file(certs, "n1.key"),
			"no CA certificate in the CA file", "--cluster-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// serve refuses the files before it binds the manage address:
			// a held address that never listens stands for it.
			manage := testkit.RefusedAddr(t)
			args := []string{"serve", "--keys", keys, "--data", data, "--addr", "127.0.0.1:0",
				"--cluster", "c", "--node", "n1",
				"--cluster-addr", "127.0.0.1:0", "--manage-addr", manage,
				"--peers", manage,
				"--cluster-ca", tc.ca, "--cluster-cert", tc.cert, "--cluster-key", tc.key}
			_, _, err := run(t, args...)
			var msg bytes.Buffer
			if code := report(err, &msg); code != exitError || !strings.Contains(msg.String(), tc.want1) || !strings.Contains(msg.String(), tc.want2) {
				t.Fatalf("exit %d, %q: want 1, %q and %q", code, msg.String(), tc.want1, tc.want2)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("serve created --data before refusing its certificate")
			}
		})
	}
}

// clusterNode is one `siftbatch serve --cluster` process: this test binary
// run as the command.
type clusterNode struct {
	name   string
	base   string // http://127.0.0.1:PORT
	cmd    *exec.Cmd
	stdout *testkit.SyncBuffer // the listening lines, and the automanaged provider's echo banner
	stderr *testkit.SyncBuffer
	exited chan struct{} // closed once the process has exited and err is set
	err    error
}

// nodePorts holds the ports of n `serve --cluster` nodes for the test:
// api[i] (--addr) and manage[i] (--manage-addr) of node i, handed to each
// of its processes as listening sockets (startClusterNode). A node's
// cluster port is its own pick (--cluster-addr 127.0.0.1:0: protoactor's
// remote binds it itself), read from its output ([clusterNode.clusterAddr]).
func nodePorts(t testing.TB, n int) (api, manage []*loopback.Port) {
	t.Helper()
	held := testkit.HeldPorts(t, 2*n)
	return held[:n], held[n:]
}

// addrs returns the addresses of ports.
func addrs(ports []*loopback.Port) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = p.Addr()
	}
	return out
}

// startClusterNode starts serve with args as a child process, handed a
// listening socket on each of held (systemd's socket activation: serve
// listens on the one of its --addr, --manage-addr); base is its API's
// URL. The test's cleanup stops it (SIGTERM, then SIGKILL) and waits for
// it.
func startClusterNode(t testing.TB, name, base string, held []*loopback.Port, args ...string) *clusterNode {
	t.Helper()
	n := &clusterNode{name: name, base: base, stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	var files []*os.File
	for _, p := range held {
		f, err := p.Listen()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	n.cmd = loopback.Command(files, os.Args[0], append([]string{"serve"}, args...)...)
	n.cmd.Env = append(append(n.cmd.Env, runMainEnv+"=1"), clitest.Env()...) // protoactor-go's race suppressions
	n.cmd.Stdout = n.stdout
	n.cmd.Stderr = n.stderr
	dieWithParent(n.cmd) // a test binary killed (its -timeout) leaves no serve behind
	err := n.cmd.Start()
	for _, f := range files {
		_ = f.Close() // the child has its own
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		if !n.stop(testkit.Deadline) {
			t.Errorf("%s did not stop on SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, n.stderr.String())
		}
	})
	return n
}

// clusterAddr waits until the node has said where its cluster port is
// ("siftbatch serve: cluster node NAME at HOST:PORT", once it has joined)
// and returns that address.
func (n *clusterNode) clusterAddr(t testing.TB) string {
	t.Helper()
	prefix := "siftbatch serve: cluster node " + n.name + " at "
	var addr string
	testkit.WaitFor(t, n.name+" to say its cluster address", func() bool {
		for line := range strings.Lines(n.stdout.String()) {
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				addr = a
				return true
			}
		}
		select {
		case <-n.exited:
			t.Fatalf("%s exited (%v):\n%s", n.name, n.err, n.stderr.String())
		default:
		}
		return false
	})
	return addr
}

// stop sends SIGTERM and waits for the process to exit, at most limit; then
// it kills it. False if it had to be killed.
func (n *clusterNode) stop(limit time.Duration) bool {
	select {
	case <-n.exited:
		return true
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
		return true
	case <-time.After(limit):
		_ = n.cmd.Process.Kill()
		<-n.exited
		return false
	}
}

// TestServe_Cluster runs three `siftbatch serve --cluster` processes on
// loopback, found through the automanaged provider, speaking mutual TLS with
// the certificates of `siftbatch cluster-certs`: a job submitted to one
// is read, waited for and cancelled through the others, with owner
// isolation on every node; the list on any node holds the caller's jobs of
// every node; a node that stops answers 503 "node unavailable" for its
// jobs, and the list names it. No log line holds a key, or a host or path
// of a fetched page.
func TestServe_Cluster(t *testing.T) {
	t.Parallel()
	testkit.Long(t)
	start := time.Now()
	release := make(chan struct{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/p-hold" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	t.Cleanup(site.Close)
	t.Cleanup(func() { close(release) }) // before site.Close: it waits for held pages
	// The fetched pages are named localhost: no node's address is.
	sitePort := site.URL[strings.LastIndex(site.URL, ":")+1:]
	page := func(p string) string { return "http://localhost:" + sitePort + "/p-" + p }

	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("alice "+clusterAlice+"\nbob "+clusterBob+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	apis, manages := nodePorts(t, 3)
	peers := addrs(manages)
	nodes := make([]*clusterNode, 3)
	for i := range nodes {
		name := fmt.Sprintf("n%d", i+1)
		api := apis[i].Addr()
		args := []string{"--keys", keys, "--data", filepath.Join(dir, name), "--addr", api, "--allow-private", "--log-level", "debug",
			"--jobs-per-caller", "4",
			"--cluster", "siftbatch-test", "--node", name,
			"--cluster-addr", "127.0.0.1:0",
			"--manage-addr", peers[i], "--peers", strings.Join(peers, ",")}
		nodes[i] = startClusterNode(t, name, "http://"+api, []*loopback.Port{apis[i], manages[i]}, append(args, clusterTLSArgs(t, name)...)...)
	}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport, Timeout: 40 * time.Second}
	do := func(n *clusterNode, method, path, key, body string) response {
		t.Helper()
		req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return send(t, client, req)
	}
	submit := func(n *clusterNode, key string, urls ...string) string {
		t.Helper()
		r := do(n, http.MethodPost, "/v1/batch", key, targetsBody(urls...))
		wantCode(t, r, http.StatusAccepted)
		return r.json(t)["id"].(string)
	}
	// ended waits, on the job's own node, until the job has ended.
	ended := func(n *clusterNode, key, id string) {
		t.Helper()
		r := do(n, http.MethodGet, "/v1/batch/"+id+"?wait=20s", key, "")
		if st := r.json(t)["status"]; r.code != http.StatusOK || st == "queued" || st == "running" {
			t.Fatalf("job %s on %s: %d %s", id, n.name, r.code, r.body)
		}
	}
	// poll checks cond every 50 ms until it holds, failing after limit, or
	// as soon as a node has exited.
	poll := func(limit time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.NewTimer(limit)
		defer deadline.Stop()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			for _, n := range nodes {
				select {
				case <-n.exited:
					if n != n3 || n.cmd.ProcessState.ExitCode() != 0 {
						t.Fatalf("%s exited (%v) while waiting for %s", n.name, n.err, what)
					}
				default:
				}
			}
			select {
			case <-deadline.C:
				t.Fatalf("timed out after %s waiting for %s", limit, what)
			case <-tick.C:
			}
		}
	}

	// Each node serves; then each knows the others: a job of each, read
	// through each of the others, answers 200 (before, 404: an id of a
	// node not met yet is answered as a job of its own).
	for _, n := range nodes {
		poll(30*time.Second, n.name+" to serve", func() bool {
			resp, err := client.Get(n.base + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	ready := make([]string, 3)
	for i, n := range nodes {
		ready[i] = submit(n, clusterAlice, page("ready-"+n.name))
		ended(n, clusterAlice, ready[i])
	}
	poll(20*time.Second, "the cluster to form", func() bool {
		for i := range nodes {
			for j, n := range nodes {
				if i != j && do(n, http.MethodGet, "/v1/batch/"+ready[i], clusterAlice, "").code != http.StatusOK {
					return false
				}
			}
		}
		return true
	})
	t.Logf("cluster formed after %s", time.Since(start).Round(time.Millisecond))

	// The cluster port takes only a client certificate of the cluster's
	// CA: a client with none, or with one of another CA, is refused at the
	// handshake.
	other := filepath.Join(dir, "other-ca")
	if _, _, err := run(t, "cluster-certs", "--dir", other, "--nodes", "n1"); err != nil {
		t.Fatal(err)
	}
	otherPair, err := tls.LoadX509KeyPair(filepath.Join(other, "n1.crt"), filepath.Join(other, "n1.key"))
	if err != nil {
		t.Fatal(err)
	}
	for what, certs := range map[string][]tls.Certificate{"no certificate": nil, "another CA's": {otherPair}} {
		conf := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: certs, InsecureSkipVerify: true} // the server is not the point
		err := refusedTLS(n1.clusterAddr(t), conf)
		if err == nil {
			t.Errorf("n1's cluster port accepted a client with %s", what)
		}
		t.Logf("a client with %s: %v", what, err)
	}

	// A peer's call that panics in protoactor's remote (ListProcesses is
	// panic("implement me")), from a client with n2's certificate: the
	// call fails, n1 counts it in its metrics and goes on serving.
	certs := testClusterCerts(t)
	n2TLS, err := clustertls.Load(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "n2.crt"), filepath.Join(certs, "n2.key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+n1.clusterAddr(t), grpc.WithTransportCredentials(credentials.NewTLS(n2TLS.Client())))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err = remote.NewRemotingClient(conn).ListProcesses(ctx, &remote.ListProcessesRequest{})
	cancel()
	_ = conn.Close()
	if status.Code(err) != codes.Internal {
		t.Errorf("ListProcesses on n1: %v, want codes.Internal (the panic caught)", err)
	}
	if r := do(n1, http.MethodGet, "/metrics", "", ""); r.code != http.StatusOK || !strings.Contains(string(r.body), "\nsiftbatch_cluster_peer_panics_total 1\n") {
		t.Errorf("n1's /metrics after a peer's panic: %d, want siftbatch_cluster_peer_panics_total 1:\n%s", r.code, r.body)
	}
	if r := do(n2, http.MethodGet, "/metrics", "", ""); !strings.Contains(string(r.body), "\nsiftbatch_cluster_peer_panics_total 0\n") ||
		!strings.Contains(string(r.body), "\nsiftbatch_cluster_peer_refusals_total ") {
		t.Errorf("n2's /metrics: want siftbatch_cluster_peer_panics_total 0 and the refusals:\n%s", r.body)
	}
	wantCode(t, do(n1, http.MethodGet, "/v1/batch/"+ready[0], clusterAlice, ""), http.StatusOK)

	// A job of n1, read through n2 and n3: byte for byte n1's answers.
	a := submit(n1, clusterAlice, page("a"), page("b"))
	if !strings.HasPrefix(a, tagHex("n1")) {
		t.Fatalf("id %s does not begin with n1's tag %s", a, tagHex("n1"))
	}
	ended(n1, clusterAlice, a)
	reads := []string{"/v1/batch/" + a, "/v1/batch/" + a + "?results=1", "/v1/batch/" + a + "/0", "/v1/batch/" + a + "/1", "/v1/batch/" + a + "/7", "/v1/batch/" + a + "?wait=5s"}
	for _, path := range reads {
		want := do(n1, http.MethodGet, path, clusterAlice, "")
		for _, n := range []*clusterNode{n2, n3} {
			if got := do(n, http.MethodGet, path, clusterAlice, ""); got.code != want.code || !bytes.Equal(got.body, want.body) {
				t.Errorf("GET %s on %s: %d %s; on n1: %d %s", path, n.name, got.code, got.body, want.code, want.body)
			}
		}
	}
	if r := do(n3, http.MethodGet, "/v1/batch/"+a+"/1", clusterAlice, ""); r.code != http.StatusOK || !strings.Contains(string(r.body), `"content":"page /p-b"`) {
		t.Fatalf("target 1 through n3: %d %s", r.code, r.body)
	}

	// A job of n1 waited for through n2 and cancelled through n3.
	b := submit(n1, clusterAlice, page("hold"), page("c"))
	if r := do(n2, http.MethodGet, "/v1/batch/"+b+"?wait=1s", clusterAlice, ""); r.code != http.StatusOK || r.json(t)["status"] != "running" && r.json(t)["status"] != "queued" {
		t.Fatalf("a wait of 1s through n2: %d %s", r.code, r.body)
	}
	waited := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, n2.base+"/v1/batch/"+b+"?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+clusterAlice)
		resp, err := client.Do(req)
		if err != nil {
			waited <- response{body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		waited <- response{code: resp.StatusCode, body: body}
	}()
	// Another caller: 404 on every node, as for an id no one has.
	none := do(n1, http.MethodGet, "/v1/batch/"+missingID, clusterBob, "")
	wantCode(t, none, http.StatusNotFound)
	for _, n := range nodes {
		for _, id := range []string{a, b} {
			for _, path := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "?results=1", "/v1/batch/" + id + "/0", "/v1/batch/" + id + "?wait=1s"} {
				if r := do(n, http.MethodGet, path, clusterBob, ""); r.code != http.StatusNotFound || !bytes.Equal(r.body, none.body) {
					t.Errorf("bob GET %s on %s: %d %s", path, n.name, r.code, r.body)
				}
			}
			if r := do(n, http.MethodDelete, "/v1/batch/"+id, clusterBob, ""); r.code != http.StatusNotFound || !bytes.Equal(r.body, none.body) {
				t.Errorf("bob DELETE %s on %s: %d %s", id, n.name, r.code, r.body)
			}
		}
	}
	if r := do(n3, http.MethodDelete, "/v1/batch/"+b, clusterAlice, ""); r.code != http.StatusOK || !strings.Contains(string(r.body), `"cancelled":true`) {
		t.Fatalf("cancel through n3: %d %s", r.code, r.body)
	}
	if r := testkit.Recv(t, waited); r.code != http.StatusOK || !strings.Contains(string(r.body), `"status":"cancelled"`) {
		t.Fatalf("the wait through n2: %d %s", r.code, r.body)
	}
	if r := do(n2, http.MethodDelete, "/v1/batch/"+b, clusterAlice, ""); r.code != http.StatusConflict {
		t.Fatalf("cancel again through n2: %d %s, want 409", r.code, r.body)
	}

	// The list on n3 holds alice's jobs of n1 and n2, and none of bob's.
	c := submit(n2, clusterAlice, page("d"))
	ended(n2, clusterAlice, c)
	bobs := submit(n2, clusterBob, page("e"))
	ended(n2, clusterBob, bobs)
	list := func(n *clusterNode, key string) (ids []string, unavailable []string) {
		t.Helper()
		r := do(n, http.MethodGet, "/v1/batch?limit=100", key, "")
		wantCode(t, r, http.StatusOK)
		var out struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
			Unavailable []string `json:"unavailable_nodes"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		for _, j := range out.Jobs {
			ids = append(ids, j.ID)
		}
		return ids, out.Unavailable
	}
	ids, unavailable := list(n3, clusterAlice)
	for _, id := range append([]string{a, b, c}, ready...) {
		if !slices.Contains(ids, id) {
			t.Errorf("the list on n3 lacks %s: %v", id, ids)
		}
	}
	if slices.Contains(ids, bobs) || len(unavailable) != 0 {
		t.Errorf("the list on n3: %v, unavailable %v", ids, unavailable)
	}
	if ids, _ := list(n3, clusterBob); !slices.Equal(ids, []string{bobs}) {
		t.Errorf("bob's list on n3: %v, want [%s]", ids, bobs)
	}

	// The dashboard of n3 (serve gives it the node), alice signed in:
	// her jobs of every node listed, none of bob's; one of n2's opens,
	// read from n2.
	noRedirect := &http.Client{Transport: transport, Timeout: 40 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn, err := http.NewRequest(http.MethodPost, n3.base+"/ui/signin", strings.NewReader(url.Values{"key": {clusterAlice}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	signIn.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	signedIn := send(t, noRedirect, signIn)
	cookies := (&http.Response{Header: signedIn.header}).Cookies()
	if signedIn.code != http.StatusSeeOther || len(cookies) == 0 {
		t.Fatalf("sign in to n3's dashboard: %d %s", signedIn.code, signedIn.body)
	}
	ui := func(path string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, n3.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(cookies[0])
		return send(t, noRedirect, req)
	}
	jobsPage := ui("/ui/jobs")
	for _, id := range append([]string{a, b, c}, ready...) {
		if !bytes.Contains(jobsPage.body, []byte(`href="/ui/jobs/`+id+`"`)) {
			t.Errorf("n3's dashboard does not list alice's job %s", id)
		}
	}
	if jobsPage.code != http.StatusOK || bytes.Contains(jobsPage.body, []byte(bobs)) {
		t.Errorf("n3's dashboard jobs page for alice: %d, bob's job listed: %v", jobsPage.code, bytes.Contains(jobsPage.body, []byte(bobs)))
	}
	if r := ui("/ui/jobs/" + c); r.code != http.StatusOK || !bytes.Contains(r.body, []byte("held by node n2")) {
		t.Errorf("n2's job on n3's dashboard: %d %s", r.code, r.body)
	}

	// n3 stops: its jobs answer 503 "node unavailable" on n1 and n2, and
	// the list on n1 names it.
	d := submit(n3, clusterAlice, page("f"))
	ended(n3, clusterAlice, d)
	wantCode(t, do(n1, http.MethodGet, "/v1/batch/"+d, clusterAlice, ""), http.StatusOK)
	stopped := time.Now()
	if !n3.stop(20 * time.Second) {
		t.Fatal("n3 did not stop on SIGTERM")
	}
	if code := n3.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(n3.stderr.String(), "msg=stopped") {
		t.Fatalf("n3 exited %d:\n%s", code, n3.stderr.String())
	}
	for _, n := range []*clusterNode{n1, n2} {
		var last response
		poll(15*time.Second, "n3's job to be unavailable through "+n.name, func() bool {
			last = do(n, http.MethodGet, "/v1/batch/"+d, clusterAlice, "")
			return last.code == http.StatusServiceUnavailable
		})
		if last.header.Get("Retry-After") == "" || last.json(t)["error"] != "node unavailable" || last.json(t)["hint"] == "" {
			t.Errorf("n3's job through %s: %d %v %s", n.name, last.code, last.header, last.body)
		}
	}
	poll(15*time.Second, "the list on n1 to name n3", func() bool {
		_, unavailable := list(n1, clusterAlice)
		return slices.Equal(unavailable, []string{"n3"})
	})
	t.Logf("n3's jobs unavailable %s after its SIGTERM", time.Since(stopped).Round(time.Millisecond))
	// Each survivor logs its members without n3 (servecmd/members.go).
	for _, n := range []*clusterNode{n1, n2} {
		poll(15*time.Second, n.name+" to log its members without n3", func() bool {
			return strings.Contains(n.stderr.String(), `msg="cluster members" count=2 nodes=n1,n2`)
		})
	}
	// n1's jobs still answer through n2.
	wantCode(t, do(n2, http.MethodGet, "/v1/batch/"+a, clusterAlice, ""), http.StatusOK)

	// Stop the others, then read every log whole.
	for _, n := range []*clusterNode{n1, n2} {
		if !n.stop(testkit.Deadline) {
			t.Fatalf("%s did not stop on SIGTERM", n.name)
		}
		if code := n.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%s exited %d:\n%s", n.name, code, n.stderr.String())
		}
	}
	for _, n := range nodes {
		l := n.stderr.String()
		for _, secret := range []string{clusterAlice, clusterBob, "localhost", ":" + sitePort, "/p-", "page "} {
			if strings.Contains(l, secret) {
				t.Errorf("%s's log holds %q:\n%s", n.name, secret, l)
			}
		}
		for _, want := range []string{"cluster node started", "cluster node stopped", "node=" + n.name, "cluster traffic is mutually authenticated and encrypted",
			`msg="cluster members" count=3 nodes=n1,n2,n3`} {
			if !strings.Contains(l, want) {
				t.Errorf("%s's log lacks %q:\n%s", n.name, want, l)
			}
		}
		if strings.Contains(l, "DATA RACE") {
			t.Errorf("%s: a data race:\n%s", n.name, l)
		}
	}
	t.Logf("the whole test: %s", time.Since(start).Round(time.Millisecond))
}

// refusedTLS dials addr with conf and reads: the error that ends it, the
// handshake's or the server's refusal (in TLS 1.3 the server checks the
// client's certificate after the client's handshake has returned); nil if
// the server accepted the client (it then waits for the client's first
// message, and the read times out).
func refusedTLS(addr string, conf *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a refusal comes at once; only an acceptance waits this long
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// tagHex is node's tag in hex, as job ids begin.
func tagHex(node string) string {
	return fmt.Sprintf("%x", cluster.Tag(node))
}

// listeners returns the TCP sockets process pid listens on: those of
// /proc/PID/net/tcp and tcp6 in state LISTEN whose inodes are among the
// process's open files. Linux only.
func listeners(t *testing.T, pid int) []netip.AddrPort {
	t.Helper()
	inodes := map[string]bool{}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var out []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			const stateListen = "0A"
			if len(f) < 10 || f[3] != stateListen || !inodes[f[9]] {
				continue
			}
			ap, err := parseProcNetAddr(f[1])
			if err != nil {
				t.Fatalf("/proc/%d/net/%s: %q: %v", pid, table, f[1], err)
			}
			out = append(out, ap)
		}
	}
	return out
}

// parseProcNetAddr parses a local address of /proc/net/tcp or tcp6: the IP
// in hex, as 32-bit words each in the host's byte order (little-endian
// here), a colon, the port in hex.
func parseProcNetAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, errors.New("no port")
	}
	raw, err := hex.DecodeString(h)
	if err != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", h)
	}
	for i := 0; i < len(raw); i += 4 { // each word little-endian
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", p)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// TestServe_ClusterListensOnlyWhereAsked runs one `serve --cluster`
// process given 127.0.0.1 for --addr, --cluster-addr and --manage-addr,
// and reads from /proc what it listens on: every listening socket is on
// 127.0.0.1 (none on 0.0.0.0 or ::). It runs with --cluster-insecure, which
// logs its warning at start.
func TestServe_ClusterListensOnlyWhereAsked(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/PID/net/tcp: Linux only")
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	// serve binds its API's and its cluster port itself (port 0, what it
	// picked read from its output); the manage port, which --peers must
	// name before serve starts, is handed to it (the manage endpoint's
	// own host is TestNode_ListensOnlyOnGivenHost's, in engine/cluster).
	_, manages := nodePorts(t, 1)
	manage := manages[0].Addr()
	n := startClusterNode(t, "n1", "", manages,
		"--keys", keys, "--data", filepath.Join(dir, "n1"), "--addr", "127.0.0.1:0",
		"--cluster", "siftbatch-listen", "--node", "n1", "--cluster-addr", "127.0.0.1:0",
		"--manage-addr", manage, "--peers", manage, "--cluster-insecure")
	cluster := netip.MustParseAddrPort(n.clusterAddr(t))
	testkit.WaitFor(t, "serve to say where it listens", func() bool {
		a, ok := strings.CutPrefix(strings.SplitN(n.stdout.String(), "\n", 2)[0], "siftbatch serve: listening on ")
		n.base = a
		return ok
	})
	ports := []uint16{netip.MustParseAddrPort(strings.TrimPrefix(n.base, "http://")).Port(), cluster.Port(), uint16(manages[0].Number())}
	client := &http.Client{Timeout: 5 * time.Second}
	// The node serves once it has joined; the provider serves its manage
	// port in a goroutine of its own: wait until all three ports listen.
	var got []netip.AddrPort
	testkit.WaitFor(t, fmt.Sprintf("serve to listen on all of %v and answer /healthz", ports), func() bool {
		select {
		case <-n.exited:
			t.Fatalf("serve exited (%v):\n%s", n.err, n.stderr.String())
		default:
		}
		got = listeners(t, n.cmd.Process.Pid)
		seen := map[uint16]bool{}
		for _, ap := range got {
			seen[ap.Port()] = true
		}
		if !seen[ports[0]] || !seen[ports[1]] || !seen[ports[2]] {
			return false
		}
		resp, err := client.Get(n.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	loopback := netip.MustParseAddr("127.0.0.1")
	for _, ap := range got {
		if ap.Addr() != loopback {
			t.Errorf("serve listens on %s: wider than the 127.0.0.1 it was given", ap)
		}
	}
	t.Logf("listening: %v", got)
	if !n.stop(20 * time.Second) {
		t.Fatal("serve did not stop on SIGTERM")
	}
	l := n.stderr.String()
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, l)
	}
	if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "cluster traffic is plaintext and unauthenticated (--cluster-insecure)") {
		t.Errorf("no warning that cluster traffic is plaintext:\n%s", l)
	}
}

// Keys of the kill test's callers; long and unique, so that a search of the
// logs for them cannot miss or hit by chance.
const (
	deathAnn = "ann-d3a7h-5c1e9b0f27" // her only live job is on the node killed
	deathBen = "ben-d3a7h-7a4f2d8e61" // a job held running on n1
	deathCat = "cat-d3a7h-2e8b6f0c93" // a job held running on n2
	deathDan = "dan-d3a7h-9f0c3a5b18" // a finished job on every node
)

// killLimit is how long after a node's kill -9 the test waits for the
// survivors to go on with their jobs, admit its callers again and answer
// its jobs 503 before it fails: a failure deadline, not the figure (about
// 2 s, one provider poll; BenchmarkServe_ClusterKillReadmit measures it,
// docs/CLUSTER.md gives it).
const killLimit = testkit.Deadline

// killFigures are the times TestServe_ClusterKillRestart and
// BenchmarkServe_ClusterKillReadmit measure.
type killFigures struct {
	first503 time.Duration // kill → the first 503 for one of its jobs on a survivor
	readmit  time.Duration // kill → its caller's POST admitted on a survivor
	window   time.Duration // kill → every check of the survivors passed
	longest  time.Duration // the longest API call between the kill and the end of window
	readable time.Duration // restart → its jobs readable through every node
}

// TestServe_ClusterKillRestart: three `serve --cluster` processes with one
// live job per caller, jobs of several callers on each (some held running);
// one is killed (SIGKILL). On the two others: their own
// jobs run to their end, the caller whose only live job was on the dead node
// is admitted again, the dead node's jobs answer 503 "node unavailable" with
// Retry-After to every method, the list names it, and every job stored on
// them is whole. Then it is restarted on its directory: once a member again
// its live job reads failed "restart" through every node, its finished job
// keeps its results, an idempotent resubmit of that job on another node
// returns it, and its caller may submit again. No log line holds a key, or
// the host or path of a fetched page.
func TestServe_ClusterKillRestart(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	f := killRestart(t, false)
	t.Logf("kill → first 503 %s, → its caller admitted again %s, → every check passed %s; the longest API call meanwhile %s; restart → its jobs readable through every node %s",
		f.first503.Round(time.Millisecond), f.readmit.Round(time.Millisecond), f.window.Round(time.Millisecond),
		f.longest.Round(time.Millisecond), f.readable.Round(time.Millisecond))
}

// BenchmarkServe_ClusterKillReadmit measures, over whole runs of
// TestServe_ClusterKillRestart's scenario, the time from a node's kill -9 to
// the first 503 for its jobs and to its caller's admission on a survivor,
// the longest API call in between, and the time from its restart to its
// jobs being readable through every node (each run ~10 s). The kill comes
// at a random point of the automanaged provider's 2 s poll (the scenario
// alone would put it at about the same point each run). It reports the
// means, and logs each run's figures:
//
//	go test -run '^$' -bench BenchmarkServe_ClusterKillReadmit -benchtime 5x -v ./cmd/siftbatch
func BenchmarkServe_ClusterKillReadmit(b *testing.B) {
	var sum killFigures
	for range b.N {
		f := killRestart(b, true)
		b.Logf("kill → 503 %s, → readmitted %s; longest call %s; restart → readable %s",
			f.first503.Round(time.Millisecond), f.readmit.Round(time.Millisecond), f.longest.Round(time.Millisecond), f.readable.Round(time.Millisecond))
		sum.first503 += f.first503
		sum.readmit += f.readmit
		sum.longest = max(sum.longest, f.longest)
		sum.readable += f.readable
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(sum.first503.Seconds()/n, "s-to-503")
	b.ReportMetric(sum.readmit.Seconds()/n, "s-to-readmit")
	b.ReportMetric(sum.longest.Seconds(), "s-longest-call")
	b.ReportMetric(sum.readable.Seconds()/n, "s-restart-to-readable")
}

// deathRig makes the API calls of killRestart, timing them.
type deathRig struct {
	tb     testing.TB
	client *http.Client
	page   func(string) string

	mu      sync.Mutex
	timing  bool          // between the kill and the end of the window
	longest time.Duration // the longest call while timing
}

// call does one API call; an error only if it got no answer.
func (r *deathRig) call(n *clusterNode, method, path, key, body string) (response, error) {
	req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s on %s: %w", method, path, n.name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	r.mu.Lock()
	if r.timing {
		r.longest = max(r.longest, took)
	}
	r.mu.Unlock()
	if err != nil {
		return response{}, fmt.Errorf("%s %s on %s: %w", method, path, n.name, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}, nil
}

// must is call, failing the test if no answer came.
func (r *deathRig) must(n *clusterNode, method, path, key, body string) response {
	r.tb.Helper()
	res, err := r.call(n, method, path, key, body)
	if err != nil {
		r.tb.Fatal(err)
	}
	return res
}

// submit posts a job of pages for key on n, asking again while the
// cluster cannot count the caller's jobs (503 "admission unavailable": the
// members change) or counts one that has just ended (429: a job's end
// reaches its caller's grain asynchronously); it fails on anything but
// 202.
func (r *deathRig) submit(n *clusterNode, key string, pages ...string) (id string, reused bool) {
	r.tb.Helper()
	urls := make([]string, len(pages))
	for i, p := range pages {
		urls[i] = r.page(p)
	}
	var res response
	err := poll(20*time.Second, func() (bool, error) {
		var err error
		res, err = r.call(n, http.MethodPost, "/v1/batch", key, targetsBody(urls...))
		return err != nil || res.code != http.StatusServiceUnavailable && res.code != http.StatusTooManyRequests, err
	})
	if err != nil || res.code != http.StatusAccepted {
		r.tb.Fatalf("submit on %s: %v %d %s", n.name, err, res.code, res.body)
	}
	var out struct {
		ID     string `json:"id"`
		Reused bool   `json:"reused"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		r.tb.Fatal(err)
	}
	return out.ID, out.Reused
}

// job reads job id through n (with its results), failing unless 200.
func (r *deathRig) job(n *clusterNode, key, id string) deathJob {
	r.tb.Helper()
	res := r.must(n, http.MethodGet, "/v1/batch/"+id+"?results=1", key, "")
	if res.code != http.StatusOK {
		r.tb.Fatalf("job %s through %s: %d %s", id, n.name, res.code, res.body)
	}
	var j deathJob
	if err := json.Unmarshal(res.body, &j); err != nil {
		r.tb.Fatal(err)
	}
	return j
}

// deathJob is the part of a job's answer killRestart checks.
type deathJob struct {
	Status  string `json:"status"`
	Error   string `json:"error"`
	Done    int    `json:"targets_done"`
	Targets []struct {
		Status string `json:"status"`
		Result *struct {
			Content string `json:"content"`
		} `json:"result"`
	} `json:"targets"`
}

// whole reports whether j is done with every target's content stored.
func (j deathJob) whole(n int) bool {
	if j.Status != "done" || len(j.Targets) != n {
		return false
	}
	for _, t := range j.Targets {
		if t.Status != "done" || t.Result == nil || !strings.HasPrefix(t.Result.Content, "page /p-") {
			return false
		}
	}
	return true
}

// list returns key's job ids and unavailable nodes through n.
func (r *deathRig) list(n *clusterNode, key string) (ids, unavailable []string, err error) {
	res, err := r.call(n, http.MethodGet, "/v1/batch?limit=100", key, "")
	if err != nil {
		return nil, nil, err
	}
	if res.code != http.StatusOK {
		return nil, nil, fmt.Errorf("list on %s: %d %s", n.name, res.code, res.body)
	}
	var out struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
		Unavailable []string `json:"unavailable_nodes"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return nil, nil, err
	}
	for _, j := range out.Jobs {
		ids = append(ids, j.ID)
	}
	return ids, out.Unavailable, nil
}

// poll calls cond every 20 ms until it holds or fails, at most limit.
func poll(limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		<-tick.C
	}
}

// annCandidates is how many callers ann0, ann1, … the kill test's keys
// file holds: grainOn picks among them once the nodes' cluster ports
// (their own picks) are known.
const annCandidates = 100

// grainOn returns the index of a caller annI whose grain protoactor's
// disthash places on the member at addr, of the members at members
// (HOST:PORT; its rendezvous hash of the caller's name and each member's
// address).
func grainOn(tb testing.TB, addr string, members []string) int {
	tb.Helper()
	var ms pacluster.Members
	for i, a := range members {
		ap := netip.MustParseAddrPort(a)
		ms = append(ms, &pacluster.Member{Host: ap.Addr().String(), Port: int32(ap.Port()), Id: fmt.Sprint(i), Kinds: []string{callerKind}})
	}
	rdv := pacluster.NewRendezvous()
	rdv.UpdateMembers(ms)
	for i := range annCandidates {
		if rdv.GetByClusterIdentity(&pacluster.ClusterIdentity{Identity: fmt.Sprintf("ann%d", i), Kind: callerKind}) == addr {
			return i
		}
	}
	tb.Fatalf("no caller's grain on %s", addr)
	return 0
}

// callerKind is engine/cluster's kind of the callers' grains.
const callerKind = "siftbatch-caller"

// unavailable503 reports whether res is 503 "node unavailable" with
// Retry-After.
func unavailable503(res response) bool {
	return res.code == http.StatusServiceUnavailable && res.header.Get("Retry-After") != "" &&
		strings.Contains(string(res.body), `"error":"node unavailable"`)
}

// killRestart runs the scenario of TestServe_ClusterKillRestart and
// returns its figures. jitter delays the kill by a random part of the
// automanaged provider's poll period.
func killRestart(tb testing.TB, jitter bool) killFigures {
	start := time.Now()
	release := make(chan struct{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/p-hold") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	tb.Cleanup(site.Close)
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	tb.Cleanup(releaseAll) // before site.Close: it waits for held pages
	// The fetched pages are named localhost: no node's address is.
	sitePort := site.URL[strings.LastIndex(site.URL, ":")+1:]

	dir := tb.TempDir()
	keys := filepath.Join(dir, "keys")
	// Ann's grain is on n3, the node killed: the hardest case for her
	// admission on a survivor (the grain must move, and its old place
	// holds up whoever asks it until it leaves). The nodes' cluster ports
	// are their own picks: the keys file holds candidates ann0, ann1, …,
	// each with her key and its number, and ann is one of them whose grain
	// is on n3, once the nodes have said where they are.
	var keyLines strings.Builder
	for i := range annCandidates {
		fmt.Fprintf(&keyLines, "ann%d %s-%d\n", i, deathAnn, i)
	}
	if err := os.WriteFile(keys, []byte(keyLines.String()+"ben "+deathBen+"\ncat "+deathCat+"\ndan "+deathDan+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	apis, manages := nodePorts(tb, 3)
	peers := addrs(manages)
	certs := testClusterCerts(tb)
	args := func(i int) (name, base string, held []*loopback.Port, args []string) {
		name = fmt.Sprintf("n%d", i+1)
		api := apis[i].Addr()
		return name, "http://" + api, []*loopback.Port{apis[i], manages[i]}, []string{"--keys", keys, "--data", filepath.Join(dir, name), "--addr", api,
			"--allow-private", "--log-level", "debug", "--jobs-per-caller", "1",
			"--cluster", "siftbatch-death", "--node", name,
			"--cluster-addr", "127.0.0.1:0",
			"--manage-addr", peers[i], "--peers", strings.Join(peers, ","),
			"--cluster-ca", filepath.Join(certs, "ca.crt"), "--cluster-cert", filepath.Join(certs, name+".crt"), "--cluster-key", filepath.Join(certs, name+".key")}
	}
	nodes := make([]*clusterNode, 3)
	for i := range nodes {
		name, base, held, a := args(i)
		nodes[i] = startClusterNode(tb, name, base, held, a...)
	}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	members := []string{n1.clusterAddr(tb), n2.clusterAddr(tb), n3.clusterAddr(tb)}
	annIdx := grainOn(tb, members[2], members)
	deathAnn := fmt.Sprintf("%s-%d", deathAnn, annIdx) // her key (a local: the constant is its prefix)
	procs := slices.Clone(nodes)                       // every process started, the restarted n3 too

	transport := &http.Transport{}
	tb.Cleanup(transport.CloseIdleConnections)
	r := &deathRig{tb: tb, client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
		page: func(p string) string { return "http://localhost:" + sitePort + "/p-" + p }}
	check := func(what string, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("%s: %v", what, err)
		}
	}
	// ended waits, on the job's own node, until the job has ended.
	ended := func(n *clusterNode, key, id string) deathJob {
		tb.Helper()
		var j deathJob
		check("job "+id+" to end on "+n.name, poll(20*time.Second, func() (bool, error) {
			res, err := r.call(n, http.MethodGet, "/v1/batch/"+id+"?wait=5s", key, "")
			if err != nil || res.code != http.StatusOK {
				return false, fmt.Errorf("%v %d %s", err, res.code, res.body)
			}
			j = r.job(n, key, id)
			return j.Status != "queued" && j.Status != "running", nil
		}))
		return j
	}
	// held waits until job id on n runs its second target, held by the site.
	held := func(n *clusterNode, key, id string) {
		tb.Helper()
		check("job "+id+" to be held on "+n.name, poll(20*time.Second, func() (bool, error) {
			j := r.job(n, key, id)
			return j.Status == "running" && j.Done == 1, nil
		}))
	}

	for _, n := range nodes {
		check(n.name+" to serve", poll(30*time.Second, func() (bool, error) {
			resp, err := r.client.Get(n.base + "/healthz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}))
	}
	// Dan's finished jobs, one on each node; the cluster has formed once
	// each reads through each of the others.
	dans := make([]string, 3)
	for i, n := range nodes {
		dans[i], _ = r.submit(n, deathDan, "dan-"+n.name+"-a", "dan-"+n.name+"-b")
		if j := ended(n, deathDan, dans[i]); !j.whole(2) {
			tb.Fatalf("dan's job on %s: %+v", n.name, j)
		}
	}
	check("the cluster to form", poll(30*time.Second, func() (bool, error) {
		for i := range nodes {
			for j, n := range nodes {
				if res, err := r.call(n, http.MethodGet, "/v1/batch/"+dans[i], deathDan, ""); i != j && (err != nil || res.code != http.StatusOK) {
					return false, nil
				}
			}
		}
		return true, nil
	}))
	tb.Logf("cluster formed after %s", time.Since(start).Round(time.Millisecond))

	// Live jobs held running: ann's on n3 (her only one), ben's on n1,
	// cat's on n2. Ann is at her cap on every node.
	a3, _ := r.submit(n3, deathAnn, "ann-1", "hold-ann")
	b1, _ := r.submit(n1, deathBen, "ben-1", "hold-ben")
	c2, _ := r.submit(n2, deathCat, "cat-1", "hold-cat")
	held(n3, deathAnn, a3)
	held(n1, deathBen, b1)
	held(n2, deathCat, c2)
	for _, n := range []*clusterNode{n1, n2} {
		if res := r.must(n, http.MethodPost, "/v1/batch", deathAnn, targetsBody(r.page("ann-2"))); res.code != http.StatusTooManyRequests {
			tb.Fatalf("ann at her cap, on %s: %d %s", n.name, res.code, res.body)
		}
	}

	// kill -9 n3.
	if jitter {
		<-time.After(rand.N(cluster.DefaultRefresh)) // a random phase of the provider's poll: no condition to wait on
	}
	r.mu.Lock()
	r.timing = true
	r.mu.Unlock()
	killed := time.Now()
	if err := n3.cmd.Process.Kill(); err != nil {
		tb.Fatal(err)
	}
	<-n3.exited
	releaseAll() // the survivors' held jobs go on
	var f killFigures
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 4)
		ann2 string
	)
	// Ann is admitted again on n1.
	wg.Go(func() {
		errs <- poll(killLimit, func() (bool, error) {
			res, err := r.call(n1, http.MethodPost, "/v1/batch", deathAnn, targetsBody(r.page("ann-2")))
			switch {
			case err != nil:
				return false, err
			case res.code == http.StatusAccepted:
				f.readmit = time.Since(killed)
				var out struct{ ID string }
				err := json.Unmarshal(res.body, &out)
				ann2 = out.ID
				return true, err
			case res.code == http.StatusTooManyRequests || res.code == http.StatusServiceUnavailable:
				return false, nil // a3 still counts, or the members are changing
			}
			return false, fmt.Errorf("ann's submit on n1: %d %s", res.code, res.body)
		})
	})
	// a3 answers 503 on n2.
	wg.Go(func() {
		errs <- poll(killLimit, func() (bool, error) {
			res, err := r.call(n2, http.MethodGet, "/v1/batch/"+a3, deathAnn, "")
			switch {
			case err != nil:
				return false, err
			case unavailable503(res):
				f.first503 = time.Since(killed)
				return true, nil
			case res.code == http.StatusOK:
				return false, nil // n3 answered before it died
			}
			return false, fmt.Errorf("a3 on n2: %d %s", res.code, res.body)
		})
	})
	// The lists on n1 and n2 name n3.
	for _, n := range []*clusterNode{n1, n2} {
		wg.Go(func() {
			errs <- poll(killLimit, func() (bool, error) {
				ids, unavailable, err := r.list(n, deathDan)
				if err != nil {
					return false, err
				}
				return slices.Equal(unavailable, []string{"n3"}) && slices.Contains(ids, dans[0]) && slices.Contains(ids, dans[1]), nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		check("after n3's kill", err)
	}
	// Every survivor answers 503 for n3's jobs, to every method.
	for _, n := range []*clusterNode{n1, n2} {
		for _, id := range []string{a3, dans[2]} {
			key := deathAnn
			if id == dans[2] {
				key = deathDan
			}
			for _, m := range []struct{ method, path string }{{"GET", ""}, {"GET", "?results=1"}, {"GET", "/0"}, {"GET", "?wait=2s"}, {"DELETE", ""}} {
				if res := r.must(n, m.method, "/v1/batch/"+id+m.path, key, ""); !unavailable503(res) {
					tb.Errorf("%s %s%s on %s after n3's kill: %d %v %s", m.method, id, m.path, n.name, res.code, res.header, res.body)
				}
			}
		}
	}
	// The survivors' jobs end, whole, and read the same through the other.
	for _, c := range []struct {
		n, other *clusterNode
		key, id  string
		targets  int
	}{{n1, n2, deathBen, b1, 2}, {n2, n1, deathCat, c2, 2}, {n1, n2, deathAnn, ann2, 1}, {n1, n2, deathDan, dans[0], 2}, {n2, n1, deathDan, dans[1], 2}} {
		if j := ended(c.n, c.key, c.id); !j.whole(c.targets) {
			tb.Errorf("job %s on %s after n3's kill: %+v", c.id, c.n.name, j)
		}
		if j := r.job(c.other, c.key, c.id); !j.whole(c.targets) {
			tb.Errorf("job %s through %s after n3's kill: %+v", c.id, c.other.name, j)
		}
	}
	f.window = time.Since(killed)
	r.mu.Lock()
	r.timing = false
	f.longest = r.longest
	r.mu.Unlock()

	// n3 comes back on its directory: a new process, the same flags.
	restarted := time.Now()
	name, base, ports, a := args(2)
	n3 = startClusterNode(tb, name, base, ports, a...)
	procs = append(procs, n3)
	nodes[2] = n3
	check("n3's jobs to be readable through every node", poll(30*time.Second, func() (bool, error) {
		for _, n := range nodes {
			res, err := r.call(n, http.MethodGet, "/v1/batch/"+a3, deathAnn, "")
			if err != nil {
				return false, nil // n3 is not serving yet
			}
			if res.code != http.StatusOK {
				return false, nil
			}
		}
		return true, nil
	}))
	f.readable = time.Since(restarted)
	for _, n := range nodes {
		// Its live job was failed "restart" (its first target kept), its
		// finished one is whole.
		if j := r.job(n, deathAnn, a3); j.Status != "failed" || j.Error != "restart" || len(j.Targets) != 2 || j.Targets[0].Result == nil || j.Targets[0].Result.Content != "page /p-ann-1" {
			tb.Errorf("a3 through %s after n3's restart: %+v", n.name, j)
		}
		if j := r.job(n, deathDan, dans[2]); !j.whole(2) {
			tb.Errorf("dan's job of n3 through %s after its restart: %+v", n.name, j)
		}
	}
	// Dan's grain sees n3's jobs again: a resubmit on n1 returns n3's job.
	if id, reused := r.submit(n1, deathDan, "dan-n3-a", "dan-n3-b"); id != dans[2] || !reused {
		tb.Errorf("dan's resubmit of n3's job on n1: %s reused %v, want %s", id, reused, dans[2])
	}
	// Ann's failed job does not count: she submits on n3.
	if j := r.job(n1, deathAnn, ann2); j.Status != "done" {
		tb.Fatalf("ann's job on n1: %+v", j)
	}
	if id, _ := r.submit(n3, deathAnn, "ann-3"); !ended(n3, deathAnn, id).whole(1) {
		tb.Errorf("ann's job on n3 after its restart did not end whole")
	}

	// Stop every node, then read every log whole.
	var stops sync.WaitGroup
	for _, n := range nodes {
		stops.Go(func() {
			if !n.stop(20 * time.Second) {
				tb.Errorf("%s did not stop on SIGTERM", n.name)
			} else if code := n.cmd.ProcessState.ExitCode(); code != 0 {
				tb.Errorf("%s exited %d", n.name, code)
			}
		})
	}
	stops.Wait()
	for _, n := range procs {
		l := n.stderr.String()
		for _, secret := range []string{deathAnn, deathBen, deathCat, deathDan, "localhost", ":" + sitePort, "/p-", "page ", dir} {
			if strings.Contains(l, secret) {
				tb.Errorf("%s's log holds %q:\n%s", n.name, secret, l)
			}
		}
		if strings.Contains(l, "DATA RACE") {
			tb.Errorf("%s: a data race:\n%s", n.name, l)
		}
	}
	tb.Logf("the whole run: %s", time.Since(start).Round(time.Millisecond))
	return f
}
