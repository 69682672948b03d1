package cluster

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
	"github.com/sift/batch/persistence"
)

// helloTimeout bounds how long a node waits for a member to say who it is.
const helloTimeout = 2 * time.Second

// memberList is a node's membership component: the members as protoactor
// last published them (its own copy), who each member is (its node's name
// and tag, asked with a Hello), every node met, and whether this node is
// in its own member list. It is safe for concurrent use.
type memberList struct {
	name string                  // this node's
	tag  [engine.NodeTagLen]byte // this node's
	log  *slog.Logger
	life *lifecycle

	// topo is the members of the last topology protoactor published: its
	// MemberList.Members reads them without the lock its provider writes
	// them under, a data race. Read without a lock.
	topo atomic.Pointer[topology]
	// said is infos' names, by member id (string → string), for the
	// guards, which take no lock (they run while Start holds the
	// lifecycle's).
	said sync.Map
	self membership // whether this node is in its own member list; its own lock

	mu      sync.Mutex
	infos   map[string]nodeInfo                // by member id: who each member is
	asked   map[string]time.Time               // by member id: when it may be asked who it is again
	asking  map[string]chan struct{}           // by member id: closed once it has answered who it is, or not in time
	seen    map[[engine.NodeTagLen]byte]string // every node met since the start, by tag
	stored  map[[engine.NodeTagLen]byte]string // every node met before, by tag: the runner's store's, and those stored since
	told    map[[engine.NodeTagLen]byte]string // nodes never met that peers told of in their Hellos, by tag: in memory only, at most persistence.MaxNodeTags
	refused int                                // tags not remembered: past persistence.MaxNodeTags
	changed chan struct{}                      // closed at the next change of the members (Changed)
}

// nodeInfo is who a member is.
type nodeInfo struct {
	name string
	tag  [engine.NodeTagLen]byte
	// jobReads says that it answers a JobRequest (NodeInfo.job_reads).
	jobReads bool
}

// topology is the members as a node last heard of them.
type topology struct {
	hash    uint64
	members []*pacluster.Member
	next    chan struct{} // closed once a newer topology replaces this one
}

// hasAddress reports whether a member of t has address addr.
func (t *topology) hasAddress(addr string) bool {
	for _, m := range t.members {
		if m.Address() == addr {
			return true
		}
	}
	return false
}

func newMemberList(name string, tag [engine.NodeTagLen]byte, log *slog.Logger, life *lifecycle) *memberList {
	return &memberList{name: name, tag: tag, log: log, life: life, infos: map[string]nodeInfo{}, asked: map[string]time.Time{},
		asking: map[string]chan struct{}{}, seen: map[[engine.NodeTagLen]byte]string{tag: name},
		stored: map[[engine.NodeTagLen]byte]string{}, told: map[[engine.NodeTagLen]byte]string{}, changed: make(chan struct{})}
}

// onTopology is the node's subscriber to protoactor's event stream (Start
// subscribes it): at each change of the members it keeps its own copy of
// them, then learns who the new ones are, and tells whoever waits on
// Changed.
func (l *memberList) onTopology(evt any) {
	t, ok := evt.(*pacluster.ClusterTopology)
	if !ok {
		return
	}
	members := t.Members
	// Our own copy: protoactor's MemberList.Members reads its member set
	// without the lock its writer holds (a data race). The one it
	// replaces is closed: a wait on a member that has left ends
	// (forwarder.request).
	if old := l.topo.Swap(&topology{hash: t.TopologyHash, members: members, next: make(chan struct{})}); old != nil {
		close(old.next)
	}
	l.self.note(l.life.me(), members, time.Now())
	l.life.goWork(func() { l.learnAll(members, t.TopologyHash) })
}

// learnAll learns who members are, and closes Changed; a member that did
// not say who it is in time is asked again, a few times, until the node
// closes or the members change again (their hash is no longer hash). It
// waits for a Start under way, and learns nothing if Start failed.
func (l *memberList) learnAll(members []*pacluster.Member, hash uint64) {
	if !l.life.isStarted() {
		return
	}
	for attempt := 0; ; attempt++ {
		l.learn(members)
		l.mu.Lock()
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
		if l.knowsAll(members) || attempt == 10 || l.topologyHash() != hash {
			return
		}
		retry := time.NewTimer(helloTimeout)
		select {
		case <-retry.C:
		case <-l.life.ctx.Done():
			retry.Stop()
			return
		}
	}
}

