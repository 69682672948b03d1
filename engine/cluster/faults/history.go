package faults

import (
	"slices"
	"sync"
	"time"
)

// Kind is what an operation of a [History] did.
type Kind string

// The kinds of operation the clients make.
const (
	Submit Kind = "submit" // POST /v1/batch
	Read   Kind = "read"   // GET /v1/batch/{id} (with ?results=1)
	Wait   Kind = "wait"   // GET /v1/batch/{id}?wait=…
	List   Kind = "list"   // GET /v1/batch
	Cancel Kind = "cancel" // DELETE /v1/batch/{id}
	Final  Kind = "final"  // GET /v1/batch/{id}?results=1 once the fault has healed and the clients have stopped
)

// Op is one operation of a client: what it asked of which node, when it
// asked (Invoke) and when the answer came (Complete), and what the answer
// said.
type Op struct {
	Client string // the caller's name; a client asks about its own jobs only
	Node   string // the node asked
	Kind   Kind
	// ID is the job asked about; a submit's is the id answered (empty
	// without a 202).
	ID string
	// Targets names a submit's set of targets: two submits with the same
	// Targets and Client are the same job by the contract's idempotency.
	Targets string
	// Pair numbers the two concurrent first submits of one set of targets
	// (0: not one of a pair).
	Pair             int
	Invoke, Complete time.Time
	// Code is the HTTP status; 0 when no answer came (a timeout, a refused
	// or reset connection): the operation may or may not have happened.
	Code int
	// Status is the job's status in a 200 of a read, a wait or a final
	// read, and "queued" in a submit's 202.
	Status string
	// Done holds the indexes of the job's targets read done.
	Done   []int
	Reused bool // a submit's 202 returned a job that was there already
}

// live reports whether status is a live job's: queued or running.
func live(status string) bool { return status == "queued" || status == "running" }

// History records the operations of every client. It is safe for
// concurrent use; the zero value is ready.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far, in the order
// they completed.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// View is a node's members as it logged them at a time: an observer's
// record of which nodes it sees.
type View struct {
	Node    string
	At      time.Time
	Members []string // sorted
}

// Views records the views of every node. It is safe for concurrent use;
// the zero value is ready.
type Views struct {
	mu    sync.Mutex
	views []View
}

// Add records that node saw members at time at.
func (v *Views) Add(node string, at time.Time, members []string) {
	m := slices.Clone(members)
	slices.Sort(m)
	v.mu.Lock()
	v.views = append(v.views, View{Node: node, At: at, Members: m})
	v.mu.Unlock()
}

// All returns a copy of the views recorded, oldest first.
func (v *Views) All() []View {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := slices.Clone(v.views)
	slices.SortStableFunc(out, func(a, b View) int { return a.At.Compare(b.At) })
	return out
}
