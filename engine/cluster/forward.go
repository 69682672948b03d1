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
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pacluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/sift/batch/engine/cluster/clusterpb"
)

// maxWait bounds the long-poll wait a forwarded request may announce.
const maxWait = 10 * time.Minute

// Forward answers r, a request about job id, when that job is another
// node's: it forwards r to that node, which answers it as it answers its
// own requests (authenticating the caller again, with the same keys), and
// writes that answer as it comes, a part at a time; or it answers 503
// "node unavailable", with Retry-After, when that node is not a member or
// does not answer within the Timeout (or when a member has not said who it
// is: it may hold the job). A long-poll (GET ?wait=) still
// waiting when [Node.EndWaits] is called is answered at once with the job
// as it stands, as a node answers its own. It returns false, having written
// nothing, when the job is this node's to answer: its id has this node's
// tag, or a tag of no node this node ever met (since it started, or before:
// the tags its store remembers), or r was itself
// forwarded (a node never forwards twice). An answer the other node cut
// short, or that stops coming, is cut short here too: the connection is
// dropped (net/http's [http.ErrAbortHandler]) before the end of its body.
func (n *Node) Forward(w http.ResponseWriter, r *http.Request, id string) bool {
	if r.Context().Value(forwardedKey{}) != nil {
		return false
	}
	tag, ok := idTag(id)
	if !ok || tag == n.tag {
		return false
	}
	m, known := n.holder(tag)
	if m == nil {
		if !known {
			return false
		}
		n.unavailable(w, "")
		return true
	}
	name := n.nameOf(m)
	to := actor.NewPID(m.Address(), nodeActor)
	wait := announcedWait(r)
	req := &clusterpb.Request{Method: r.Method, Uri: r.URL.RequestURI(), Authorization: r.Header.Get("Authorization"),
		WaitMs: wait.Milliseconds(), Session: newSession()}
	var ending <-chan struct{} // only a long-poll ends early: anything else might be done twice
	if wait > 0 && r.Method == http.MethodGet {
		ending = n.ending
	}
	part, err := n.ask(r.Context(), to, req, n.cfg.Timeout+wait, ending)
	if errors.Is(err, errEnding) {
		// The server is stopping: the job as it stands, asked again
		// without the wait.
		n.system.Root.Send(to, &clusterpb.Release{Session: req.Session})
		u := *r.URL
		q := u.Query()
		q.Del("wait")
		u.RawQuery = q.Encode()
		req = &clusterpb.Request{Method: r.Method, Uri: u.RequestURI(), Authorization: req.Authorization, Session: newSession()}
		part, err = n.ask(r.Context(), to, req, n.cfg.Timeout, nil)
	}
	if err != nil {
		if r.Context().Err() == nil {
			n.log.Info("node did not answer", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
			n.unavailable(w, name)
		}
		n.system.Root.Send(to, &clusterpb.Release{Session: req.Session})
		return true
	}
	if part.Status == 0 { // the holder stopped before its answer began
		n.log.Info("node did not answer", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
		n.unavailable(w, name)
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
				n.system.Root.Send(to, &clusterpb.Release{Session: req.Session})
				return true // the client has gone
			}
		}
		if part.Aborted {
			panic(http.ErrAbortHandler) // as the other node did: the client must not take it for whole
		}
		if part.Last {
			return true
		}
		if part, err = n.ask(r.Context(), to, &clusterpb.Pull{Session: req.Session}, n.cfg.Timeout, nil); err != nil {
			n.system.Root.Send(to, &clusterpb.Release{Session: req.Session})
			if r.Context().Err() == nil {
				n.log.Info("answer cut short: the node stopped answering", slog.String(logKeyNode, name), slog.String(logKeyJobID, id))
				panic(http.ErrAbortHandler)
			}
			return true
		}
	}
}

// ask sends msg to the node actor to and waits for its Part, at most d,
// until ctx is done, or until ending (if not nil) is closed.
func (n *Node) ask(ctx context.Context, to *actor.PID, msg any, d time.Duration, ending <-chan struct{}) (*clusterpb.Part, error) {
	res, err := n.request(ctx, to, msg, d, ending)
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
// left waiting once the caller has gone.
func (n *Node) request(ctx context.Context, to *actor.PID, msg any, d time.Duration, ending <-chan struct{}) (any, error) {
	topo := n.topo.Load()
	var next <-chan struct{} // nil (never ready) unless to's node is a member
	if topo != nil && topo.hasAddress(to.Address) {
		next = topo.next
	}
	answers := make(chan any, 1)
	inbox := n.system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *clusterpb.Part, *clusterpb.ListReply, *clusterpb.NodeInfo, *clusterpb.CallerJobsReply, *clusterpb.ReusableReply,
			*pacluster.GrainErrorResponse:
			select {
			case answers <- m:
			default: // one answer per request: a second is dropped
			}
		}
	}))
	defer n.system.Root.Stop(inbox)
	n.system.Root.RequestWithCustomSender(to, msg, inbox)
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
			if topo = n.topo.Load(); !topo.hasAddress(to.Address) {
				return nil, errLeft
			}
			next = topo.next
		}
	}
}

// unavailable answers 503 "node unavailable".
func (n *Node) unavailable(w http.ResponseWriter, node string) {
	hint := "the node that holds this job is not in the cluster now, or not yet known to this one; try again in a while"
	if node != "" {
		hint = "node " + node + " holds this job and did not answer; try again in a while"
	}
	w.Header().Set("Retry-After", strconv.Itoa(int((n.cfg.RetryAfter+time.Second-1)/time.Second)))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "node unavailable", "hint": hint})
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
