package enginetest

import (
	"maps"
	"sync"
	"time"

	"github.com/sift/batch/engine"
)

// endedBuffer is how many terminal outcomes a HookRecorder keeps
// unreceived on Ended.
const endedBuffer = 4096

// HookRecorder records every call of a runner's hooks: the calls of each
// hook, the Job hook's per outcome, the targets' errors, and the highest
// depth and inflight counts reported. Its methods are safe for concurrent
// use; make one with [NewHookRecorder].
type HookRecorder struct {
	mu          sync.Mutex
	jobs        map[string]int
	targets     int
	targetErrs  int
	jobSeconds  int
	depths      int
	inflights   int
	maxDepth    int
	maxInflight int
	ended       chan string
}

// NewHookRecorder returns a recorder that has recorded nothing.
func NewHookRecorder() *HookRecorder {
	return &HookRecorder{jobs: map[string]int{}, ended: make(chan string, endedBuffer)}
}

// Hooks returns hooks that record into h, for a Config.Hooks.
func (h *HookRecorder) Hooks() engine.Hooks { return h.chain(engine.Hooks{}) }

// chain returns hooks that record into h and then call next's hook of the
// same name, if set.
func (h *HookRecorder) chain(next engine.Hooks) engine.Hooks {
	return engine.Hooks{
		Job: func(o string) {
			h.mu.Lock()
			h.jobs[o]++
			h.mu.Unlock()
			switch o {
			case "done", "partial", "failed", "cancelled":
				select {
				case h.ended <- o:
				default:
				}
			}
			if next.Job != nil {
				next.Job(o)
			}
		},
		Target: func(err error, d time.Duration, n int) {
			h.mu.Lock()
			h.targets++
			if err != nil {
				h.targetErrs++
			}
			h.mu.Unlock()
			if next.Target != nil {
				next.Target(err, d, n)
			}
		},
		JobSeconds: func(d time.Duration) {
			h.mu.Lock()
			h.jobSeconds++
			h.mu.Unlock()
			if next.JobSeconds != nil {
				next.JobSeconds(d)
			}
		},
		Depth: func(n int) {
			h.mu.Lock()
			h.depths++
			h.maxDepth = max(h.maxDepth, n)
			h.mu.Unlock()
			if next.Depth != nil {
				next.Depth(n)
			}
		},
		Inflight: func(n int) {
			h.mu.Lock()
			h.inflights++
			h.maxInflight = max(h.maxInflight, n)
			h.mu.Unlock()
			if next.Inflight != nil {
				next.Inflight(n)
			}
		},
	}
}

// Job returns how many times the Job hook reported outcome (created,
// reused, done, partial, failed, cancelled).
func (h *HookRecorder) Job(outcome string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[outcome]
}

// Jobs returns a copy of the Job hook's counts, by outcome; outcomes never
// reported are absent.
func (h *HookRecorder) Jobs() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.jobs)
}

// Targets returns how many times the Target hook was called.
func (h *HookRecorder) Targets() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.targets
}

// TargetErrors returns how many Target hook calls carried an error.
func (h *HookRecorder) TargetErrors() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.targetErrs
}

// JobSeconds returns how many times the JobSeconds hook was called.
func (h *HookRecorder) JobSeconds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobSeconds
}

// Depths returns how many times the Depth hook was called.
func (h *HookRecorder) Depths() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.depths
}

// MaxDepth returns the highest live-job count the Depth hook reported.
func (h *HookRecorder) MaxDepth() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxDepth
}

// Inflights returns how many times the Inflight hook was called.
func (h *HookRecorder) Inflights() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inflights
}

// MaxInflight returns the highest count of targets being fetched that the
// Inflight hook reported.
func (h *HookRecorder) MaxInflight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxInflight
}

// Ended yields every terminal outcome the Job hook reported (done,
// partial, failed, cancelled), in order; up to 4096 are kept unreceived.
// Receive with testkit.Recv to wait until a job's end hook has run.
func (h *HookRecorder) Ended() <-chan string { return h.ended }
