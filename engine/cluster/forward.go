package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// maxWait bounds the long-poll wait a forwarded request may announce.
const maxWait = 10 * time.Minute

// forwarder is a node's forwarding component: what it asks the other
// members. It forwards a request about another node's job to that node
// ([Node.Forward]), merges the members' pages of a caller's list
// ([Node.List], list.go), and sends the other components' requests
// (request), each ending when the member asked leaves. Its state is the
// end of the long-polls it forwards (EndWaits). It is safe for concurrent
// use.
type forwarder struct {
	timeout    time.Duration
	retryAfter time.Duration
	tag        [engine.NodeTagLen]byte // this node's
	log        *slog.Logger
	life       *lifecycle
	members    *memberList

	ending  chan struct{} // closed by endWaits
	endOnce sync.Once
}

func newForwarder(timeout, retryAfter time.Duration, tag [engine.NodeTagLen]byte, log *slog.Logger, life *lifecycle, members *memberList) *forwarder {
	return &forwarder{timeout: timeout, retryAfter: retryAfter, tag: tag, log: log, life: life, members: members, ending: make(chan struct{})}
}

// endWaits ends every long-poll forwarded, and later ones ([Node.EndWaits]).
func (f *forwarder) endWaits() { f.endOnce.Do(func() { close(f.ending) }) }

