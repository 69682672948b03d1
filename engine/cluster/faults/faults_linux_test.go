package faults

import (
	"syscall"
	"testing"
	"time"
)

// TestFaults_PartitionOneNode: n3's link is cut (ip link down on its
// bridge port: nothing reaches it, it reaches nothing, the clients
// neither) for longer than the membership timeout, then restored. The
// checker holds the history to docs/CLUSTER.md's guarantees; once healed,
// every job is read through every node.
func TestFaults_PartitionOneNode(t *testing.T) {
	runFault(t, fault{
		name:   "partition of one node",
		during: during,
		inject: func(r *rig) { r.nw.link(3, false) },
		heal:   func(r *rig) { r.nw.link(3, true) },
	})
}

// TestFaults_Split2To1: n3 drops every packet from and to n1 and n2
// (iptables in its namespace), while the clients and the fixture site
// reach all three: two sides, {n1,n2} and {n3}, each answering its
// clients. Then the rules are removed.
func TestFaults_Split2To1(t *testing.T) {
	runFault(t, fault{
		name:   "split 2|1",
		during: during,
		inject: func(r *rig) {
			for _, peer := range []int{1, 2} {
				r.nw.iptables(3, "-A", "INPUT", "-s", nodeIP(peer), "-j", "DROP")
				r.nw.iptables(3, "-A", "OUTPUT", "-d", nodeIP(peer), "-j", "DROP")
			}
		},
		heal: func(r *rig) { r.nw.flush(3) },
	})
}

// TestFaults_OneWay: n3's packets to n1 and n2 are dropped, theirs to n3
// arrive (iptables OUTPUT in n3's namespace only). Then the rule is
// removed.
func TestFaults_OneWay(t *testing.T) {
	runFault(t, fault{
		name:   "one-way partition",
		during: during,
		inject: func(r *rig) {
			for _, peer := range []int{1, 2} {
				r.nw.iptables(3, "-A", "OUTPUT", "-d", nodeIP(peer), "-j", "DROP")
			}
		},
		heal: func(r *rig) { r.nw.flush(3) },
	})
}

// TestFaults_Loss: every node drops 30% of the packets it receives from
// the other nodes (iptables' statistic match, at random); the clients'
// and the site's packets are not dropped. Then the rules are removed.
func TestFaults_Loss(t *testing.T) {
	runFault(t, fault{
		name:   "packet loss 30%",
		during: during,
		inject: func(r *rig) {
			for i := 1; i <= 3; i++ {
				for peer := 1; peer <= 3; peer++ {
					if peer != i {
						r.nw.iptables(i, "-A", "INPUT", "-s", nodeIP(peer), "-m", "statistic", "--mode", "random", "--probability", "0.3", "-j", "DROP")
					}
				}
			}
		},
		heal: func(r *rig) {
			for i := 1; i <= 3; i++ {
				r.nw.flush(i)
			}
		},
	})
}

// TestFaults_Delay: the nodes' cluster traffic (gRPC: gossip, forwarded
// requests, grains) goes through the harness's TCP proxies, each node
// advertising its proxy's address; during the fault every chunk either
// way is held 1 s (this kernel has no netem). The membership's health
// polls go direct. Then the delay is set back to none.
func TestFaults_Delay(t *testing.T) {
	setDelay := func(r *rig, d time.Duration) {
		for _, p := range r.proxies {
			p.setDelay(d)
		}
	}
	runFault(t, fault{
		name:    "delay 1s",
		proxied: true,
		during:  during,
		inject:  func(r *rig) { setDelay(r, time.Second) },
		heal:    func(r *rig) { setDelay(r, 0) },
	})
}

// TestFaults_Pause: n3's process is stopped (SIGSTOP) for `during` (5 s), longer
// than the membership's timeout (a poll every 2 s, answered within 2 s),
// then resumed (SIGCONT).
func TestFaults_Pause(t *testing.T) {
	signal := func(r *rig, sig syscall.Signal) {
		if err := r.nodes[2].cmd.Process.Signal(sig); err != nil {
			r.t.Fatal(err)
		}
	}
	runFault(t, fault{
		name:   "n3 paused",
		during: during,
		inject: func(r *rig) { signal(r, syscall.SIGSTOP) },
		heal:   func(r *rig) { signal(r, syscall.SIGCONT) },
	})
}
