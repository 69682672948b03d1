package actors

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is protoactor's default unbounded mailbox (actor/mailbox.go, the
// same loop, the same handling of system messages, suspension and failures)
// with one change that matters per message: it hands the dispatcher the same
// run function every time. The default one passes the method value
// m.processMessages, which Go allocates anew each time an idle actor gets
// mail: five allocations for every target stored, a tenth of all the
// runner's. Its queues are slices under a mutex, which allocate only as they
// grow. It takes no mailbox middleware and no MessageBatch, which siftbatch
// does not use.
//
// It also puts the runner's own messages (those that move targets along:
// urgentMessage) ahead of the API's requests (Submit, Status, Touch,
// Cancel): with 200 clients polling, the supervisor's and the job actors'
// queues hold hundreds of requests, and a target waited behind all of them
// at each of its hops. Only an urgent message posted after a request may
// go ahead of it, never one posted before (a job's jobDone, posted before
// it answers a Cancel, stays ahead of the caller's next Submit), and at most
// urgentStreak of them in a row, so that requests are never starved.
type mailbox struct {
	mu         sync.Mutex
	urgent     fifo[posted]
	user       fifo[posted]
	seq        uint64 // messages posted, for posted.seq
	streak     int    // urgent messages taken in a row ahead of a request
	system     fifo[posted]
	status     atomic.Int32 // mailboxIdle or mailboxRunning
	userN      atomic.Int32
	systemN    atomic.Int32
	suspended  atomic.Bool
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	process    func() // m.processMessages, made once
}

const (
	mailboxIdle int32 = iota
	mailboxRunning
)

// urgentStreak is how many urgent messages run takes in a row while other
// user messages wait.
const urgentStreak = 16

// urgentMessage is a message of the runner's own that goes ahead of the
// API's requests in a mailbox (see mailbox).
type urgentMessage interface{ urgent() }

// posted is a user message and when it was posted.
type posted struct {
	seq uint64
	msg any
}

// newMailbox is the actor.MailboxProducer of every siftbatch actor.
func newMailbox() actor.Mailbox {
	m := &mailbox{}
	m.process = m.processMessages
	return m
}

// PostUserMessage implements actor.Mailbox.
func (m *mailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	m.seq++
	if _, ok := actor.UnwrapEnvelopeMessage(msg).(urgentMessage); ok {
		m.urgent.push(posted{m.seq, msg})
	} else {
		m.user.push(posted{m.seq, msg})
	}
	m.mu.Unlock()
	m.userN.Add(1)
	m.schedule()
}

// PostSystemMessage implements actor.Mailbox.
func (m *mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.system.push(posted{msg: msg})
	m.mu.Unlock()
	m.systemN.Add(1)
	m.schedule()
}

// RegisterHandlers implements actor.Mailbox.
func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

// Start implements actor.Mailbox.
func (m *mailbox) Start() {}

// UserMessageCount implements actor.Mailbox.
func (m *mailbox) UserMessageCount() int { return int(m.userN.Load()) }

func (m *mailbox) schedule() {
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.dispatcher.Schedule(m.process)
	}
}

func (m *mailbox) processMessages() {
	for {
		m.run()
		m.status.Store(mailboxIdle)
		// Messages posted after run found the queues empty: go on with
		// them unless another schedule already has.
		pending := m.systemN.Load() > 0 || (!m.suspended.Load() && m.userN.Load() > 0)
		if !pending || !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
			return
		}
	}
}

// run handles messages, system ones first, until the queues are empty or
// the mailbox is suspended. A panic is the actor's failure: it goes to the
// invoker (the actor's supervisor decides), as in protoactor's mailbox.
//
// A handler that calls runtime.Goexit (t.FailNow does) fails its actor
// too, with errGoexit: the mailbox is left idle, and scheduled again if
// mail is waiting, before the goroutine ends (the pool replaces it).
func (m *mailbox) run() {
	var msg any
	returned := false
	defer func() {
		if returned {
			return
		}
		r := recover()
		if r != nil {
			m.invoker.EscalateFailure(r, msg)
			return
		}
		m.invoker.EscalateFailure(errGoexit, msg)
		m.status.Store(mailboxIdle)
		if m.systemN.Load() > 0 || (!m.suspended.Load() && m.userN.Load() > 0) {
			m.schedule()
		}
	}()
	n, throughput := 0, m.dispatcher.Throughput()
	for {
		if n > throughput {
			n = 0
			runtime.Gosched()
		}
		n++
		if msg = m.popSystem(); msg != nil {
			m.systemN.Add(-1)
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			returned = true
			return
		}
		if msg = m.popUser(); msg == nil {
			returned = true
			return
		}
		m.userN.Add(-1)
		m.invoker.InvokeUserMessage(msg)
	}
}

// popUser takes the next user message: an urgent one first, unless
// urgentStreak of them have gone ahead of a waiting request.
func (m *mailbox) popUser() any {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, urgent := m.urgent.peek()
	r, request := m.user.peek()
	switch {
	case !request && !urgent:
		return nil
	case !request || (urgent && u.seq < r.seq):
		m.streak = 0 // nothing is overtaken
	case urgent && m.streak < urgentStreak:
		m.streak++ // ahead of the request r
	default:
		m.streak = 0
		m.user.pop()
		return r.msg
	}
	m.urgent.pop()
	return u.msg
}

func (m *mailbox) popSystem() any {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, _ := m.system.pop()
	return v.msg
}
