package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The harness's network: one namespace of its own with a bridge (the
// harness's address: the fixture site, the delay proxies, the clients),
// and one namespace per node, each joined to the bridge by a veth pair
// created inside the namespaces: nothing is added to, or routed through,
// the host's own namespace. The 10.x addresses exist inside these
// namespaces only.
const (
	subnet      = "10.77.0"
	harnessHost = subnet + ".254"
	apiPort     = 8080
	clusterPort = 7080
	managePort  = 6080
	nsPrefix    = "sbf" // every namespace of the harness: sbf<pid>-<name>
)

// nodeIP is node i's address (i from 1).
func nodeIP(i int) string { return fmt.Sprintf("%s.%d", subnet, i) }

// network is the namespaces of one test.
type network struct {
	t      testing.TB
	prefix string   // sbf<pid>-<test number>
	hub    string   // the harness's namespace
	nodes  []string // the nodes' namespaces, node i at nodes[i-1]
}

// sh runs a command and fails the test if it fails.
func sh(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNetwork makes the hub's and n nodes' namespaces; the test's cleanup
// deletes them (their veths and iptables rules go with them). It must be
// called before the nodes start, so that their processes (stopped by
// cleanups registered later) are gone when the namespaces are deleted.
func newNetwork(t testing.TB, id, n int) *network {
	t.Helper()
	nw := &network{t: t, prefix: fmt.Sprintf("%s%d-%d", nsPrefix, os.Getpid(), id)}
	nw.hub = nw.prefix + "-h"
	t.Cleanup(nw.remove)
	sh(t, "ip", "netns", "add", nw.hub)
	sh(t, "ip", "-n", nw.hub, "link", "set", "lo", "up")
	sh(t, "ip", "-n", nw.hub, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", nw.hub, "addr", "add", harnessHost+"/24", "dev", "br0")
	sh(t, "ip", "-n", nw.hub, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		ns := fmt.Sprintf("%s-n%d", nw.prefix, i)
		nw.nodes = append(nw.nodes, ns)
		sh(t, "ip", "netns", "add", ns)
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// Both ends are made in their namespaces at once: the host's
		// namespace never holds either.
		sh(t, "ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", nw.port(i), "netns", nw.hub)
		sh(t, "ip", "-n", ns, "addr", "add", nodeIP(i)+"/24", "dev", "eth0")
		sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", nw.hub, "link", "set", nw.port(i), "master", "br0")
		sh(t, "ip", "-n", nw.hub, "link", "set", nw.port(i), "up")
	}
	return nw
}

// port is the name of node i's veth end on the hub's bridge.
func (nw *network) port(i int) string { return fmt.Sprintf("n%d", i) }

// remove deletes the namespaces (their veths and iptables rules with
// them); an error is reported, not fatal, so that the rest is removed.
func (nw *network) remove() {
	for _, ns := range append([]string{nw.hub}, nw.nodes...) {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			nw.t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	}
}

// linkDown cuts (down) or restores (up) node i's link to the bridge:
// nothing reaches it, and it reaches nothing.
func (nw *network) link(i int, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	sh(nw.t, "ip", "-n", nw.hub, "link", "set", nw.port(i), state)
}

// iptables runs iptables in node i's namespace.
func (nw *network) iptables(i int, args ...string) {
	sh(nw.t, append([]string{"ip", "netns", "exec", nw.nodes[i-1], "iptables", "-w"}, args...)...)
}

// flush removes every iptables rule of node i's namespace.
func (nw *network) flush(i int) { nw.iptables(i, "-F") }

// inNS runs f on an OS thread in namespace ns, then moves the thread back.
// A socket made in f (a listener, a connection) stays in ns.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked: it ends with this goroutine, and
			// no other goroutine runs in the wrong namespace.
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// listen listens on the hub's address (port 0: any).
func (nw *network) listen(port int) net.Listener {
	nw.t.Helper()
	var ln net.Listener
	err := inNS(nw.hub, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(harnessHost, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		nw.t.Fatal(err)
	}
	return ln
}

// dial connects from the hub's namespace: the clients' and proxies' dialer.
func (nw *network) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNS(nw.hub, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
