package cluster

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// admitAttempts bounds how many times a node asks a caller's grain before
// it gives up on a submission (503 to the client).
const admitAttempts = 8

// Admission returns the node's [engine.Admission], for the runner's
// [engine.Config].Admission: each new job is admitted by its caller's
// grain, against JobsPerCaller across the cluster, and an idempotent
// resubmit on any node returns the same job while that job's node is a
// member.
func (n *Node) Admission() engine.Admission { return admission{n} }

type admission struct{ n *Node }

// pending is an admission a node holds for a job it is creating.
type pending struct{ caller, key string }

// Admit asks caller's grain; see [engine.Admission].
func (a admission) Admit(ctx context.Context, caller, key, id string) (string, error) {
	n := a.n
	c := n.cluster()
	if c == nil {
		return "", engine.ErrNoAdmission
	}
	msg := &clusterpb.Admit{Caller: caller, Key: key, Id: id, Cap: int32(n.runnerCap())}
	for attempt := range admitAttempts {
		if attempt > 0 {
			t := time.NewTimer(time.Duration(attempt*attempt) * 50 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "", ctx.Err()
			}
		}
		res, err := n.grainRequest(ctx, c, caller, msg)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if err != nil {
			continue
		}
		adm, ok := res.(*clusterpb.Admission)
		if !ok {
			continue
		}
		switch adm.Verdict {
		case clusterpb.Verdict_VERDICT_BUSY:
			return "", engine.ErrCallerBusy
		case clusterpb.Verdict_VERDICT_REUSE:
			return adm.ReuseId, nil
		case clusterpb.Verdict_VERDICT_ADMIT:
			// The fence: the grain decided under topology adm.Epoch; if this
			// node has seen the topology change since, a newer activation may
			// already count without this job. Give the admission back and
			// ask again.
			n.admitMu.Lock()
			if n.topologyHash() == adm.Epoch {
				n.pending[id] = pending{caller: caller, key: key}
				n.admitMu.Unlock()
				return "", nil
			}
			n.admitMu.Unlock()
			n.settle(caller, id, "")
		}
	}
	n.log.Warn("admission unavailable", slog.String(logKeyJobID, id))
	return "", engine.ErrNoAdmission
}

// Release gives an admission back: its job was not created.
// It tells the caller's grain before it returns: the caller may submit
// again at once (on a full node's 429, say).
func (a admission) Release(caller, id string) {
	n := a.n
	n.admitMu.Lock()
	delete(n.pending, id)
	n.admitMu.Unlock()
	observe("end", caller, id, 0)
	n.settle(caller, id, "")
}

// Reused tells the caller's grain that this node reused its job id for key
// on its own. It tells it before it returns (waiting at most the Timeout),
// as Release does: the caller's next resubmit, on any node, returns the
// same job.
func (a admission) Reused(caller, key, id string) {
	n := a.n
	if c := n.cluster(); c != nil {
		_, _ = n.grainRequest(context.Background(), c, caller, &clusterpb.Remember{Caller: caller, Key: key, Id: id})
	}
}

// Ended tells the caller's grain that a job is no longer live.
func (a admission) Ended(caller, id, status string) { a.n.end(caller, id, status) }

// end forgets an admission held and tells the caller's grain, on a
// goroutine of its own.
func (n *Node) end(caller, id, status string) {
	n.admitMu.Lock()
	delete(n.pending, id)
	n.admitMu.Unlock()
	observe("end", caller, id, 0)
	n.goWork(func() { n.settle(caller, id, status) })
}

// settle tells caller's grain that job id is no longer live (or was never
// created, status ""). If it cannot be told, its next rebuild learns it
// from the members.
func (n *Node) settle(caller, id, status string) {
	if c := n.cluster(); c != nil {
		_, _ = n.grainRequest(context.Background(), c, caller, &clusterpb.Settle{Caller: caller, Id: id, Status: status})
	}
}

// errClosing is grainRequest's error once the node is closing.
var errClosing = errors.New("the node is closing")

