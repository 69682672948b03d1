package actors

import (
	"fmt"

	"github.com/sift/batch/persistence"
)

// A job's life is two state machines, each with its one transition table
// here: its status (what the job is: queued, running, done, …, data stored
// in its row) and its phase (what is being done for it: idle, fetching,
// storing, …, memory only). The pair is a [life]. The job actor moves both
// (job.to, job.take) and reports its life in every jobDone; the supervisor
// keeps the last life it heard of each job (liveJob.life) and moves it
// itself only where it acts (a dispatch, the end of a retry wait, the
// drain), checked against the same tables. So there is one job life, held
// by its actor and seen by the supervisor through messages.
//
// docs/ARCHITECTURE.md draws both machines; its diagrams are generated from
// these tables (diagram.go: `go generate ./actors`), and TestDiagrams fails
// when they differ.

// life is how a job stands: its status and its phase.
type life struct {
	status string
	phase  phase
}

func (l life) String() string { return l.status + "/" + l.phase.String() }

// live reports whether the job counts as live (queued or running): for the
// caps and Hooks.Depth. A live job is never settled.
func (l life) live() bool { return persistence.IsLive(l.status) }

// inRotation reports whether the job has its place in the rotation: live,
// and idle or storing (see supervisor).
func (l life) inRotation() bool {
	return l.live() && (l.phase == phaseIdle || l.phase == phaseStoring)
}

// phase is what is being done for a job.
type phase uint8

const (
	phaseIdle     phase = iota // nothing in flight; a live job waits for a dispatch
	phaseFetching              // its target TargetsDone is at a worker
	phaseStoring               // that target's outcome is at the store's writer; the actor stashes every message until it answers
	phaseWaiting               // live, its next target was busy: out of the rotation until RetryWait has passed
	phaseUnsaved               // ended, nothing in flight, a write of it failed: the store's writer retries it until written
	phaseSettled               // ended and written: the supervisor stops the actor
	nPhases
)

var phaseNames = [...]string{phaseIdle: "idle", phaseFetching: "fetching", phaseStoring: "storing", phaseWaiting: "waiting",
	phaseUnsaved: "unsaved", phaseSettled: "settled"}

func (p phase) String() string { return phaseNames[p] }

// transition is one allowed change of a machine, and what causes it.
type transition[S comparable] struct {
	from, to S
	why      string
}

// machine is a state machine's table: its first state, its allowed
// transitions, and its last states (where the job's record ends).
type machine[S comparable] struct {
	name     string // the diagram's marker in docs/ARCHITECTURE.md
	start    S
	startWhy string
	edges    []transition[S]
	ends     []transition[S] // from: a last state; why: how the record ends
}

// allows reports whether the machine has a transition from → to.
func (m *machine[S]) allows(from, to S) bool {
	for i := range m.edges {
		if m.edges[i].from == from && m.edges[i].to == to {
			return true
		}
	}
	return false
}

// statusMachine is a job's status. Queued and running are live
// (persistence.IsLive); the others are terminal and never change. Reaping
// (engine.New after a restart or a failure) writes "failed" without an
// actor; it is listed for the whole picture.
var statusMachine = machine[string]{
	name:     "job-status",
	start:    persistence.StatusQueued,
	startWhy: "Submit (stored before it returns)",
	edges: []transition[string]{
		{persistence.StatusQueued, persistence.StatusRunning, "first dispatch"},
		{persistence.StatusQueued, persistence.StatusCancelled, "Cancel"},
		{persistence.StatusQueued, persistence.StatusFailed, "Close (shutdown), a restart or the runner failed (reaped)"},
		{persistence.StatusRunning, persistence.StatusDone, "last target stored, all done"},
		{persistence.StatusRunning, persistence.StatusPartial, "last target stored, a mix"},
		{persistence.StatusRunning, persistence.StatusFailed, "last target stored, all failed, or as from queued"},
		{persistence.StatusRunning, persistence.StatusCancelled, "Cancel"},
	},
	ends: []transition[string]{
		{from: persistence.StatusDone, why: "swept at lease + TTL, or evicted"},
		{from: persistence.StatusPartial, why: "the same"},
		{from: persistence.StatusFailed, why: "the same"},
		{from: persistence.StatusCancelled, why: "the same"},
	},
}

