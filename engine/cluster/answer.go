package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster/clusterpb"
)

// partSize is the most body bytes a Part carries: well under gRPC's 4 MiB
// message limit, and the most of an answer each node holds at a time.
// The asking node's httpapi.Handler reserves as much (its forwardHold) of
// the caller's answer budget while it forwards a read: keep them equal.
const partSize = 256 << 10

// idleTimeout ends an answer whose asking node has not pulled its next
// part for that long (the asking node died, or its client left).
const idleTimeout = 30 * time.Second

// answerer is a node's answering component: the node's actor, which
// answers the other members (who this node is, a page of a caller's jobs,
// the caller's jobs for a grain, whether a job may be reused), and the
// answers it gives to requests they forward, each written by the API's
// handler on a goroutine of its own and sent a part at a time as the
// asking node pulls it. Its state is those answers (sessions). It is safe
// for concurrent use.
type answerer struct {
	name    string                  // this node's
	tag     [engine.NodeTagLen]byte // this node's
	log     *slog.Logger
	life    *lifecycle
	admit   *admitter   // answers a grain's CallerJobsRequest
	members *memberList // learns the nodes a Hello tells of

	sessions sync.Map // uint64 → *session: answers this node is giving
}

// receive is the node's actor: it answers the other nodes. It never
// blocks: answers are written by goroutines of their own, which send their
// parts to whoever pulls them.
func (a *answerer) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *clusterpb.Hello:
		// The tags a Hello tells of are learnt from a member's Hello only:
		// one with a sender the guard found at a member's address (with
		// TLS, the guard refuses a Hello without one; without TLS, it
		// lets one through, to be answered to nobody).
		if ctx.Sender() != nil {
			a.members.tell(m.Known)
		}
		ctx.Respond(&clusterpb.NodeInfo{Node: a.name, Tag: a.tag[:], JobReads: true})
		if s := ctx.Sender(); s != nil {
			a.members.greeted(s.Address) // its sender counts this node now
		}
	case *clusterpb.Request:
		a.answer(ctx.Sender(), m)
	case *clusterpb.Pull:
		if s, ok := a.sessions.Load(m.Session); ok {
			s.(*session).pull(ctx.Sender())
		} else {
			ctx.Respond(&clusterpb.Part{Session: m.Session, Last: true, Aborted: true})
		}
	case *clusterpb.Release:
		if s, ok := a.sessions.Load(m.Session); ok {
			s.(*session).cancel()
		}
	case *clusterpb.ListRequest:
		sender := ctx.Sender()
		a.life.goWork(func() { a.send(sender, a.listHere(m)) })
	case *clusterpb.JobRequest:
		sender := ctx.Sender()
		a.life.goWork(func() { a.send(sender, a.jobHere(m)) })
	case *clusterpb.CallerJobsRequest:
		sender := ctx.Sender()
		a.life.goWork(func() { a.send(sender, a.admit.callerJobsHere(m.Caller)) })
	case *clusterpb.ReusableRequest:
		sender := ctx.Sender()
		a.life.goWork(func() {
			reusableAnswering(m.Caller)
			ok, body := reusableHere(a.life.run.runner, m)
			a.send(sender, &clusterpb.ReusableReply{Reusable: ok, Body: body})
		})
	}
}

// send sends msg to the asking node's future to.
func (a *answerer) send(to *actor.PID, msg any) {
	if sys := a.life.system(); sys != nil { // none between two incarnations (rejoin.go): the asker's wait ends
		sys.Root.Send(to, msg)
	}
}

// forwardedKey marks the context of a request another node forwarded.
type forwardedKey struct{}

// session is one answer this node gives another: the handler writes it on
// a goroutine of its own, a part at a time, each sent to the asking
// node's next Pull (the Request being the first).
type session struct {
	a       *answerer
	inc     *incarnation       // the node's, when the answer began: its retirement ends the answer
	sys     *actor.ActorSystem // inc's
	handler http.Handler       // the API's, as sys
	id      uint64
	pulls   chan *actor.PID // the futures waiting for the next part
	ctx     context.Context
	cancel  context.CancelFunc

	// Written by the handler's goroutine only.
	header   http.Header
	status   int
	sentHead bool
	closing  bool // the node closed under the answer: a head not sent yet goes with status 0
	buf      []byte
	gone     bool
}

// answer starts answering req for the asking node's future to.
func (a *answerer) answer(to *actor.PID, req *clusterpb.Request) {
	inc := a.life.inc.Load()
	if inc == nil { // between two incarnations (rejoin.go): the asker's wait ends
		return
	}
	ctx, cancel := context.WithCancel(context.WithValue(inc.ctx, forwardedKey{}, true))
	s := &session{a: a, inc: inc, sys: inc.system, handler: a.life.run.handler, id: req.Session, pulls: make(chan *actor.PID, 1), ctx: ctx, cancel: cancel, header: http.Header{}}
	if _, dup := a.sessions.LoadOrStore(s.id, s); dup {
		cancel()
		a.send(to, &clusterpb.Part{Session: req.Session, Last: true, Aborted: true})
		return
	}
	s.pulls <- to
	if !a.life.goWork(func() { s.serve(req) }) {
		a.sessions.Delete(s.id)
		cancel()
		a.send(to, &clusterpb.Part{Session: req.Session, Last: true, Aborted: true})
	}
}

