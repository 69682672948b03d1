// Package powercuttest is the power-cut test of serve (docs/RELIABILITY.md,
// "Power cut"): clients' histories of what serve answered them, and the
// checker that reads a history against what serve reads back after the
// power was cut and serve restarted. The test itself, which runs serve
// processes on engine/enginetest/powercut's file system, is this
// package's powercut_linux_test.go.
package powercuttest

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Sum is a result's content, hashed.
type Sum [sha256.Size]byte

// SumOf hashes a result's content.
func SumOf(content string) Sum { return sha256.Sum256([]byte(content)) }

// History is what the clients of one serve were answered. Safe for
// concurrent use; the zero value is ready.
type History struct {
	mu      sync.Mutex
	submits []Submit
	shown   []Shown
	cancels []Cancel
}

// Submit is a submit answered 202: the job is acknowledged.
type Submit struct {
	Key, ID string
	Targets int
	At      time.Time // the answer's arrival
}

// Shown is a read that showed a target done, with its content.
type Shown struct {
	Key, ID string
	Idx     int
	Sum     Sum
	At      time.Time
}

// Cancel is a cancel answered 200 {"cancelled":true}.
type Cancel struct {
	Key, ID string
	At      time.Time
}

// AddSubmit records a 202.
func (h *History) AddSubmit(s Submit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.submits = append(h.submits, s)
}

// AddShown records a target a read showed done.
func (h *History) AddShown(s Shown) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shown = append(h.shown, s)
}

// AddCancel records a cancel answered 200.
func (h *History) AddCancel(c Cancel) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancels = append(h.cancels, c)
}

// Job is an acknowledged job: its caller's key and its id.
type Job struct{ Key, ID string }

// Jobs returns the acknowledged jobs, each once.
func (h *History) Jobs() []Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var out []Job
	for _, s := range h.submits {
		if !seen[s.ID] {
			seen[s.ID] = true
			out = append(out, Job{s.Key, s.ID})
		}
	}
	return out
}

// Counts returns how many jobs were acknowledged, targets shown done and
// cancels answered 200 before cut, each counted once.
func (h *History) Counts(cut time.Time) (submits, targets, cancels int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	jobs, cancelled := map[string]bool{}, map[string]bool{}
	shown := map[string]map[int]bool{}
	for _, s := range h.submits {
		if s.At.Before(cut) {
			jobs[s.ID] = true
		}
	}
	for _, s := range h.shown {
		if s.At.Before(cut) {
			if shown[s.ID] == nil {
				shown[s.ID] = map[int]bool{}
			}
			if !shown[s.ID][s.Idx] {
				shown[s.ID][s.Idx] = true
				targets++
			}
		}
	}
	for _, c := range h.cancels {
		if c.At.Before(cut) {
			cancelled[c.ID] = true
		}
	}
	return len(jobs), targets, len(cancelled)
}

// Reading is a job as serve read it back after the restart.
type Reading struct {
	Code   int    // the HTTP status of GET /v1/batch/{id}
	Status string // the job's status (a 200)
	Done   map[int]Sum
	// Unreadable are the targets that read done whose result does not
	// read (GET /v1/batch/{id}/{idx} fails).
	Unreadable map[int]bool
}

// The rules a history is checked against: each Loss names one.
const (
	// RuleSubmitLost: a job answered 202 reads 404 (or anything but 200).
	RuleSubmitLost = "submit-lost"
	// RuleTargetLost: a target a read showed done is not done.
	RuleTargetLost = "target-lost"
	// RuleTargetUnreadable: a target a read showed done reads done, but
	// its result does not read.
	RuleTargetUnreadable = "target-unreadable"
	// RuleTargetChanged: a target a read showed done has other content.
	RuleTargetChanged = "target-changed"
	// RuleCancelLost: a job whose cancel was answered 200 does not read
	// cancelled.
	RuleCancelLost = "cancel-lost"
	// RuleLive: a job reads queued or running after the restart (the
	// restart fails every live job).
	RuleLive = "live-after-restart"
	// RuleUnread: an acknowledged job was not read back at all.
	RuleUnread = "unread"
)

// Loss is one acknowledgement that the reading after the restart breaks.
type Loss struct {
	Rule string
	ID   string
	Idx  int           // a target's, or -1
	Age  time.Duration // from the acknowledgement to the cut
}

func (l Loss) String() string {
	if l.Idx >= 0 {
		return fmt.Sprintf("%s: job %s target %d (acknowledged %s before the cut)", l.Rule, l.ID, l.Idx, l.Age.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s: job %s (acknowledged %s before the cut)", l.Rule, l.ID, l.Age.Round(time.Millisecond))
}

// Check reads the history h, of answers that arrived before the cut at
// cut (later ones do not count: a power cut ends every answer), against
// after, the jobs read back after the restart, by id; jobs acknowledged
// in h but missing from after break RuleUnread. It returns every loss,
// in the order of the rules.
func Check(h *History, cut time.Time, after map[string]Reading) []Loss {
	h.mu.Lock()
	defer h.mu.Unlock()
	var losses []Loss
	read := func(id string, at time.Time, idx int) (Reading, bool) {
		r, ok := after[id]
		if !ok {
			losses = append(losses, Loss{RuleUnread, id, idx, cut.Sub(at)})
		}
		return r, ok
	}
	acked := map[string]bool{}
	for _, s := range h.submits {
		if !s.At.Before(cut) || acked[s.ID] {
			continue
		}
		acked[s.ID] = true
		if r, ok := read(s.ID, s.At, -1); ok && r.Code != 200 {
			losses = append(losses, Loss{RuleSubmitLost, s.ID, -1, cut.Sub(s.At)})
		}
	}
	type target struct {
		id  string
		idx int
	}
	seen := map[target]bool{}
	for _, s := range h.shown {
		if !s.At.Before(cut) || seen[target{s.ID, s.Idx}] {
			continue
		}
		seen[target{s.ID, s.Idx}] = true
		r, ok := read(s.ID, s.At, s.Idx)
		if !ok {
			continue
		}
		switch sum, done := r.Done[s.Idx]; {
		case r.Unreadable[s.Idx]:
			losses = append(losses, Loss{RuleTargetUnreadable, s.ID, s.Idx, cut.Sub(s.At)})
		case !done:
			losses = append(losses, Loss{RuleTargetLost, s.ID, s.Idx, cut.Sub(s.At)})
		case sum != s.Sum:
			losses = append(losses, Loss{RuleTargetChanged, s.ID, s.Idx, cut.Sub(s.At)})
		}
	}
	cancelled := map[string]bool{}
	for _, c := range h.cancels {
		if !c.At.Before(cut) || cancelled[c.ID] {
			continue
		}
		cancelled[c.ID] = true
		if r, ok := read(c.ID, c.At, -1); ok && r.Code == 200 && r.Status != "cancelled" {
			losses = append(losses, Loss{RuleCancelLost, c.ID, -1, cut.Sub(c.At)})
		}
	}
	ids := make([]string, 0, len(after))
	for id := range after {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if st := after[id].Status; st == "queued" || st == "running" {
			losses = append(losses, Loss{RuleLive, id, -1, 0})
		}
	}
	return losses
}
