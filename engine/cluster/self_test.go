package cluster

import (
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"
)

// TestSelf: a node is the member with its member id, or at its address
// (the Kubernetes provider's member id is its own, not the actor system's);
// a node not started is no member.
func TestSelf(t *testing.T) {
	me := self{id: "sys-id", addr: "10.0.0.7:7000"}
	for _, c := range []struct {
		m    *pacluster.Member
		want bool
	}{
		{&pacluster.Member{Id: "sys-id", Host: "10.0.0.7", Port: 7000}, true},    // automanaged, test provider
		{&pacluster.Member{Id: "k8s-label", Host: "10.0.0.7", Port: 7000}, true}, // the Kubernetes provider's id
		{&pacluster.Member{Id: "sys-id", Host: "10.0.0.8", Port: 7000}, true},
		{&pacluster.Member{Id: "other", Host: "10.0.0.8", Port: 7000}, false},
		{&pacluster.Member{Id: "other", Host: "10.0.0.7", Port: 7001}, false},
	} {
		if got := me.is(c.m); got != c.want {
			t.Errorf("%s at %s: is %v; want %v", c.m.Id, c.m.Address(), got, c.want)
		}
	}
	if (self{}).is(&pacluster.Member{}) || selfOf(nil, "").is(&pacluster.Member{Id: "", Host: "", Port: 0}) {
		t.Error("a node not started is a member")
	}
}

// TestMembership: Joined once the node is in its own list, Since at each
// change, Member as the last published members say.
func TestMembership(t *testing.T) {
	system := self{id: "sys-id", addr: "10.0.0.7:7000"}
	other := &pacluster.Member{Id: "other", Host: "10.0.0.8", Port: 7000}
	me := &pacluster.Member{Id: "label", Host: "10.0.0.7", Port: 7000}
	var ms membership
	t0 := time.Unix(1000, 0)
	ms.note(system, []*pacluster.Member{other}, t0)
	if got := ms.m; got != (Membership{}) {
		t.Fatalf("before joining: %+v", got)
	}
	ms.note(system, []*pacluster.Member{other, me}, t0.Add(time.Second))
	ms.note(system, []*pacluster.Member{me, other}, t0.Add(2*time.Second))
	if got, want := ms.m, (Membership{Joined: true, Member: true, Since: t0.Add(time.Second)}); got != want {
		t.Fatalf("joined: %+v; want %+v", got, want)
	}
	ms.note(system, []*pacluster.Member{other}, t0.Add(3*time.Second))
	ms.note(system, nil, t0.Add(4*time.Second))
	if got, want := ms.m, (Membership{Joined: true, Since: t0.Add(3 * time.Second)}); got != want {
		t.Fatalf("left: %+v; want %+v", got, want)
	}
}
