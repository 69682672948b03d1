package cluster

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
	"github.com/sift/batch/persistence"
)

// helloTimeout bounds how long a node waits for a member to say who it is.
const helloTimeout = 2 * time.Second

// holder returns the member whose node has tag. A member not yet known is
// asked who it is (all of them at once), or, if it is being asked, waited
// for. If no member has the tag, known tells whether it may be another
// node's: a node with that tag was ever met by this node (since it
// started, or before: the tags its store remembers), or a member has not
// said who it is (it did not answer in time); such a job answers 503 "node
// unavailable". An id no node met ever had, all members known, is this
// node's to answer (a job stored before the cluster, or no job at all).
func (n *Node) holder(tag [engine.NodeTagLen]byte) (m *pacluster.Member, known bool) {
	members := n.members()
	n.learn(members)
	self := n.me()
	n.mu.Lock()
	defer n.mu.Unlock()
	unknown := false
	for _, m := range members {
		info, ok := n.infos[m.Id]
		if ok && info.tag == tag {
			return m, true
		}
		unknown = unknown || !ok && !self.is(m)
	}
	_, known = n.seen[tag]
	if !known {
		_, known = n.stored[tag]
	}
	return nil, known || unknown
}

// loadTags returns the tags of the nodes r's store remembers (a node met
// before this start), without this node's own; none if it cannot read
// them (the node then knows only the nodes it meets, as before the store
// remembered any).
func (n *Node) loadTags(r *engine.Runner) map[[engine.NodeTagLen]byte]string {
	tags, err := r.NodeTags()
	if err != nil {
		n.log.Warn("cluster node tags not read", slog.String(logKeyErr, err.Error()))
		return map[[engine.NodeTagLen]byte]string{}
	}
	delete(tags, n.tag)
	return tags
}

// remember stores, once, that the node named name has tag: in memory, and
// in the runner's store for this node's restarts. Past
// persistence.MaxNodeTags a new tag is refused (what a member says it is
// comes from the network), and counted in the log. It returns whether
// there is nothing to log about the node: it was met since the start, or
// its tag was refused. n.mu is held; remember unlocks it.
func (n *Node) remember(tag [engine.NodeTagLen]byte, name string) (met bool) {
	_, met = n.seen[tag]
	if !met && len(n.seen) >= persistence.MaxNodeTags {
		n.refuseLocked()
		return true
	}
	n.seen[tag] = name
	if old, ok := n.stored[tag]; ok && old == name {
		n.mu.Unlock()
		return met
	}
	r := n.runner
	n.mu.Unlock()
	err := r.RememberNodeTag(tag, name)
	switch {
	case err == nil:
		n.mu.Lock()
		n.stored[tag] = name
		n.mu.Unlock()
	case errors.Is(err, persistence.ErrTooManyNodeTags):
		n.mu.Lock()
		n.refuseLocked()
	default:
		n.log.Warn("cluster node tag not stored", slog.String(logKeyErr, err.Error()))
	}
	return met
}

// refuseLocked counts a tag not remembered, and logs the count. n.mu is
// held; refuseLocked unlocks it.
func (n *Node) refuseLocked() {
	n.refused++
	refused := n.refused
	n.mu.Unlock()
	n.log.Warn("cluster node tag not remembered: too many", slog.Int(logKeyCount, refused))
}

// learn asks each member this node does not know yet who it is, or waits
// for the answer if it is being asked, and forgets the members that have
// left. A member that did not answer is asked again after helloTimeout.
func (n *Node) learn(members []*pacluster.Member) {
	self := n.me()
	var (
		ask  []*pacluster.Member
		wait []chan struct{}
	)
	now := time.Now()
	n.mu.Lock()
	for _, m := range members {
		if _, ok := n.infos[m.Id]; ok || self.is(m) {
			continue
		}
		if asking, ok := n.asking[m.Id]; ok {
			wait = append(wait, asking) // its answer comes within helloTimeout
			continue
		}
		// A member that did not answer is asked again after a while, not
		// by every request: a dead one would hold each up.
		if now.After(n.asked[m.Id]) {
			ask = append(ask, m)
			n.asked[m.Id] = now.Add(helloTimeout)
			n.asking[m.Id] = make(chan struct{})
		}
	}
	if len(n.infos) > 2*len(members)+8 { // forget the members that left
		ids := make(map[string]bool, len(members))
		for _, m := range members {
			ids[m.Id] = true
		}
		for id := range n.infos {
			if !ids[id] {
				delete(n.infos, id)
				n.names.Delete(id)
			}
		}
		for id := range n.asked {
			if !ids[id] {
				delete(n.asked, id)
			}
		}
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ask {
		wg.Go(func() {
			info := n.hello(m)
			n.mu.Lock()
			close(n.asking[m.Id])
			delete(n.asking, m.Id)
			if info == nil {
				n.mu.Unlock()
				n.log.Info("cluster member did not say who it is", slog.String(logKeyAddress, m.Address()))
				return
			}
			var tag [engine.NodeTagLen]byte
			copy(tag[:], info.Tag)
			n.infos[m.Id] = nodeInfo{name: info.Node, tag: tag}
			n.names.Store(m.Id, info.Node)
			if !n.remember(tag, info.Node) {
				n.log.Info("cluster node met", slog.String(logKeyNode, info.Node), slog.String(logKeyAddress, m.Address()))
			}
		})
	}
	wg.Wait()
	for _, asking := range wait {
		<-asking
	}
}

// hello asks member m who it is; nil if it does not say within
// helloTimeout.
func (n *Node) hello(m *pacluster.Member) *clusterpb.NodeInfo {
	res, err := n.system.Root.RequestFuture(actor.NewPID(m.Address(), nodeActor), &clusterpb.Hello{}, helloTimeout).Result()
	info, ok := res.(*clusterpb.NodeInfo)
	if err != nil || !ok || len(info.Tag) != engine.NodeTagLen {
		return nil
	}
	return info
}

// nameOf returns a member's node name, or its address if it never said.
func (n *Node) nameOf(m *pacluster.Member) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if info, ok := n.infos[m.Id]; ok {
		return info.name
	}
	return m.Address()
}

// absent returns the names of the nodes met since the start that are not
// members now (this one aside).
func (n *Node) absent(members []*pacluster.Member) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	present := map[[engine.NodeTagLen]byte]bool{n.tag: true}
	for _, m := range members {
		if info, ok := n.infos[m.Id]; ok {
			present[info.tag] = true
		}
	}
	var out []string
	for tag, name := range n.seen {
		if !present[tag] {
			out = append(out, name)
		}
	}
	return out
}
