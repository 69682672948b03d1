package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// admitAttempts bounds how many times a node asks a caller's grain before
// it gives up on a submission (503 to the client).
const admitAttempts = 8

// admitBudget bounds an admission in all, its attempts and the pauses
// between them: a grain whose member hangs with its ports open (each
// attempt waits its whole timeout) costs a submit at most this, then 503
// "admission unavailable". An attempt waits at most the Timeout, and no
// longer than what is left of the budget.
const admitBudget = 5 * time.Second

// admitter is a node's admission component, and its [engine.Admission]
// ([Node.Admission]): it asks each caller's grain (grain.go) to admit the
// caller's new jobs, holds the admissions given to this node's jobs being
// created, and tells the grains of the jobs that end. It is safe for
// concurrent use.
type admitter struct {
	timeout time.Duration
	tag     [engine.NodeTagLen]byte // this node's
	log     *slog.Logger
	life    *lifecycle
	members *memberList
	fwd     *forwarder // asks the other members

	mu      sync.Mutex
	pending map[string]pending // by job id: admissions held for jobs being created
}

// pending is an admission a node holds for a job it is creating.
type pending struct{ caller, key string }

func newAdmitter(timeout time.Duration, tag [engine.NodeTagLen]byte, log *slog.Logger, life *lifecycle, members *memberList, fwd *forwarder) *admitter {
	return &admitter{timeout: timeout, tag: tag, log: log, life: life, members: members, fwd: fwd, pending: map[string]pending{}}
}

// Admit asks caller's grain; see [engine.Admission].
func (a *admitter) Admit(ctx context.Context, caller, key, body, id string) (string, error) {
	c := a.life.cluster()
	if c == nil {
		return "", engine.ErrNoAdmission
	}
	msg := &clusterpb.Admit{Caller: caller, Key: key, Id: id, Cap: int32(a.life.run.jobsPerCaller), Body: body}
	deadline := time.Now().Add(admitBudget)
	var changed <-chan struct{} // closed at the next change of the members after the last attempt began
	var cause error             // why the last answered attempt did not decide, if the grain said
	for attempt := range admitAttempts {
		if attempt > 0 {
			// The pause ends early when the members change (one has said
			// who it is, say): right after a cluster forms, a grain's
			// rebuild fails until every node knows every other, and the
			// next attempt is worth making as soon as they do.
			pause := time.Duration(attempt*attempt) * 50 * time.Millisecond
			if time.Until(deadline) <= pause {
				break
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				a.giveUp(caller, id)
				return "", ctx.Err()
			}
		}
		wait := min(a.timeout, time.Until(deadline))
		if wait <= 0 {
			break
		}
		changed = a.members.changes()
		observeAttempt(wait)
		res, err := a.grainRequestFor(ctx, c, caller, msg, wait)
		if ctx.Err() != nil {
			a.giveUp(caller, id)
			return "", ctx.Err()
		}
		if err != nil {
			continue
		}
		adm, ok := res.(*clusterpb.Admission)
		if !ok {
			continue
		}
		cause = nil
		switch adm.Verdict {
		case clusterpb.Verdict_VERDICT_UNANSWERED:
			cause = errReuseUnanswered
		case clusterpb.Verdict_VERDICT_BUSY:
			return "", engine.ErrCallerBusy
		case clusterpb.Verdict_VERDICT_REUSE:
			return adm.ReuseId, nil
		case clusterpb.Verdict_VERDICT_MISMATCH:
			return "", engine.ErrIdempotencyMismatch
		case clusterpb.Verdict_VERDICT_ADMIT:
			// The fence: the grain decided under topology adm.Epoch; if this
			// node has seen the topology change since, a newer activation may
			// already count without this job. Give the admission back and
			// ask again.
			a.mu.Lock()
			if a.members.topologyHash() == adm.Epoch {
				a.pending[id] = pending{caller: caller, key: key}
				a.mu.Unlock()
				return "", nil
			}
			a.mu.Unlock()
			a.settle(caller, id, "")
		}
	}
	a.log.Warn("admission unavailable", slog.String(logKeyJobID, id), slog.Bool("reuse_unanswered", cause != nil))
	a.giveUp(caller, id)
	if cause != nil {
		return "", fmt.Errorf("%w: %w", engine.ErrNoAdmission, cause)
	}
	return "", engine.ErrNoAdmission
}

