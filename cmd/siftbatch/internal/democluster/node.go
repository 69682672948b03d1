package democluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/cluster/clustertls"
	"github.com/sift/batch/engine/enginetest/loopback"
)

// node is one of the cluster's nodes, across its restarts.
type node struct {
	name    string
	tag     string // its tag in hex, as its jobs' ids begin
	base    string // http://127.0.0.1:PORT
	args    []string
	logPath string
	held    []*loopback.Port // its API and manage ports, handed to each of its processes

	proc *proc // the process running now (or last), set by the script only
}

// proc is one process of a node.
type proc struct {
	node   *node
	cmd    *exec.Cmd
	pid    int
	exited chan struct{} // closed once it has exited and err is set
	err    error
	killed bool // killed by the script, on purpose
}

// setUp writes the keys file and the cluster's certificates, holds the
// ports, and describes the nodes.
func (d *demo) setUp() error {
	var keys strings.Builder
	for _, c := range append(slices.Clone(callers), probe) {
		b := make([]byte, 16)
		_, _ = rand.Read(b) // never fails
		d.keys[c] = "sbdemo-" + c + "-" + hex.EncodeToString(b)
		fmt.Fprintf(&keys, "%s %s\n", c, d.keys[c])
	}
	keysPath := filepath.Join(d.dir, "keys")
	if err := os.WriteFile(keysPath, []byte(keys.String()), 0o600); err != nil {
		return fmt.Errorf("write keys: %w", err)
	}
	// The cluster's mutual TLS: a CA and each node's key pair, made fresh
	// in the temporary directory, gone with it.
	certs := filepath.Join(d.dir, "certs")
	names := make([]string, nodeCount)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i+1)
	}
	if err := clustertls.Write(certs, names, nil); err != nil {
		return fmt.Errorf("make the cluster's certificates: %w", err)
	}
	// Each node's API and manage ports are held by the demo for its whole
	// run and handed to each of the node's processes as listening sockets
	// (systemd's socket activation): no port is picked, closed and bound
	// again, and while n3 is down its ports refuse connections. The
	// cluster port is the node's own pick (--cluster-addr port 0).
	ports, err := loopback.HoldN(2 * nodeCount)
	if err != nil {
		return err
	}
	d.ports = ports
	peers := make([]string, nodeCount)
	for i := range peers {
		peers[i] = ports[nodeCount+i].Addr()
	}
	for i, name := range names {
		api := ports[i].Addr()
		d.nodes = append(d.nodes, &node{
			name:    name,
			tag:     hex.EncodeToString(cluster.Tag(name)),
			base:    "http://" + api,
			logPath: filepath.Join(d.dir, name+".log"),
			held:    []*loopback.Port{ports[i], ports[nodeCount+i]},
			args: []string{"serve", "--keys", keysPath, "--data", filepath.Join(d.dir, name), "--addr", api,
				"--allow-private", "--log-level", "info",
				"--jobs-per-caller", strconv.Itoa(jobsPerCaller), "--workers", strconv.Itoa(workers),
				"--cluster", clusterName, "--node", name,
				"--cluster-addr", "127.0.0.1:0",
				"--manage-addr", peers[i], "--peers", strings.Join(peers, ","),
				"--cluster-ca", filepath.Join(certs, "ca.crt"),
				"--cluster-cert", filepath.Join(certs, name+".crt"), "--cluster-key", filepath.Join(certs, name+".key")},
		})
	}
	return nil
}

// startNode starts n's process; its output goes to its log file.
func (d *demo) startNode(n *node) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: open log: %w", n.name, err)
	}
	defer logf.Close() // the child has its own
	files := make([]*os.File, 0, len(n.held))
	defer func() {
		for _, f := range files {
			_ = f.Close() // the child has its own
		}
	}()
	for _, p := range n.held {
		f, err := p.Listen()
		if err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		files = append(files, f)
	}
	cmd := loopback.Command(files, d.o.Exe, n.args...)
	cmd.Env = append(cmd.Env, d.o.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	ownChild(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	p := &proc{node: n, cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	n.proc = p
	return nil
}

// killNode kills n's process with SIGKILL and waits for it to be gone.
func (d *demo) killNode(n *node) error {
	p := n.proc
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s: %w", n.name, err)
	}
	<-p.exited
	return nil
}

// stopAll stops every process still running, one after the other: SIGTERM,
// then SIGKILL once stopLimit has passed, or at once on another interrupt
// (a second Ctrl-C). It says which stopped, by pid. A node it had to kill
// is an error: the stop was not clean.
func (d *demo) stopAll() (err error) {
	d.mu.Lock()
	procs := slices.Clone(d.procs)
	d.mu.Unlock()
	if len(procs) == 0 {
		return nil
	}
	var running []*proc
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			running = append(running, p)
		}
	}
	if len(running) > 0 {
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		fmt.Fprintf(d.out, "\nStopping the nodes one by one (SIGTERM; SIGKILL after %s in all, or at once on Ctrl-C)…\n", stopLimit)
		limit := time.NewTimer(stopLimit)
		defer limit.Stop()
		var forced []string
		late := false // killed at the limit, not on the user's Ctrl-C
		// One by one: nodes stopped together each see the others vanish,
		// and protoactor's shutdown then retries them for up to ~10s.
		for i, p := range running {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
				continue
			case <-limit.C:
				late = true
			case <-again:
			}
			for _, q := range running[i:] {
				select {
				case <-q.exited:
				default:
					forced = append(forced, q.node.name)
					_ = q.cmd.Process.Kill()
					<-q.exited
				}
			}
			break
		}
		switch {
		case len(forced) > 0 && late:
			fmt.Fprintf(d.out, "Killed (SIGKILL) %s: not stopped on SIGTERM.\n", strings.Join(forced, ", "))
			err = fmt.Errorf("demo-cluster: %s did not stop within %s of SIGTERM", strings.Join(forced, ", "), stopLimit)
		case len(forced) > 0:
			fmt.Fprintf(d.out, "Killed (SIGKILL) %s: not stopped on SIGTERM.\n", strings.Join(forced, ", "))
			err = fmt.Errorf("demo-cluster: killed %s on a second interrupt, before it stopped on SIGTERM", strings.Join(forced, ", "))
		}
	}
	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = fmt.Sprintf("%s pid %d", p.node.name, p.pid)
	}
	fmt.Fprintf(d.out, "Stopped every node process: %s.\n", strings.Join(pids, ", "))
	return err
}

// check returns an error if a node's process has exited without being
// killed by the script.
func (d *demo) check() error {
	for _, n := range d.nodes {
		p := n.proc
		if p == nil || p.killed {
			continue
		}
		select {
		case <-p.exited:
			return fmt.Errorf("demo-cluster: %s exited by itself (%v); its log is %s", n.name, p.err, n.logPath)
		default:
		}
	}
	return nil
}

// exitedUnexpectedly returns a channel closed when a node's process exits
// without being killed by the script, watched until ctx is done.
func (d *demo) exitedUnexpectedly(ctx context.Context) <-chan struct{} {
	c := make(chan struct{})
	var once sync.Once
	for _, n := range d.nodes {
		if p := n.proc; p != nil && !p.killed {
			go func() {
				select {
				case <-p.exited:
					once.Do(func() { close(c) })
				case <-ctx.Done():
				}
			}()
		}
	}
	return c
}
