package cluster_test

import (
	"testing"
	"time"
)

// TestCluster_Membership: a node started is in its own member list (by its
// address: it does not ask itself who it is), and stays in it as another
// leaves.
func TestCluster_Membership(t *testing.T) {
	tc := newTestCluster(t)
	a, b := tc.add("a"), tc.add("b")
	tc.waitMembers(2)
	deadline := time.After(20 * time.Second)
	for !a.node.Membership().Member {
		select {
		case <-a.node.Changed():
		case <-deadline:
			t.Fatalf("a is not in its own member list: %+v", a.node.Membership())
		}
	}
	m := a.node.Membership()
	if !m.Joined || m.Since.IsZero() {
		t.Fatalf("a joined: %+v", m)
	}
	tc.stop(b)
	tc.waitMembers(1)
	if got := a.node.Membership(); got != m {
		t.Fatalf("a after b left: %+v; want %+v", got, m)
	}
	if got := a.node.Members(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("a's members %v; want [a]", got)
	}
}
