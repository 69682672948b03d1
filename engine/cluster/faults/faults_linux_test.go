package faults

import (
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
		during: 8 * time.Second,
		inject: func(r *rig) { r.nw.link(3, false) },
		heal:   func(r *rig) { r.nw.link(3, true) },
	})
}
