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
// at each of its hops. Each kind stays in the order it was posted, and at
// most urgentStreak urgent messages are taken in a row while requests wait,
// so that requests are never starved.
type mailbox struct {
	mu         sync.Mutex
	urgent     fifo[any]
	user       fifo[any]
	streak     int // urgent messages taken in a row (run's goroutine only)
	system     fifo[any]
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

// newMailbox is the actor.MailboxProducer of every siftbatch actor.
func newMailbox() actor.Mailbox {
	m := &mailbox{}
	m.process = m.processMessages
	return m
}

// PostUserMessage implements actor.Mailbox.
func (m *mailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	if _, ok := actor.UnwrapEnvelopeMessage(msg).(urgentMessage); ok {
		m.urgent.push(msg)
	} else {
		m.user.push(msg)
	}
	m.mu.Unlock()
	m.userN.Add(1)
	m.schedule()
}

// PostSystemMessage implements actor.Mailbox.
func (m *mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.system.push(msg)
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
func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	n, throughput := 0, m.dispatcher.Throughput()
	for {
		if n > throughput {
			n = 0
			runtime.Gosched()
		}
		n++
		if msg = m.pop(&m.system); msg != nil {
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
			return
		}
		if msg = m.popUser(); msg == nil {
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
	if m.streak < urgentStreak || m.user.len() == 0 {
		if v, ok := m.urgent.pop(); ok {
			m.streak++
			return v
		}
	}
	m.streak = 0
	v, _ := m.user.pop()
	return v
}

func (m *mailbox) pop(q *fifo[any]) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, _ := q.pop()
	return v
}