// forward is [Node.Forward].
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, id string) bool {
	if r.Context().Value(forwardedKey{}) != nil {
		return false
	}
	tag, ok := idTag(id)
	if !ok || tag == f.tag {
		return false
	}
	m, known := f.members.holder(tag)
	sys := f.life.system()
	if m == nil {
		if !known {
			return false
		}
		f.unavailable(w, "")
		return true
	}
	name := f.members.nameOf(m)
	if sys == nil { // between two incarnations (rejoin.go)
		f.unavailable(w, name)
		return true
	}
	to := actor.NewPID(m.Address(), nodeActor)
	wait := announcedWait(r)
	req := &clusterpb.Request{Method: r.Method, Uri: r.URL.RequestURI(), Authorization: r.Header.Get("Authorization"),
		WaitMs: wait.Milliseconds(), Session: newSession(), Traceparent: traceparent(r)}
	var ending <-chan struct{} // only a long-poll ends early: anything else might be done twice
	if wait > 0 && r.Method == http.MethodGet {
		ending = f.ending
	}
	part, err := f.ask(r.Context(), sys, to, req, f.timeout+wait, ending)
	if errors.Is(err, errEnding) {
		// The server is stopping: the job as it stands, asked again
		// without the wait.
		sys.Root.Send(to, &clusterpb.Release{Session: req.Session})
		u := *r.URL
		q := u.Query()
		q.Del("wait")
		u.RawQuery = q.Encode()
		req = &clusterpb.Request{Method: r.Method, Uri: u.RequestURI(), Authorization: req.Authorization, Session: newSession(), Traceparent: req.Traceparent}
		part, err = f.ask(r.Context(), sys, to, req, f.timeout, nil)
	}
	if err != nil {
		if r.Context().Err() == nil {
			f.log.Info("node did not answer", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
			f.unavailable(w, name)
		}
		sys.Root.Send(to, &clusterpb.Release{Session: req.Session})
		return true
	}
	if part.Status == 0 { // the holder stopped before its answer began
		f.log.Info("node did not answer", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
		f.unavailable(w, name)
		return true
	}
	h := w.Header()
	for _, kv := range part.Headers {
		h[kv.Name] = kv.Values
	}
	w.WriteHeader(int(part.Status))
	for {
		if len(part.Body) > 0 {
			if _, err := w.Write(part.Body); err != nil {
				sys.Root.Send(to, &clusterpb.Release{Session: req.Session})
				return true // the client has gone
			}
		}
		if part.Aborted {
			panic(http.ErrAbortHandler) // as the other node did: the client must not take it for whole
		}
		if part.Last {
			return true
		}
		if part, err = f.ask(r.Context(), sys, to, &clusterpb.Pull{Session: req.Session}, f.timeout, nil); err != nil {
			sys.Root.Send(to, &clusterpb.Release{Session: req.Session})
			if r.Context().Err() == nil {
				f.log.Info("answer cut short: the node stopped answering", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
				panic(http.ErrAbortHandler)
			}
			return true
		}
	}
}

// ask sends msg to the node actor to and waits for its Part, at most d,
// until ctx is done, or until ending (if not nil) is closed.
func (f *forwarder) ask(ctx context.Context, sys *actor.ActorSystem, to *actor.PID, msg any, d time.Duration, ending <-chan struct{}) (*clusterpb.Part, error) {
	res, err := f.request(ctx, sys, to, msg, d, ending)
	if err != nil {
		return nil, err
	}
	part, ok := res.(*clusterpb.Part)
	if !ok {
		return nil, errors.New("unexpected answer")
	}
	return part, nil
}

// errTimeout is a node's answer that did not come in time.
var errTimeout = errors.New("no answer in time")

// errRefused is request's error when the node asked refuses the request:
// it does not count this node among the members yet (screen).
var errRefused = errors.New("refused: not a member as the node asked sees it")

// errEnding is request's error when its ending is closed first.
var errEnding = errors.New("waits ended")

// errLeft is request's error when the node asked leaves the membership
// before it answers.
var errLeft = errors.New("the node left the cluster")

// request sends msg to the actor to and returns its answer, waiting at
// most d, until ctx is done, until ending (if not nil) is closed, or until
// to's node, a member when asked, leaves the membership (a node killed is
// found out by the provider before d, often). The answer comes to an actor
// of its own, stopped on return: unlike a protoactor future, nothing is
// left waiting once the caller has gone. sys is the node's actor system
// (lifecycle.system), read once by the caller: a Forward reads it once for
// all its parts (an atomic load for each part of each answer costs much
// under the race detector).
func (f *forwarder) request(ctx context.Context, sys *actor.ActorSystem, to *actor.PID, msg any, d time.Duration, ending <-chan struct{}) (any, error) {
	if sys == nil {
		return nil, errClosing
	}
	topo := f.members.topology()
	var next <-chan struct{} // nil (never ready) unless to's node is a member
	if topo != nil && topo.hasAddress(to.Address) {
		next = topo.next
	}
	answers := make(chan any, 1)
	inbox := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *clusterpb.Part, *clusterpb.ListReply, *clusterpb.JobReply, *clusterpb.NodeInfo, *clusterpb.CallerJobsReply, *clusterpb.ReusableReply,
			*pacluster.GrainErrorResponse:
			select {
			case answers <- m:
			default: // one answer per request: a second is dropped
			}
		}
	}))
	defer sys.Root.Stop(inbox)
	sys.Root.RequestWithCustomSender(to, msg, inbox)
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case res := <-answers:
			if _, refused := res.(*pacluster.GrainErrorResponse); refused {
				return nil, errRefused
			}
			return res, nil
		case <-timer.C:
			return nil, errTimeout
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ending:
			return nil, errEnding
		case <-next:
			if topo = f.members.topology(); !topo.hasAddress(to.Address) {
				return nil, errLeft
			}
			next = topo.next
		}
	}
}

// unavailable answers 503 "node unavailable".
func (f *forwarder) unavailable(w http.ResponseWriter, node string) {
	hint := "the node that holds this job is not in the cluster now, or not yet known to this one; try again in a while"
	if node != "" {
		hint = "node " + node + " holds this job and did not answer; try again in a while"
	}
	w.Header().Set("Retry-After", strconv.Itoa(int((f.retryAfter+time.Second-1)/time.Second)))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // as the API's answers: a node's name is written as it is
	_ = enc.Encode(map[string]string{"error": "node unavailable", "hint": hint})
}

// announcedWait is r's ?wait= (a duration, or whole seconds), at most
// maxWait; 0 if none or not one (the other node refuses it).
func announcedWait(r *http.Request) time.Duration {
	s := r.URL.Query().Get("wait")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		sec, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return 0
		}
		d = time.Duration(sec) * time.Second
	}
	return min(max(d, 0), maxWait)
}

// newSession returns a random session id.
func newSession() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return binary.LittleEndian.Uint64(b[:])
}
