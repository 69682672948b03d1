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
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
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

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clustertls"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// runMainEnv, set in a child process of the test binary, makes it the
// siftbatch command itself: main with the child's arguments.
const runMainEnv = "SIFTBATCH_TEST_MAIN"

// raceSuppressions are the GORACE suppressions of the data races inside
// protoactor-go itself (engine/cluster's tests use the same file): a child
// serve built with -race would report them, and exit 66. Races in any other
// code are reported as always.
const raceSuppressions = "../../engine/cluster/testdata/race.supp"

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
		{"cluster-addr", []string{"--cluster", "c", "--cluster-addr", "nowhere"}, `--cluster-addr "nowhere" is not HOST:PORT with a port from 1 to 65535`},
		{"cluster-addr port 0", []string{"--cluster", "c", "--cluster-addr", "127.0.0.1:0"}, `--cluster-addr "127.0.0.1:0" is not HOST:PORT`},
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
		dir, err := os.MkdirTemp("", "siftbatch-test-certs-")
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
			port := freePorts(t, 4)
			args := []string{"serve", "--keys", keys, "--data", data, "--addr", fmt.Sprintf("127.0.0.1:%d", port[0]),
				"--cluster", "c", "--node", "n1",
				"--cluster-addr", fmt.Sprintf("127.0.0.1:%d", port[1]), "--manage-addr", fmt.Sprintf("127.0.0.1:%d", port[2]),
				"--peers", fmt.Sprintf("127.0.0.1:%d", port[2]),
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
	stderr *testkit.SyncBuffer
	exited chan struct{} // closed once the process has exited and err is set
	err    error
}

// freePorts returns n distinct free ports on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close() // held until all are picked: no port twice
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// startClusterNode starts serve with args as a child process; the test's
// cleanup stops it (SIGTERM, then SIGKILL) and waits for it.
func startClusterNode(t testing.TB, name, base string, args ...string) *clusterNode {
	t.Helper()
	supp, err := filepath.Abs(raceSuppressions)
	if err != nil {
		t.Fatal(err)
	}
	n := &clusterNode{name: name, base: base, stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	n.cmd = exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	n.cmd.Env = append(os.Environ(), runMainEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" suppressions="+supp))
	n.cmd.Stdout = io.Discard // the listening line, and the automanaged provider's echo banner
	n.cmd.Stderr = n.stderr
	dieWithParent(n.cmd) // a test binary killed (its -timeout) leaves no serve behind
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		if !n.stop(testkit.Deadline) {
			t.Errorf("%s did not stop on SIGTERM; killed", name)
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, n.stderr.String())
		}
	})
	return n
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
	ports := freePorts(t, 9)
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", ports[6+i]))
	}
	nodes := make([]*clusterNode, 3)
	for i := range nodes {
		name := fmt.Sprintf("n%d", i+1)
		api := fmt.Sprintf("127.0.0.1:%d", ports[i])
		args := []string{"--keys", keys, "--data", filepath.Join(dir, name), "--addr", api, "--allow-private", "--log-level", "debug",
			"--jobs-per-caller", "4",
			"--cluster", "siftbatch-test", "--node", name,
			"--cluster-addr", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--manage-addr", peers[i], "--peers", strings.Join(peers, ",")}
		nodes[i] = startClusterNode(t, name, "http://"+api, append(args, clusterTLSArgs(t, name)...)...)
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
		err := refusedTLS(fmt.Sprintf("127.0.0.1:%d", ports[3]), conf)
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
	conn, err := grpc.Dial(fmt.Sprintf("127.0.0.1:%d", ports[3]), grpc.WithTransportCredentials(credentials.NewTLS(n2TLS.Client())))
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
		for _, want := range []string{"cluster node started", "cluster node stopped", "node=" + n.name, "cluster traffic is mutually authenticated and encrypted"} {
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
	ports := freePorts(t, 3)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	n := startClusterNode(t, "n1", "http://"+addr(0),
		"--keys", keys, "--data", filepath.Join(dir, "n1"), "--addr", addr(0),
		"--cluster", "siftbatch-listen", "--node", "n1", "--cluster-addr", addr(1),
		"--manage-addr", addr(2), "--peers", addr(2), "--cluster-insecure")
	client := &http.Client{Timeout: 5 * time.Second}
	// The node serves once it has joined; the provider binds its manage
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
		if !seen[uint16(ports[0])] || !seen[uint16(ports[1])] || !seen[uint16(ports[2])] {
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
