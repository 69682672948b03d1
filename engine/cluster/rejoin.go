package cluster

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/remote"
)

// A node's peers block its member id for good once they have dropped it
// (protoactor's MemberList: "will never allow a member that failed a health
// check to join back in"; its BlockList cannot unblock, and blocked ids
// spread by gossip), so a node cut off for a moment (a partition, a pause)
// would stay out of the cluster once the network is whole again. The
// member id is its actor system's: the node that finds itself blocked
// retires its incarnation (actor system, remote, provider) and makes a new
// one, under a new member id, in process; the runner, its jobs and its
// store go on. docs/CLUSTER.md, "A partition heals", says which node does,
// when, and what callers see meanwhile.
const (
	// rejoinStrikes is how many checks in a row must find the node
	// blocked before it rejoins: a peer that has just started (or just
	// rejoined) does not count it yet, until its first poll.
	rejoinStrikes = 2
	// rejoinStrikesMax bounds how many checks in a row a node that
	// rejoined and is still not counted waits before it rejoins again
	// (the checks' period times this: about 2 min under the automanaged
	// provider's 2 s).
	rejoinStrikesMax = 64
	// rejoinOut is how long a node out of its own member list waits
	// before it rejoins, under a provider that cannot say what its peers
	// count (Kubernetes: a pod unready, then ready again, under its
	// blocked id). It doubles after each rejoin that did not bring the
	// node back, up to rejoinOutMax.
	rejoinOut    = 10 * time.Second
	rejoinOutMax = 2 * time.Minute
	// rejoinCheck is how often a node checks whether it is blocked, under
	// a provider that does not poll (the automanaged provider's refresh
	// otherwise).
	rejoinCheck = time.Second
	// viewTimeout is the least time a check gives the peers' health
	// endpoints to answer.
	viewTimeout = time.Second
	// rejoinPause is the pause between two attempts to make an
	// incarnation, when one failed (a port not free yet, say).
	rejoinPause = time.Second
	// rejoinStopWait bounds how long a rejoin waits for protoactor's stop
	// of the retired incarnation to end (its graceful stop waits up to 10 s
	// for a writer to a peer that died).
	rejoinStopWait = 15 * time.Second
)