// pull hands the next part to the future to; a second pull before the
// part is sent is a protocol error, answered as a cut.
func (s *session) pull(to *actor.PID) {
	select {
	case s.pulls <- to:
	default:
		s.sys.Root.Send(to, &clusterpb.Part{Session: s.id, Last: true, Aborted: true})
	}
}

// serve runs the handler on req and sends its answer's last part.
func (s *session) serve(req *clusterpb.Request) {
	defer s.a.sessions.Delete(s.id)
	defer s.cancel()
	r, err := http.NewRequestWithContext(s.ctx, req.Method, "http://siftbatch"+req.Uri, nil)
	if err != nil {
		s.header = http.Header{}
		s.status = http.StatusBadRequest
		s.send(true, false)
		return
	}
	r.RequestURI = req.Uri
	r.RemoteAddr = "cluster"
	if req.Authorization != "" {
		r.Header.Set("Authorization", req.Authorization)
	}
	setTraceparent(r, req.Traceparent)
	aborted := s.run(r)
	if s.inc.ctx.Err() != nil {
		// The node is closing, or its incarnation retired: whatever the handler wrote (a long-poll
		// ended with nothing, the rest of a job's results cut) is not
		// the answer.
		s.closing, aborted = true, true
	}
	s.send(true, aborted)
}

// run serves r with the node's handler: true if the handler cut its answer
// short. A handler's panic is caught here as net/http catches it: this is
// the boundary of a request served.
func (s *session) run(r *http.Request) (aborted bool) {
	defer func() {
		v := recover()
		switch {
		case v == nil:
		case v == http.ErrAbortHandler:
			aborted = true
		default:
			s.a.log.Error("forwarded request: handler panicked")
			aborted = true
		}
	}()
	s.handler.ServeHTTP(s, r)
	return false
}

// Header is the answer's header, as http.ResponseWriter's.
func (s *session) Header() http.Header { return s.header }

// WriteHeader sets the answer's status.
func (s *session) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

// Write adds p to the answer, sending each full part as the asking node
// pulls it; an error once the asking node is gone.
func (s *session) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	written := 0
	for len(p) > 0 {
		if s.gone {
			return written, errGone
		}
		k := min(len(p), partSize-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p, written = p[k:], written+k
		if len(s.buf) == partSize && !s.send(false, false) {
			return written, errGone
		}
	}
	return written, nil
}

// Flush sends what is written so far.
func (s *session) Flush() {
	if len(s.buf) > 0 || !s.sentHead {
		s.send(false, false)
	}
}

var errGone = errors.New("the asking node is gone")

// send waits for the asking node's pull and sends it a part: the head with
// the first, the buffered body; false once the asking node is gone.
func (s *session) send(last, aborted bool) bool {
	if s.gone {
		return false
	}
	var to *actor.PID
	idle := time.NewTimer(idleTimeout)
	defer idle.Stop()
	select {
	case to = <-s.pulls:
	case <-s.ctx.Done():
	case <-idle.C:
	}
	if to == nil {
		s.gone = true
		s.cancel()
		return false
	}
	part := &clusterpb.Part{Session: s.id, Body: s.buf, Last: last, Aborted: aborted}
	if !s.sentHead {
		if s.status == 0 {
			s.status = http.StatusOK
		}
		part.Status = int32(s.status)
		if s.closing {
			part.Status = 0 // the asking node answers 503 "node unavailable"
		}
		for k, vs := range s.header {
			part.Headers = append(part.Headers, &clusterpb.Header{Name: k, Values: vs})
		}
		s.sentHead = true
	}
	s.sys.Root.Send(to, part)
	s.buf = make([]byte, 0, min(partSize, 4<<10)) // the part sent owns the old one
	return true
}

// listHere answers a page of a caller's jobs, or of every caller's (m.All),
// from this node's runner.
func (a *answerer) listHere(m *clusterpb.ListRequest) *clusterpb.ListReply {
	opt := engine.ListOptions{Status: m.Status, Limit: int(m.Limit), Cursor: m.Cursor}
	var (
		jobs    []engine.Job
		cursors []string
		next    string
		err     error
	)
	if m.All {
		jobs, cursors, next, err = a.life.run.runner.ListAllAt(opt)
	} else {
		jobs, cursors, next, err = a.life.run.runner.ListAt(m.Caller, opt)
	}
	switch {
	case errors.Is(err, engine.ErrBadList):
		return &clusterpb.ListReply{BadRequest: err.Error()}
	case err != nil:
		a.log.Warn("list for another node", slog.String(logKeyErr, "store failed"))
		return &clusterpb.ListReply{Error: "store failed"}
	}
	out := &clusterpb.ListReply{Jobs: make([]*clusterpb.ListedJob, len(jobs)), More: next != "", Next: next}
	for i, j := range jobs {
		out.Jobs[i] = &clusterpb.ListedJob{Id: j.ID, Status: j.Status, Error: j.Error, TargetsTotal: int32(j.TargetsTotal),
			TargetsDone: int32(j.TargetsDone), TargetsFailed: int32(j.TargetsFailed), CreatedAt: j.CreatedAt, Cursor: cursors[i],
			Caller: j.Caller, StartedAt: j.StartedAt, EndedAt: j.EndedAt, DurationNs: int64(j.Duration)}
	}
	return out
}