// giveUp gives back, on a goroutine of its own, an admission the grain may
// have made though its answer did not come in time: the job is not
// created, and the grain should not count it until its next rebuild.
func (a *admitter) giveUp(caller, id string) {
	observe("end", caller, id, 0)
	a.life.goWork(func() { a.settle(caller, id, statusAbandoned) })
}

// statusAbandoned is the status of a Settle for an admission the asking
// node gave up (giveUp): the grain forgets the id, and refuses it if its
// Admit comes later (a late attempt), so that it never counts a job that
// will not be created.
const statusAbandoned = "abandoned"

// Release gives an admission back: its job was not created.
// It tells the caller's grain before it returns: the caller may submit
// again at once (on a full node's 429, say).
func (a *admitter) Release(caller, id string) {
	a.mu.Lock()
	delete(a.pending, id)
	a.mu.Unlock()
	observe("end", caller, id, 0)
	a.settle(caller, id, "")
}

// Reused tells the caller's grain that this node reused its job id for key
// (bound to targets of hash body, if not "") on its own. It tells it before
// it returns (waiting at most the Timeout), as Release does: the caller's
// next resubmit, on any node, returns the same job.
func (a *admitter) Reused(caller, key, body, id string) {
	if c := a.life.cluster(); c != nil {
		_, _ = a.grainRequest(a.life.ctx, c, caller, &clusterpb.Remember{Caller: caller, Key: key, Id: id, Body: body})
	}
}

// Ended tells the caller's grain that a job is no longer live: it forgets
// the admission held, and tells the grain on a goroutine of its own.
func (a *admitter) Ended(caller, id, status string) {
	a.mu.Lock()
	delete(a.pending, id)
	a.mu.Unlock()
	observe("end", caller, id, 0)
	a.life.goWork(func() { a.settle(caller, id, status) })
}

// settle tells caller's grain that job id is no longer live (or was never
// created, status ""), giving up when the node closes. If it cannot be
// told, its next rebuild learns it
// from the members.
func (a *admitter) settle(caller, id, status string) {
	if c := a.life.cluster(); c != nil {
		_, _ = a.grainRequest(a.life.ctx, c, caller, &clusterpb.Settle{Caller: caller, Id: id, Status: status})
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
// dropped. Close does not wait for it: it ends by itself.
func (a *admitter) grainRequest(ctx context.Context, c *pacluster.Cluster, caller string, msg any) (any, error) {
	return a.grainRequestFor(ctx, c, caller, msg, a.timeout)
}

// grainRequestFor is grainRequest, waiting at most d.
func (a *admitter) grainRequestFor(ctx context.Context, c *pacluster.Cluster, caller string, msg any, d time.Duration) (any, error) {
	topo := a.members.topology()
	var next <-chan struct{} // nil (never ready) before the first topology
	if topo != nil {
		next = topo.next
	}
	type answer struct {
		res any
		err error
	}
	answers := make(chan answer, 1)
	if !a.life.goCall(func() {
		res, err := c.Request(caller, callerKind, msg, pacluster.WithTimeout(d))
		answers <- answer{res, err}
	}) {
		return nil, errClosing
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ans := <-answers:
			return ans.res, ans.err
		case <-timer.C:
			return nil, errTimeout
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-next:
			now := a.members.topology()
			for _, m := range topo.members {
				if !now.hasAddress(m.Address()) {
					return nil, errLeft
				}
			}
			topo, next = now, now.next
		}
	}
}

// callerJobsHere answers a CallerJobsRequest from this node's runner and
// the admissions it holds.
func (a *admitter) callerJobsHere(caller string) *clusterpb.CallerJobsReply {
	jobs, err := a.life.run.runner.Admitted(caller)
	if err != nil {
		return &clusterpb.CallerJobsReply{Error: "store failed"}
	}
	out := &clusterpb.CallerJobsReply{}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, &clusterpb.CallerJob{Id: j.ID, Key: j.Key, Live: j.Live, Reusable: j.Reusable})
	}
	a.mu.Lock()
	// Under a.mu: an admission this node fences (Admit) either is in
	// pending here, or sees a topology other than the one answered.
	out.Topology = a.members.topologyHash()
	for id, p := range a.pending {
		if p.caller == caller {
			out.Jobs = append(out.Jobs, &clusterpb.CallerJob{Id: id, Key: p.key, Live: true})
		}
	}
	a.mu.Unlock()
	return out
}