// watchRejoin checks, until the node closes, whether its peers block it,
// and rejoins when they do. It runs on a goroutine Close waits for.
func (n *Node) watchRejoin() {
	every := n.cfg.Provider.refresh
	if every <= 0 {
		every = rejoinCheck
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	strikes, need, out := 0, rejoinStrikes, rejoinOut
	for {
		select {
		case <-n.life.ctx.Done():
			return
		case <-tick.C:
		}
		blocked, counted := n.blocked(out)
		if counted { // back in: the next rejoin, if any, as soon as the first
			need, out = rejoinStrikes, rejoinOut
		}
		if !blocked {
			strikes = 0
			continue
		}
		if strikes++; strikes < need {
			continue
		}
		strikes = 0
		n.rejoin()
		// A rejoin that does not bring the node back (its peers cannot
		// reach its manage port, say) is not tried again at once: each
		// waits twice as long as the last, until the node is counted.
		need = min(2*need, rejoinStrikesMax)
		if n.cfg.Provider.views == nil {
			out = min(2*out, rejoinOutMax)
		}
	}
}

// blocked reports whether the node's peers block it for good, as far as
// it can tell now. Under the automanaged provider: at least one peer
// answers its health endpoint (the network to it is whole), and none of
// those that answer counts this node among its members, but for peers
// this node has blocked itself (it dropped them: they will never be its
// members again, whatever they count). The side that all the others have
// dropped is the side that rejoins, and so is a node that dropped every
// peer still counting it: a node that a peer it has not dropped counts
// waits for the others to come back under new ids.
// And every peer this node counts among its members has answered: one
// that did not (a loaded machine, a slow network) may count it. Under a
// provider that cannot tell (Kubernetes): the node has joined,
// and has been out of its own member list for out.
//
// counted reports whether the node is back in, as far as it can tell: a
// peer that answers counts it (automanaged), or it is in its own member
// list (otherwise).
func (n *Node) blocked(out time.Duration) (blocked, counted bool) {
	me := n.life.me()
	if me.id == "" {
		return false, false
	}
	if n.cfg.Provider.views != nil {
		ctx, cancel := context.WithTimeout(n.life.ctx, max(n.cfg.Provider.refresh, viewTimeout))
		defer cancel()
		counted := map[string]bool{} // the peers this node counts, until they answer
		for _, id := range n.members.memberIDs() {
			counted[id] = id != me.id
		}
		// A peer this node has blocked (it dropped the peer: protoactor
		// never lets it back in) is one it will never count again, so its
		// counting this node does not make it a member of this node's
		// cluster: the peer drops it only by its gossip's heartbeat
		// expiry (20 s). The peer keeps its id and takes this node's new
		// one in; the peer itself, counted by the others, stays.
		var blocks *remote.BlockList
		if inc := n.life.inc.Load(); inc != nil && inc.c.Remote != nil {
			blocks = inc.c.Remote.BlockList()
		}
		answered := false
		for _, v := range n.cfg.Provider.views(ctx) {
			if v.ID == me.id {
				continue // this node's own endpoint
			}
			if v.Members == nil {
				// No view yet: a peer that has just started (or
				// rejoined), before its provider published its first
				// members. It drops no one; it may count this node at its
				// first poll. Not an answer: if this node counts it, it
				// waits for it.
				continue
			}
			if slices.Contains(v.Members, me.id) && (blocks == nil || !blocks.IsBlocked(v.ID)) {
				return false, true
			}
			answered, counted[v.ID] = true, false
		}
		for _, waiting := range counted {
			if waiting { // a peer this node counts did not answer: it may count this one
				return false, false
			}
		}
		return answered, false
	}
	ms := n.members.self.get()
	return ms.Joined && !ms.Member && time.Since(ms.Since) >= out, ms.Member
}

// rejoin retires the node's incarnation and makes a new one, under a new
// member id, trying again each rejoinPause until it has one or the node
// closes. Meanwhile the node knows no member: a request about another
// node's job answers 503 "node unavailable", a submit 503 "admission
// unavailable", and the answers it was giving others end (their askers
// answer 503); its own jobs run on, and it answers about them.
func (n *Node) rejoin() {
	old := n.life.inc.Load()
	if old == nil || !n.life.inc.CompareAndSwap(old, nil) {
		return
	}
	n.log.Warn("cluster node blocked by its peers: rejoining under a new member id", slog.String(logKeyNode, n.cfg.Node),
		slog.String("member", old.system.ID))
	n.members.retire()
	old.cancel()
	ok, stopped := shutdown(old.c)
	if !ok {
		n.log.Warn("cluster remote stopped hard: protoactor panicked in its graceful stop")
	}
	// The old incarnation's connections close before the new one opens
	// its own: nothing of it is left (a writer to a peer that died ends
	// after its attempts, about 8 s).
	wait := time.NewTimer(rejoinStopWait)
	select {
	case <-stopped:
	case <-wait.C:
	case <-n.life.ctx.Done():
	}
	wait.Stop()
	if p, ok := old.c.Config.ClusterProvider.(*automanagedProvider); ok {
		p.release() // its view of the manage port, if protoactor's stop did not get to it (the node keeps the port)
	}
	b := n.life.run
	waitFreed(net.JoinHostPort(b.host, strconv.Itoa(b.port)))
	for n.life.ctx.Err() == nil {
		inc, err := n.incarnate(b)
		if err == nil {
			n.log.Info("cluster node rejoined", slog.String(logKeyNode, n.cfg.Node), slog.String("member", inc.system.ID))
			return
		}
		// err is not logged: it may name this node's addresses' ports.
		n.log.Warn("cluster node not rejoined: trying again", slog.String(logKeyNode, n.cfg.Node))
		t := time.NewTimer(rejoinPause)
		select {
		case <-t.C:
		case <-n.life.ctx.Done():
			t.Stop()
		}
	}
}
