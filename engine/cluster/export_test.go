package cluster

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sift/batch/engine/cluster/clusterpb"
)

// SetObserver sets the test-only observer that sees each admission a
// caller's grain makes ("admit", with the cap) and each end of an admitted
// job a node reports ("end"); nil removes it.
func SetObserver(fn func(event, caller, id string, cap int)) {
	observeFn.Lock()
	observeFn.fn = fn
	observeFn.Unlock()
}

// SetReusableAnswering sets the test-only function a node calls with the
// caller of each reuse check it answers (another node's grain asking
// whether a job may be reused), before it answers; nil removes it.
func SetReusableAnswering(fn func(caller string)) {
	reusableAnsweringFn.Lock()
	reusableAnsweringFn.fn = fn
	reusableAnsweringFn.Unlock()
}

// SetAttemptObserver sets the test-only observer that sees the longest
// wait of each attempt of an admission; nil removes it.
func SetAttemptObserver(fn func(wait time.Duration)) {
	observeAttemptFn.Lock()
	observeAttemptFn.fn = fn
	observeAttemptFn.Unlock()
}

// AdmitBudget bounds an admission in all.
const AdmitBudget = admitBudget

// Ask has n send node to the request another node forwards (Forward's
// protocol: a Request, then a Pull per part), as if n forwarded a
// client's request (method, uri, the client's Authorization), and returns
// the answer's status and body. For tests that play a node asking.
func Ask(ctx context.Context, n, to *Node, method, uri, authorization string) (int, []byte, error) {
	pid := actor.NewPID(to.Address(), nodeActor)
	req := &clusterpb.Request{Method: method, Uri: uri, Authorization: authorization, Session: newSession()}
	part, err := n.fwd.ask(ctx, n.life.system(), pid, req, n.cfg.Timeout, nil)
	if err != nil {
		return 0, nil, err
	}
	status := int(part.Status)
	var body []byte
	for {
		body = append(body, part.Body...)
		switch {
		case part.Aborted:
			return status, body, errors.New("answer cut short")
		case part.Last:
			return status, body, nil
		}
		if part, err = n.fwd.ask(ctx, n.life.system(), pid, &clusterpb.Pull{Session: req.Session}, n.cfg.Timeout, nil); err != nil {
			return status, body, err
		}
	}
}

// NodeActor is the name of each node's actor that answers the others.
const NodeActor = nodeActor

// GrainPID returns the PID of caller's grain, activating it if it is not:
// for tests that play a stranger who has learnt it. The PID is a copy: a
// PID caches the process it was resolved to (here, n's), and a stranger's
// message must go its own way.
func GrainPID(n *Node, caller string) *actor.PID {
	c := n.life.cluster()
	if c == nil {
		return nil
	}
	pid := c.Get(caller, callerKind)
	if pid == nil {
		return nil
	}
	return actor.NewPID(pid.Address, pid.Id)
}

// SystemOf returns n's actor system: for tests that play a member sending
// what a siftbatch node never sends.
func SystemOf(n *Node) *actor.ActorSystem {
	n.life.settled() // waits for a Start under way
	return n.life.system()
}

// PeerLogger returns l behind the filter n puts before protoactor's
// logger.
func PeerLogger(n *Node, l *slog.Logger) *slog.Logger { return peerLogger(l, n.members) }

// PeerLoggerAt is PeerLogger on the clock now.
func PeerLoggerAt(n *Node, l *slog.Logger, now func() time.Time) *slog.Logger {
	return peerLoggerAt(l, n.members, now)
}

// PeerWarnEvery is the period in which a protoactor line at Warn or above
// is logged at most once per message and peer address.
const PeerWarnEvery = peerWarnEvery

// ForgetJobReads has n take every member it has met for a node older than
// Node.ReadJob (its NodeInfo without job_reads), until it meets them again.
func ForgetJobReads(n *Node) {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	for id, info := range n.members.infos {
		info.jobReads = false
		n.members.infos[id] = info
	}
}

// LearnJobReads undoes ForgetJobReads: n takes every member it has met for
// one that answers a JobRequest.
func LearnJobReads(n *Node) {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	for id, info := range n.members.infos {
		info.jobReads = true
		n.members.infos[id] = info
	}
}

// SetHelloWait sets how long a node waits for a member to say who it is,
// and before it asks again one that did not; 0 restores the default.
func SetHelloWait(d time.Duration) { helloWaitNanos.Store(int64(d)) }
