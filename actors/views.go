package actors

import (
	"sync"
	"sync/atomic"

	"github.com/sift/batch/persistence"
)

// Views is where the job actors publish what readers need to know of the
// jobs they own, so that a read never queues in a mailbox behind the work:
// a reader loads a [Snapshot] with one atomic load and reads the rest from
// the store, which Badger serves to any number of readers at once.
//
// A job has a view from its creation until its actor stops with its rows
// written; a job whose write failed keeps its view (the truth as its actor
// held it) until the store's writer has written it, or for good once the
// runner has stopped. Safe for concurrent use.
type Views struct{ m sync.Map } // job id → *View

// View is one job's published state: a [Snapshot], the latest lease a
// reader asked for (Touch), and a channel closed once the job is terminal.
type View struct {
	snap    atomic.Pointer[Snapshot]
	touched atomic.Int64 // unix nanos: the latest Touch; written with the job's next write
	ended   chan struct{}
	endOnce sync.Once
	derived atomic.Pointer[derived] // see Derived
}

// derived is what a reader derived from one snapshot.
type derived struct {
	snap *Snapshot
	v    any
}

// Snapshot is a job as its actor holds it: immutable once published.
type Snapshot struct {
	// Job is the job's row as its actor holds it: its status and error, and
	// its progress counting only the outcomes the store has committed (or
	// that wait in Unsaved).
	Job persistence.JobRecord
	// Running is the idx of the target being fetched or stored: it reads
	// running until the store has answered, even once committed. -1: none.
	Running int
	// Unsaved are outcomes whose write failed and that the store's writer
	// is retrying: they read as they are here, not as the store has them.
	Unsaved []persistence.TargetRecord
}

// Get returns the view of job id, or nil.
func (v *Views) Get(id string) *View {
	if x, ok := v.m.Load(id); ok {
		return x.(*View)
	}
	return nil
}

// add registers a new view of a job that has just been stored.
func (v *Views) add(rec *persistence.JobRecord) *View {
	w := &View{ended: make(chan struct{})}
	w.snap.Store(&Snapshot{Job: *rec, Running: -1})
	v.m.Store(rec.ID, w)
	return w
}

func (v *Views) remove(id string) { v.m.Delete(id) }

// Range calls fn with every view's latest snapshot until fn returns false.
func (v *Views) Range(fn func(*Snapshot) bool) {
	v.m.Range(func(_, x any) bool { return fn(x.(*View).Load()) })
}

// EndAll closes the ended channel of every view and forgets them all: for a
// runner that has failed, whose jobs are settled in the store by others.
func (v *Views) EndAll() {
	v.m.Range(func(k, x any) bool {
		x.(*View).end()
		v.m.Delete(k)
		return true
	})
}

// Load returns the job's latest snapshot.
func (w *View) Load() *Snapshot { return w.snap.Load() }

// Touch records that a reader wants the job kept until lease + TTL; the
// job's actor writes it with its next write. It reports false once the
// actor has stopped: touch the store instead.
func (w *View) Touch(lease int64) bool {
	for {
		old := w.touched.Load()
		if old == touchClosed {
			return false
		}
		if old >= lease || w.touched.CompareAndSwap(old, lease) {
			return true
		}
	}
}

// touchClosed marks a view whose actor takes no more Touches.
const touchClosed = -1

// Touched returns the latest lease a reader asked for (0: none).
func (w *View) Touched() int64 { return max(w.touched.Load(), 0) }

// closeTouches takes no more Touches and returns the latest one.
func (w *View) closeTouches() int64 { return max(w.touched.Swap(touchClosed), 0) }

// Derived returns what a reader derived from snapshot s and kept with
// [View.SetDerived], or nil: a reader that loads the snapshot another has
// read need not read again what the snapshot decides.
func (w *View) Derived(s *Snapshot) any {
	if d := w.derived.Load(); d != nil && d.snap == s {
		return d.v
	}
	return nil
}

// SetDerived keeps v, which a reader derived from snapshot s, for the
// readers that load s after it, if s is still the latest snapshot. The
// next snapshot makes it stale; it goes with the view. v must not change
// from now on.
func (w *View) SetDerived(s *Snapshot, v any) {
	if w.snap.Load() == s {
		w.derived.Store(&derived{snap: s, v: v})
	}
}

// Ended is closed once the job is terminal as its snapshot says.
func (w *View) Ended() <-chan struct{} { return w.ended }

func (w *View) end() { w.endOnce.Do(func() { close(w.ended) }) }

// publish stores s, and closes ended once s is terminal.
func (w *View) publish(s *Snapshot) {
	w.snap.Store(s)
	if !persistence.IsLive(s.Job.Status) {
		w.end()
	}
}
