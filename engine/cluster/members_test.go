package cluster

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
	"github.com/sift/batch/persistence"
)

// setupMemberList returns the member list of node "a", started on a runner
// of its own (a real store, in memory) whose store remembers node "old",
// without an actor system: it asks no one who they are, the test says
// what each member answered (heard).
func setupMemberList(t *testing.T) (*memberList, engine.Peer) {
	t.Helper()
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{}, nil
	}
	r, err := engine.New(store, fetch, engine.Config{NodeTag: Tag("a")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		_ = store.Close()
	})
	peer := engine.PeerOf(r)
	if err := peer.RememberNodeTag(tagOf("old"), "old"); err != nil {
		t.Fatal(err)
	}
	life := newLifecycle()
	t.Cleanup(life.cancel)
	life.run = &bound{runner: peer}
	life.bound.Store(life.run)
	life.started = true
	l := newMemberList("a", tagOf("a"), slog.New(slog.DiscardHandler), life)
	l.loadTags(peer)
	return l, peer
}

func tagOf(name string) [engine.NodeTagLen]byte { return [engine.NodeTagLen]byte(Tag(name)) }

// publish sets the members as protoactor would publish them, without
// asking them who they are.
func publish(l *memberList, hash uint64, members ...*pacluster.Member) {
	l.topo.Store(&topology{hash: hash, members: members, next: make(chan struct{})})
}

// silent marks m as asked a moment ago, without an answer: it is not
// asked again for a while.
func silent(l *memberList, m *pacluster.Member) {
	l.mu.Lock()
	l.asked[m.Id] = time.Now().Add(time.Hour)
	l.mu.Unlock()
	l.heard(m, nil)
}

// TestMemberList_Holder: a tag's holder is the member that said it has it;
// with no such member, the tag is known (its jobs answer 503) if its node
// was met (since the start, or before: the store's tags) or if a member has
// not said who it is, and nobody's (this node answers) otherwise.
func TestMemberList_Holder(t *testing.T) {
	l, peer := setupMemberList(t)
	b := &pacluster.Member{Id: "b-id", Host: "10.0.0.2", Port: 7000}
	c := &pacluster.Member{Id: "c-id", Host: "10.0.0.3", Port: 7000}
	publish(l, 1, b)
	l.heard(b, &clusterpb.NodeInfo{Node: "b", Tag: Tag("b")})

	if m, known := l.holder(tagOf("b")); m != b || !known {
		t.Fatalf("b's tag: %v, %v; want member b", m, known)
	}
	if m, known := l.holder(tagOf("old")); m != nil || !known {
		t.Fatalf("a tag the store remembers: %v, %v; want known, no member", m, known)
	}
	if m, known := l.holder(tagOf("never")); m != nil || known {
		t.Fatalf("a tag never met, all members known: %v, %v; want nobody's", m, known)
	}
	tags, err := peer.NodeTags()
	if err != nil || tags[tagOf("b")] != "b" {
		t.Fatalf("the store's tags %v, %v; want b's remembered", tags, err)
	}

	publish(l, 2, b, c)
	silent(l, c)
	if m, known := l.holder(tagOf("never")); m != nil || !known {
		t.Fatalf("a tag never met, c silent: %v, %v; want known (c may hold it)", m, known)
	}
	if got := l.names(); !slices.Equal(got, []string{"b", c.Address()}) {
		t.Fatalf("names %v; want b and c's address", got)
	}

	publish(l, 3, c)
	if got := l.absent(l.current()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("absent %v; want [b]: met since the start, not a member now", got)
	}
	if m, known := l.holder(tagOf("b")); m != nil || !known {
		t.Fatalf("b's tag once b left: %v, %v; want known, no member", m, known)
	}

	l.life.close()
	if got := l.current(); got != nil {
		t.Fatalf("members once closing: %v; want none", got)
	}
	if h := l.topologyHash(); h != 0 {
		t.Fatalf("topology hash once closing: %d; want 0", h)
	}
}