// callerJobs asks member m (this node, without a message) for caller's
// jobs.
func (a *admitter) callerJobs(ctx context.Context, m *pacluster.Member, caller string) (*clusterpb.CallerJobsReply, error) {
	if a.life.me().is(m) {
		return a.callerJobsHere(caller), nil
	}
	res, err := a.fwd.request(ctx, a.life.system(), actor.NewPID(m.Address(), nodeActor), &clusterpb.CallerJobsRequest{Caller: caller}, a.timeout, nil)
	if err != nil {
		return nil, err
	}
	reply, ok := res.(*clusterpb.CallerJobsReply)
	if !ok || reply.Error != "" {
		return nil, errors.New("caller jobs: no answer")
	}
	return reply, nil
}

// errReuseUnanswered is reusable's error when the node that holds the job
// did not answer (not known now, or not in time): whether the job may be
// reused is not known, and the grain decides nothing on it.
var errReuseUnanswered = errors.New("the node that holds the job of this Idempotency-Key did not answer whether it may be reused; no second job was created")

// reusable asks the node that holds job id whether a resubmit may reuse
// it. With wantBody, it asks for the hash of the job's targets too: body
// is "" if the node could not tell it. ok is false, with a nil error, only
// on an answer: the id is not a job id, no node this one ever met has its
// tag, or its node says no. The error is errReuseUnanswered when its node
// did not answer (it is not known now, or its answer did not come within
// half the Timeout: a node restarting, say): the grain asks the submit again
// rather than create a second job for the key.
func (a *admitter) reusable(caller, key, id string, wantBody bool) (ok bool, body string, err error) {
	tag, ok := idTag(id)
	if !ok {
		return false, "", nil
	}
	if tag == a.tag {
		ok, body := reusableHere(a.life.run.runner, &clusterpb.ReusableRequest{Caller: caller, Key: key, Id: id, WantBody: wantBody})
		return ok, body, nil
	}
	m, known := a.members.holder(tag)
	if m == nil {
		if known {
			return false, "", errReuseUnanswered
		}
		return false, "", nil
	}
	// Half the Timeout: the grain asks within an Admit that its asking
	// node waits for at most the Timeout; a check as long as that would
	// end when the asker has stopped listening, and its cause be lost.
	res, err := a.fwd.request(context.Background(), a.life.system(), actor.NewPID(m.Address(), nodeActor), &clusterpb.ReusableRequest{Caller: caller, Key: key, Id: id, WantBody: wantBody}, a.timeout/2, nil)
	if err != nil {
		return false, "", errReuseUnanswered
	}
	reply, ok := res.(*clusterpb.ReusableReply)
	if !ok {
		return false, "", errReuseUnanswered
	}
	if !reply.Reusable {
		return false, "", nil
	}
	return true, reply.Body, nil
}

// reusableHere answers a ReusableRequest from this node's runner: whether
// the job may be reused and, if asked, the hash of its targets ("" if it
// could not be read).
func reusableHere(run engine.Peer, m *clusterpb.ReusableRequest) (bool, string) {
	if !run.Reusable(m.Caller, m.Key, m.Id) {
		return false, ""
	}
	if !m.WantBody {
		return true, ""
	}
	body, err := run.TargetsHash(m.Caller, m.Id)
	if err != nil {
		return true, ""
	}
	return true, body
}