//go:generate go test -run ^TestDiagrams$ -update .

// phaseMachine is a job's phase. It is one table for the job actor and the
// supervisor: the supervisor's own moves are dispatch (idle → fetching),
// retryReady (waiting → idle) and the drain (→ settled).
var phaseMachine = machine[phase]{
	name:     "job-phase",
	start:    phaseIdle,
	startWhy: "Submit spawns its actor, it joins the rotation",
	edges: []transition[phase]{
		{phaseIdle, phaseFetching, "dispatch (a worker is the job's for target TargetsDone)"},
		{phaseIdle, phaseSettled, "Cancel, shutdown, the drain"},
		{phaseIdle, phaseUnsaved, "Cancel or shutdown, a write of the job being retried by the store's writer"},
		{phaseFetching, phaseStoring, "fetched (the outcome goes to the store's writer, the worker is free)"},
		{phaseFetching, phaseIdle, "abandoned at shutdown (the target stays pending)"},
		{phaseFetching, phaseWaiting, "fetched busy within RetryFor, or (durable) its running row not stored: the disk full or failing"},
		{phaseFetching, phaseSettled, "busy or abandoned, of a job cancelled meanwhile"},
		{phaseFetching, phaseUnsaved, "the same, a write of it being retried"},
		{phaseStoring, phaseIdle, "written, or being retried by the store's writer, the job still live (the stash is handled next)"},
		{phaseStoring, phaseSettled, "written, and the job has ended"},
		{phaseStoring, phaseUnsaved, "the same, a write of it being retried"},
		{phaseWaiting, phaseIdle, "retryReady, RetryWait has passed (the job hears of it by its dispatch)"},
		{phaseWaiting, phaseSettled, "Cancel, shutdown, the drain"},
		{phaseWaiting, phaseUnsaved, "the same, a write of it being retried"},
		{phaseUnsaved, phaseSettled, "lateWritten, the writer has written everything, or the drain"},
	},
	ends: []transition[phase]{
		{from: phaseSettled, why: "the supervisor stops its actor and forgets it"},
	},
}

// reaches reports whether the machine goes from → to in one transition or
// more.
func (m *machine[S]) reaches(from, to S) bool {
	seen := map[S]bool{from: true}
	for todo := []S{from}; len(todo) > 0; todo = todo[1:] {
		for _, e := range m.edges {
			if e.from != todo[0] || seen[e.to] {
				continue
			}
			if e.to == to {
				return true
			}
			seen[e.to] = true
			todo = append(todo, e.to)
		}
	}
	return false
}

// phaseSteps is phaseMachine as lookups, since to runs on every target:
// [0] one transition, [1] one or more.
var phaseSteps = func() (a [2][nPhases][nPhases]bool) {
	for _, e := range phaseMachine.edges {
		a[0][e.from][e.to] = true
	}
	for from := range nPhases {
		for to := range nPhases {
			a[1][from][to] = phaseMachine.reaches(from, to)
		}
	}
	return a
}()

// statusReaches is statusMachine.reaches as a lookup.
var statusReaches = func() map[[2]string]bool {
	m := map[[2]string]bool{}
	for _, e := range statusMachine.edges {
		for _, to := range []string{persistence.StatusRunning, persistence.StatusDone, persistence.StatusPartial,
			persistence.StatusFailed, persistence.StatusCancelled} {
			if statusMachine.reaches(e.from, to) {
				m[[2]string{e.from, to}] = true
			}
		}
	}
	return m
}()

// checkLife panics unless from → to is allowed by both tables (a machine
// that stays put is allowed): in one transition each (the job actor, which
// makes every change), or in one or more (the supervisor, which hears of
// the changes only in the job's reports). A panic is a bug of ours: the
// supervisor's strategy fails the runner closed.
func checkLife(id string, from, to life, steps bool) {
	if from.status != to.status {
		ok := statusMachine.allows(from.status, to.status)
		if steps {
			ok = statusReaches[[2]string{from.status, to.status}]
		}
		if !ok {
			panic(fmt.Sprintf("job %s: no status transition from %s to %s", id, from.status, to.status))
		}
	}
	if from.phase != to.phase && !phaseSteps[b2i(steps)][from.phase][to.phase] {
		panic(fmt.Sprintf("job %s: no phase transition from %s to %s", id, from.phase, to.phase))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
