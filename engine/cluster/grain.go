package cluster

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine/cluster/clusterpb"
)

// callerKind is the cluster kind of the callers' grains: one virtual actor
// per caller (identity: the caller's name), placed by protoactor's disthash
// on one member, which admits the caller's jobs across the cluster.
const callerKind = "siftbatch-caller"

// callerGrain admits one caller's jobs: it counts the caller's live jobs on
// every node against JobsPerCaller, and knows its reusable jobs by
// idempotency key, each with the hash of its targets when the key is the
// caller's own (an Idempotency-Key is bound to its body). Its state is
// rebuilt, never trusted across a topology change: it asks every member,
// once the members agree on the topology, and records that topology's hash
// as its epoch. An admission carries the epoch, and a node creates the job
// only if its topology is still that epoch (admitter.Admit): an activation
// left from an older topology cannot admit past the cap.
type callerGrain struct {
	a      *admitter
	caller string
	ready  bool
	epoch  uint64
	live   map[string]bool       // ids of the caller's live jobs and admissions held, on every node
	reuse  map[string]reuseEntry // idempotency key → a reusable job
	// abandoned is the ids whose admissions their nodes gave up
	// (statusAbandoned), at most maxAbandoned: an Admit of one comes from
	// an attempt its node no longer waits for, and is not admitted.
	abandoned map[string]bool
}

// maxAbandoned bounds a grain's abandoned ids; past it they are forgotten.
const maxAbandoned = 4096

// reuseEntry is a reusable job of a caller's grain: its id and, for a key
// of the caller's own, the hash of its targets ("" for a derived key, or
// not known yet: a rebuild learns keys, not bodies; the job's node tells it
// when a resubmit needs it).
type reuseEntry struct{ id, body string }

// Receive implements actor.Actor.
func (g *callerGrain) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pacluster.ClusterInit:
		g.caller = m.Identity.Identity
	case *clusterpb.Admit:
		ctx.Respond(g.admit(ctx, m))
	case *clusterpb.Remember:
		if g.ready && m.Caller == g.caller {
			e := reuseEntry{id: m.Id}
			if validBody(m.Body) {
				e.body = m.Body
			}
			g.reuse[m.Key] = e
		}
		ctx.Respond(&clusterpb.Settled{})
	case *clusterpb.Settle:
		if g.live[m.Id] {
			observe("end", m.Caller, m.Id, 0) // as the node did: the grain no longer counts it
		}
		delete(g.live, m.Id)
		if m.Status == statusAbandoned {
			if g.abandoned == nil || len(g.abandoned) >= maxAbandoned {
				g.abandoned = map[string]bool{}
			}
			g.abandoned[m.Id] = true
		}
		if m.Status != "done" && m.Status != "partial" {
			for k, e := range g.reuse {
				if e.id == m.Id {
					delete(g.reuse, k)
				}
			}
		}
		ctx.Respond(&clusterpb.Settled{})
	}
}

// admit decides an Admit.
func (g *callerGrain) admit(ctx actor.Context, m *clusterpb.Admit) *clusterpb.Admission {
	retry := &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_RETRY}
	if m.Caller != g.caller || !validBody(m.Body) || g.abandoned[m.Id] {
		return retry // another caller's, a body no node sends, or an admission given up
	}
	if !g.ready || g.a.members.topologyHash() != g.epoch {
		if !g.rebuild(ctx) {
			return retry
		}
	}
	if g.live[m.Id] { // asked again: protoactor's requests are retried
		return &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_ADMIT, Epoch: g.epoch}
	}
	if e, ok := g.reuse[m.Key]; ok {
		id := e.id
		wantBody := m.Body != "" && e.body == ""
		ok, body, err := g.a.reusable(m.Caller, m.Key, id, wantBody)
		if err != nil {
			// Its node did not answer (restarting, say): the job may still
			// be reusable. Asked again (the asking node backs off, then
			// answers 503 with Retry-After naming the cause), never a
			// second job.
			observe("unanswered", m.Caller, m.Id, 0)
			return &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_UNANSWERED}
		}
		if ok {
			if wantBody && body != "" && validBody(body) {
				e.body = body
				g.reuse[m.Key] = e
			}
			// The key is bound to its job's body. A body still unknown (its
			// node could not read it) is left to the asking runner, which
			// checks the targets of a job of its own.
			if m.Body != "" && e.body != "" && m.Body != e.body {
				return &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_MISMATCH}
			}
			return &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_REUSE, ReuseId: id}
		}
		if g.live[id] {
			// Admitted, and not yet created (or its node did not answer):
			// a concurrent first submit of the same targets is asked again
			// (the asking node backs off) until that job exists, and is
			// reused, or its admission ends. Never a second job.
			observe("retry", m.Caller, m.Id, 0)
			return retry
		}
		delete(g.reuse, m.Key)
	}
	if len(g.live) >= int(m.Cap) {
		return &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_BUSY}
	}
	g.live[m.Id] = true
	g.reuse[m.Key] = reuseEntry{id: m.Id, body: m.Body}
	observe("admit", m.Caller, m.Id, int(m.Cap))
	return &clusterpb.Admission{Verdict: clusterpb.Verdict_VERDICT_ADMIT, Epoch: g.epoch}
}