// current returns the members now, as protoactor last published them;
// none before Start or after Close. It waits for a Start under way.
func (l *memberList) current() []*pacluster.Member {
	if !l.life.running() {
		return nil
	}
	if t := l.topo.Load(); t != nil {
		return t.members
	}
	return nil
}

// retire forgets the members of an incarnation the node retires
// (rejoin.go): until the next publishes its own, the node knows no member,
// and every wait on one ends (the topology's next is closed).
func (l *memberList) retire() {
	if old := l.topo.Swap(&topology{next: make(chan struct{})}); old != nil {
		close(old.next)
	}
}

// memberIDs returns the member ids of the members as protoactor last
// published them to this node.
func (l *memberList) memberIDs() []string {
	t := l.topo.Load()
	if t == nil {
		return nil
	}
	ids := make([]string, len(t.members))
	for i, m := range t.members {
		ids[i] = m.Id
	}
	return ids
}

// topology returns the members as protoactor last published them, with
// their hash; nil before the first. It takes no lock.
func (l *memberList) topology() *topology { return l.topo.Load() }

// topologyHash is the hash of the members as this node sees them now; 0
// before Start or after Close.
func (l *memberList) topologyHash() uint64 {
	t := l.topo.Load()
	if t == nil || !l.life.running() {
		return 0
	}
	return t.hash
}

