package cluster

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"
)

// self is who this node is among the members: its member id and its
// address. Under protoactor's automanaged and test providers a node's
// member id is its actor system's ID; under the Kubernetes provider it is
// the provider's own (a random id it labels the pod with), so the id alone
// does not find this node. Its address does, under every provider: each
// publishes a member at the address the node advertises.
type self struct{ id, addr string }

// selfOf returns who system is among the members, advertising addr (the
// address its remote advertises: [bound.advertise]); no one for a nil
// system (a node not started). It does not read system.Address: remote's
// Start sets it while the node's requests already ask who it is (a new
// incarnation is published before its member starts: rejoin.go).
func selfOf(system *actor.ActorSystem, addr string) self {
	if system == nil {
		return self{}
	}
	return self{id: system.ID, addr: addr}
}

// is reports whether m is this node: m has its member id, or its address
// (the member at this node's address is this node: nothing else listens
// there).
func (s self) is(m *pacluster.Member) bool {
	return s.id != "" && m.Id == s.id || s.addr != "" && m.Address() == s.addr
}

// Membership is whether a node is in its own member list: whether the
// members protoactor last published, as the node sees them, include it.
type Membership struct {
	// Joined reports whether the node has been in its member list at
	// least once since it started.
	Joined bool
	// Member reports whether it is in it now.
	Member bool
	// Since is when Member last changed: when the node first joined, or
	// last left or came back. Zero before it first joined.
	Since time.Time
}

// membership tracks a node's [Membership]. It is safe for concurrent use.
type membership struct {
	mu sync.Mutex
	m  Membership
}

// note records the members published at now; me is this node.
func (ms *membership) note(me self, members []*pacluster.Member, now time.Time) {
	in := false
	for _, m := range members {
		in = in || me.is(m)
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if in == ms.m.Member {
		return
	}
	ms.m.Member, ms.m.Since = in, now
	ms.m.Joined = ms.m.Joined || in
}

// get returns the membership now.
func (ms *membership) get() Membership {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.m
}