// grainRequest sends msg to caller's grain and returns its answer, waiting
// at most the Timeout, until ctx is done, or until a member leaves the
// membership (the grain may have been there: protoactor forgets where the
// left member's grains were, and the next request finds the grain where
// it is now). protoactor's own request may take longer: when the grain's
// member has died and not yet left, finding the grain waits 5s on it
// (disthash's placement request, whatever the timeout); it goes on, on a
// goroutine of its own that Close waits for, and its answer, if any, is
// dropped.
func (n *Node) grainRequest(ctx context.Context, c *pacluster.Cluster, caller string, msg any) (any, error) {
	topo := n.topo.Load()
	var next <-chan struct{} // nil (never ready) before the first topology
	if topo != nil {
		next = topo.next
	}
	type answer struct {
		res any
		err error
	}
	answers := make(chan answer, 1)
	if !n.goWork(func() {
		res, err := c.Request(caller, callerKind, msg, pacluster.WithTimeout(n.cfg.Timeout))
		answers <- answer{res, err}
	}) {
		return nil, errClosing
	}
	timer := time.NewTimer(n.cfg.Timeout)
	defer timer.Stop()
	for {
		select {
		case a := <-answers:
			return a.res, a.err
		case <-timer.C:
			return nil, errTimeout
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-next:
			now := n.topo.Load()
			for _, m := range topo.members {
				if !now.hasAddress(m.Address()) {
					return nil, errLeft
				}
			}
			topo, next = now, now.next
		}
	}
}

// cluster returns protoactor's cluster once started; nil before, or once
// closing.
func (n *Node) cluster() *pacluster.Cluster {
	n.mu.Lock()
	c, ok := n.c, n.started
	n.mu.Unlock()
	n.workMu.Lock()
	closed := n.closed
	n.workMu.Unlock()
	if !ok || closed {
		return nil
	}
	return c
}

// topologyHash is the hash of the members as this node sees them now.
func (n *Node) topologyHash() uint64 {
	t := n.topo.Load()
	if t == nil || n.cluster() == nil {
		return 0
	}
	return t.hash
}

// runnerCap is the runner's JobsPerCaller.
func (n *Node) runnerCap() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.jobsPerCaller
}

// callerJobsHere answers a CallerJobsRequest from this node's runner and
// the admissions it holds.
func (n *Node) callerJobsHere(caller string) *clusterpb.CallerJobsReply {
	jobs, err := n.runner.Admitted(caller)
	if err != nil {
		return &clusterpb.CallerJobsReply{Error: "store failed"}
	}
	out := &clusterpb.CallerJobsReply{}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, &clusterpb.CallerJob{Id: j.ID, Key: j.Key, Live: j.Live, Reusable: j.Reusable})
	}
	n.admitMu.Lock()
	// Under admitMu: an admission this node fences (Admit) either is in
	// pending here, or sees a topology other than the one answered.
	out.Topology = n.topologyHash()
	for id, p := range n.pending {
		if p.caller == caller {
			out.Jobs = append(out.Jobs, &clusterpb.CallerJob{Id: id, Key: p.key, Live: true})
		}
	}
	n.admitMu.Unlock()
	return out
}

// callerJobs asks member m (this node, without a message) for caller's
// jobs.
func (n *Node) callerJobs(ctx context.Context, m *pacluster.Member, caller string) (*clusterpb.CallerJobsReply, error) {
	if n.me().is(m) {
		return n.callerJobsHere(caller), nil
	}
	res, err := n.request(ctx, actor.NewPID(m.Address(), nodeActor), &clusterpb.CallerJobsRequest{Caller: caller}, n.cfg.Timeout, nil)
	if err != nil {
		return nil, err
	}
	reply, ok := res.(*clusterpb.CallerJobsReply)
	if !ok || reply.Error != "" {
		return nil, errors.New("caller jobs: no answer")
	}
	return reply, nil
}

// reusable asks the node that holds job id whether a resubmit may reuse
// it: false if that node is not a member.
func (n *Node) reusable(caller, key, id string) bool {
	tag, ok := idTag(id)
	if !ok {
		return false
	}
	if tag == n.tag {
		return n.runner.Reusable(caller, key, id)
	}
	m, _ := n.holder(tag)
	if m == nil {
		return false
	}
	res, err := n.request(context.Background(), actor.NewPID(m.Address(), nodeActor), &clusterpb.ReusableRequest{Caller: caller, Key: key, Id: id}, n.cfg.Timeout, nil)
	if err != nil {
		return false
	}
	reply, ok := res.(*clusterpb.ReusableReply)
	return ok && reply.Reusable
}