// saidName returns the name member id said it has; false if it has not
// said. It takes no lock.
func (l *memberList) saidName(id string) (string, bool) {
	v, ok := l.said.Load(id)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// knownAddress reports whether addr is this node's address or a current
// member's. It takes no lock (protoactor logs under its own).
func (l *memberList) knownAddress(addr string) bool {
	if b := l.life.bound.Load(); b != nil && addr == b.advertise {
		return true
	}
	t := l.topo.Load()
	return t != nil && t.hasAddress(addr)
}

// names returns the names of the members now, as this node knows them (a
// member not yet asked who it is reads as its address).
func (l *memberList) names() []string {
	ms := l.current()
	self := l.life.me()
	out := make([]string, 0, len(ms))
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range ms {
		if info, ok := l.infos[m.Id]; ok {
			out = append(out, info.name)
		} else if self.is(m) {
			out = append(out, l.name)
		} else {
			out = append(out, m.Address())
		}
	}
	return out
}

// changes returns a channel closed at the next change of the members,
// once they have been asked who they are.
func (l *memberList) changes() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// knowsAll reports whether every one of members has said who it is.
func (l *memberList) knowsAll(members []*pacluster.Member) bool {
	self := l.life.me()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range members {
		if _, ok := l.infos[m.Id]; !ok && !self.is(m) {
			return false
		}
	}
	return true
}

// holder returns the member whose node has tag. A member not yet known is
// asked who it is (all of them at once), or, if it is being asked, waited
// for. If no member has the tag, known tells whether it may be another
// node's: a node with that tag was ever met by this node (since it
// started, or before: the tags its store remembers), or a member has not
// said who it is (it did not answer in time); such a job answers 503 "node
// unavailable". An id no node met ever had, all members known, is this
// node's to answer (a job stored before the cluster, or no job at all).
func (l *memberList) holder(tag [engine.NodeTagLen]byte) (m *pacluster.Member, known bool) {
	members := l.current()
	l.learn(members)
	self := l.life.me()
	l.mu.Lock()
	defer l.mu.Unlock()
	unknown := false
	for _, m := range members {
		info, ok := l.infos[m.Id]
		if ok && info.tag == tag {
			return m, true
		}
		unknown = unknown || !ok && !self.is(m)
	}
	_, known = l.seen[tag]
	if !known {
		_, known = l.stored[tag]
	}
	if !known {
		_, known = l.told[tag]
	}
	return nil, known || unknown
}

// loadTags reads back the tags of the nodes the runner's store remembers
// (a node met before this start), without this node's own; none if it
// cannot read them (the node then knows only the nodes it meets, as
// before the store remembered any).
func (l *memberList) loadTags(r engine.Peer) {
	tags, err := r.NodeTags()
	if err != nil {
		l.log.Warn("cluster node tags not read", slog.String(logKeyErr, err.Error()))
		tags = map[[engine.NodeTagLen]byte]string{}
	}
	delete(tags, l.tag)
	l.mu.Lock()
	l.stored = tags
	l.mu.Unlock()
}

// remember stores, once, that the node named name has tag: in memory, and
// in the runner's store for this node's restarts. Past
// persistence.MaxNodeTags a new tag is refused (what a member says it is
// comes from the network), and counted in the log. It returns whether
// there is nothing to log about the node: it was met since the start, or
// its tag was refused. l.mu is held; remember unlocks it.
func (l *memberList) remember(tag [engine.NodeTagLen]byte, name string) (met bool) {
	_, met = l.seen[tag]
	if !met && len(l.seen) >= persistence.MaxNodeTags {
		l.refuseLocked()
		return true
	}
	l.seen[tag] = name
	if old, ok := l.stored[tag]; ok && old == name {
		l.mu.Unlock()
		return met
	}
	l.mu.Unlock()
	err := l.life.run.runner.RememberNodeTag(tag, name)
	switch {
	case err == nil:
		l.mu.Lock()
		l.stored[tag] = name
		l.mu.Unlock()
	case errors.Is(err, persistence.ErrTooManyNodeTags):
		l.mu.Lock()
		l.refuseLocked()
	default:
		l.log.Warn("cluster node tag not stored", slog.String(logKeyErr, err.Error()))
	}
	return met
}

// refuseLocked counts a tag not remembered, and logs the count. l.mu is
// held; refuseLocked unlocks it.
func (l *memberList) refuseLocked() {
	l.refused++
	refused := l.refused
	l.mu.Unlock()
	l.log.Warn("cluster node tag not remembered: too many", slog.Int(logKeyCount, refused))
}

// learn asks each member this node does not know yet who it is, or waits
// for the answer if it is being asked, and forgets the members that have
// left. A member that did not answer is asked again after helloTimeout.
func (l *memberList) learn(members []*pacluster.Member) {
	self := l.life.me()
	var (
		ask  []*pacluster.Member
		wait []chan struct{}
	)
	now := time.Now()
	l.mu.Lock()
	for _, m := range members {
		if _, ok := l.infos[m.Id]; ok || self.is(m) {
			continue
		}
		if asking, ok := l.asking[m.Id]; ok {
			wait = append(wait, asking) // its answer comes within helloTimeout
			continue
		}
		// A member that did not answer is asked again after a while, not
		// by every request: a dead one would hold each up.
		if now.After(l.asked[m.Id]) {
			ask = append(ask, m)
			l.asked[m.Id] = now.Add(helloTimeout)
			l.asking[m.Id] = make(chan struct{})
		}
	}
	if len(l.infos) > 2*len(members)+8 { // forget the members that left
		ids := make(map[string]bool, len(members))
		for _, m := range members {
			ids[m.Id] = true
		}
		for id := range l.infos {
			if !ids[id] {
				delete(l.infos, id)
				l.said.Delete(id)
			}
		}
		for id := range l.asked {
			if !ids[id] {
				delete(l.asked, id)
			}
		}
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ask {
		wg.Go(func() { l.heard(m, l.hello(m)) })
	}
	wg.Wait()
	for _, asking := range wait {
		<-asking
	}
}

// heard records member m's answer to a Hello: who it is (remembered), or
// nil if it did not say in time; either ends the wait of whoever waits on
// its answer.
func (l *memberList) heard(m *pacluster.Member, info *clusterpb.NodeInfo) {
	l.mu.Lock()
	if asking, ok := l.asking[m.Id]; ok {
		close(asking)
		delete(l.asking, m.Id)
	}
	if info == nil {
		l.mu.Unlock()
		l.log.Info("cluster member did not say who it is", slog.String(logKeyAddress, m.Address()))
		return
	}
	var tag [engine.NodeTagLen]byte
	copy(tag[:], info.Tag)
	l.infos[m.Id] = nodeInfo{name: info.Node, tag: tag, jobReads: info.JobReads}
	l.said.Store(m.Id, info.Node)
	if !l.remember(tag, info.Node) {
		l.log.Info("cluster node met", slog.String(logKeyNode, info.Node), slog.String(logKeyAddress, m.Address()))
	}
}

// hello asks member m who it is; nil if it does not say within
// helloTimeout.
func (l *memberList) hello(m *pacluster.Member) *clusterpb.NodeInfo {
	sys := l.life.system()
	if sys == nil { // between two incarnations (rejoin.go)
		return nil
	}
	res, err := sys.Root.RequestFuture(actor.NewPID(m.Address(), nodeActor), &clusterpb.Hello{Known: l.known()}, helloTimeout).Result()
	info, ok := res.(*clusterpb.NodeInfo)
	if err != nil || !ok || len(info.Tag) != engine.NodeTagLen {
		return nil
	}
	return info
}

// maxNodeName bounds the name of a node a peer tells of (a DNS label's
// bound: a pod's name is one).
const maxNodeName = 253

// known returns the nodes this node knows, for a Hello: met (since the
// start, or before), and told of by its peers; at most
// persistence.MaxNodeTags, this node among them.
func (l *memberList) known() []*clusterpb.NodeInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*clusterpb.NodeInfo, 0, len(l.seen)+len(l.stored)+len(l.told))
	done := map[[engine.NodeTagLen]byte]bool{}
	for _, m := range []map[[engine.NodeTagLen]byte]string{l.seen, l.stored, l.told} {
		for tag, name := range m {
			if done[tag] || len(out) == persistence.MaxNodeTags {
				continue
			}
			done[tag] = true
			out = append(out, &clusterpb.NodeInfo{Node: name, Tag: tag[:]})
		}
	}
	return out
}