// rebuild checks that this activation owns the caller under the topology
// as its node sees it (else it stops: the owner under that topology
// answers), then asks every member for the caller's jobs and the topology
// it sees: the state stands only if every member answers, and sees the same
// topology (protoactor's own topology consensus is never reached at this
// version: docs/CLUSTER.md, "protoactor bugs"). false if any of that fails:
// the admission is asked again.
func (g *callerGrain) rebuild(ctx actor.Context) bool {
	t := g.a.members.topology()
	if t == nil {
		return false
	}
	hash := t.hash
	// The answer of a member this node does not know yet is refused here
	// (guard.screen: not a member): the rebuild would wait its whole
	// timeout. Wait for its Hello's answer (at most helloWait) instead,
	// and give up at once if it did not say who it is.
	if g.a.members.learn(t.members); !g.a.members.knowsAll(t.members) {
		return false
	}
	rdv := pacluster.NewRendezvous()
	rdv.UpdateMembers(t.members)
	if owner := rdv.GetByClusterIdentity(&pacluster.ClusterIdentity{Identity: g.caller, Kind: callerKind}); owner != ctx.ActorSystem().Address() {
		g.ready = false
		ctx.Poison(ctx.Self()) // moved: the owner under this topology answers
		return false
	}
	cctx, cancel := context.WithTimeout(context.Background(), g.a.timeout)
	defer cancel()
	live, reuse := map[string]bool{}, map[string]reuseEntry{}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed bool
	)
	for _, m := range t.members {
		wg.Go(func() {
			reply, err := g.a.callerJobs(cctx, m, g.caller)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || reply.Topology != hash {
				failed = true
				return
			}
			for _, j := range reply.Jobs {
				if j.Live {
					live[j.Id] = true
				}
				if j.Reusable {
					reuse[j.Key] = reuseEntry{id: j.Id}
				}
			}
		})
	}
	wg.Wait()
	if failed || g.a.members.topologyHash() != hash {
		return false
	}
	g.live, g.reuse, g.epoch, g.ready = live, reuse, hash, true
	return true
}

// validBody reports whether body is a hash of targets as a node sends it
// (engine.Peer.TargetsHash: 64 lowercase hex digits), or "" (none).
func validBody(body string) bool {
	if body == "" {
		return true
	}
	if len(body) != 2*sha256.Size {
		return false
	}
	for i := range len(body) {
		if c := body[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// observeFn, set by tests only, sees each admission a grain makes and each
// end of an admitted job a node reports (with the cap, for admissions),
// and each submit asked again because its key is bound to a job not yet
// known reusable ("retry").
var observeFn struct {
	sync.RWMutex
	fn func(event, caller, id string, cap int)
}

// observeAttemptFn, set by tests only, sees the longest wait of each
// attempt of an admission.
var observeAttemptFn struct {
	sync.RWMutex
	fn func(wait time.Duration)
}

func observeAttempt(wait time.Duration) {
	observeAttemptFn.RLock()
	fn := observeAttemptFn.fn
	observeAttemptFn.RUnlock()
	if fn != nil {
		fn(wait)
	}
}

func observe(event, caller, id string, cap int) {
	observeFn.RLock()
	fn := observeFn.fn
	observeFn.RUnlock()
	if fn != nil {
		fn(event, caller, id, cap)
	}
}

// reusableAnsweringFn, set by tests only, is called with the caller of
// each ReusableRequest a node answers, before it answers: a test holds it
// to play a job's node that does not answer in time.
var reusableAnsweringFn struct {
	sync.RWMutex
	fn func(caller string)
}

func reusableAnswering(caller string) {
	reusableAnsweringFn.RLock()
	fn := reusableAnsweringFn.fn
	reusableAnsweringFn.RUnlock()
	if fn != nil {
		fn(caller)
	}
}