// TestMemberList_RememberBounded: past MaxNodeTags nodes met, a new node's
// tag is refused (what a member says comes from the network): it is not
// remembered, in memory or in the store, and the refusals are counted.
func TestMemberList_RememberBounded(t *testing.T) {
	l, peer := setupMemberList(t)
	l.mu.Lock()
	for i := len(l.seen); i < persistence.MaxNodeTags; i++ {
		l.seen[[engine.NodeTagLen]byte{0xff, 0xfe, byte(i >> 8), byte(i)}] = "filler"
	}
	l.mu.Unlock()
	b := &pacluster.Member{Id: "b-id", Host: "10.0.0.2", Port: 7000}
	publish(l, 1, b)
	l.heard(b, &clusterpb.NodeInfo{Node: "b", Tag: Tag("b")})
	l.mu.Lock()
	_, seen := l.seen[tagOf("b")]
	refused := l.refused
	l.mu.Unlock()
	if seen || refused != 1 {
		t.Fatalf("b past the bound: seen %v, refused %d; want not seen, 1 refused", seen, refused)
	}
	if tags, err := peer.NodeTags(); err != nil || tags[tagOf("b")] != "" {
		t.Fatalf("the store's tags %v, %v; want b's not stored", tags, err)
	}
	if m, _ := l.holder(tagOf("b")); m != b {
		t.Fatalf("b's holder: %v; want member b (it said who it is)", m)
	}
}

// TestMemberList_ToldTagsBounded: the tags peers tell of in their Hellos
// make a job of those nodes answer 503 (known), even past the bound on the
// tags met (they do not use it up, nor the store); malformed entries and
// this node's own tag are skipped; at most MaxNodeTags are kept; and they
// are told on in this node's own Hellos.
func TestMemberList_ToldTagsBounded(t *testing.T) {
	l, peer := setupMemberList(t)
	l.mu.Lock()
	for i := len(l.seen); i < persistence.MaxNodeTags; i++ {
		l.seen[[engine.NodeTagLen]byte{0xff, 0xfe, byte(i >> 8), byte(i)}] = "filler"
	}
	l.mu.Unlock()
	publish(l, 1)
	l.tell([]*clusterpb.NodeInfo{nil, {Node: "short", Tag: []byte{1, 2}}, {Node: "", Tag: Tag("noname")},
		{Node: strings.Repeat("x", 300), Tag: Tag("long")}, {Node: "a", Tag: Tag("a")}, {Node: "gone", Tag: Tag("gone")}})
	if m, known := l.holder(tagOf("gone")); m != nil || !known {
		t.Fatalf("a node told of: holder %v, known %v; want no member, known (503)", m, known)
	}
	for _, name := range []string{"short", "noname", "long"} {
		if _, known := l.holder(tagOf(name)); known {
			t.Errorf("malformed entry %q learnt", name)
		}
	}
	l.mu.Lock()
	told, seen, refused := len(l.told), len(l.seen), l.refused
	l.mu.Unlock()
	if told != 1 || seen != persistence.MaxNodeTags || refused != 0 {
		t.Fatalf("told %d, seen %d, refused %d; want 1 told, the met ones unchanged, none refused", told, seen, refused)
	}
	if tags, err := peer.NodeTags(); err != nil || tags[tagOf("gone")] != "" {
		t.Fatalf("the store's tags %v, %v; want gone's not stored", tags, err)
	}
	var many []*clusterpb.NodeInfo
	for i := range persistence.MaxNodeTags + 10 {
		many = append(many, &clusterpb.NodeInfo{Node: "n", Tag: []byte{0xee, 0xed, byte(i >> 8), byte(i)}})
	}
	l.tell(many)
	l.mu.Lock()
	told = len(l.told)
	l.mu.Unlock()
	if told != persistence.MaxNodeTags {
		t.Fatalf("told %d past the bound, want %d", told, persistence.MaxNodeTags)
	}
	if got := len(l.known()); got != persistence.MaxNodeTags {
		t.Fatalf("a Hello tells of %d nodes, want at most %d", got, persistence.MaxNodeTags)
	}
}