// tell learns the nodes a peer's Hello tells of (that peer a member, as the
// guard checked): a tag this node never met is kept in memory, apart from
// the tags it met (so that they do not use up the store's
// persistence.MaxNodeTags), at most persistence.MaxNodeTags of them; a job
// of such a node answers 503 "node unavailable" while the node is not a
// member, not 404. A malformed entry is skipped.
func (l *memberList) tell(known []*clusterpb.NodeInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range known {
		if k == nil || len(k.Tag) != engine.NodeTagLen || k.Node == "" || len(k.Node) > maxNodeName {
			continue
		}
		tag := [engine.NodeTagLen]byte(k.Tag)
		if _, ok := l.seen[tag]; ok {
			continue
		}
		if _, ok := l.stored[tag]; ok {
			continue
		}
		if _, ok := l.told[tag]; ok || len(l.told) >= persistence.MaxNodeTags {
			continue
		}
		l.told[tag] = k.Node
	}
}

// nameOf returns a member's node name, or its address if it never said.
func (l *memberList) nameOf(m *pacluster.Member) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if info, ok := l.infos[m.Id]; ok {
		return info.name
	}
	return m.Address()
}

// absent returns the names of the nodes met since the start that are not
// members now (this one aside).
func (l *memberList) absent(members []*pacluster.Member) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	present := map[[engine.NodeTagLen]byte]bool{l.tag: true}
	for _, m := range members {
		if info, ok := l.infos[m.Id]; ok {
			present[info.tag] = true
		}
	}
	var out []string
	for tag, name := range l.seen {
		if !present[tag] {
			out = append(out, name)
		}
	}
	return out
}

// tagName is the name of the node with tag, as this node met it (since it
// started, or before: its store's); "" if it never did.
func (l *memberList) tagName(tag [engine.NodeTagLen]byte) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if name, ok := l.seen[tag]; ok {
		return name
	}
	return l.stored[tag]
}

// readsJobs reports whether member m said that it answers a JobRequest.
func (l *memberList) readsJobs(m *pacluster.Member) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.infos[m.Id].jobReads
}
