package faults

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Model is what the checker holds a history to: the cluster's settings
// and the fault's times.
type Model struct {
	Nodes []string // every node's name
	Cap   int      // JobsPerCaller
	// RetryFor is the nodes' --retry-for: how long a target may keep
	// failing to be fetched before it fails.
	RetryFor time.Duration
	// JobWork bounds how long a job lives without a fault: its targets'
	// fetches (each at most the nodes' --fetch-timeout) and its wait for
	// a worker.
	JobWork time.Duration
	// Healed is when the fault was healed (the network whole again, the
	// process resumed).
	Healed time.Time
	// Lag is how late a view may be recorded: a node logs its members
	// after it has asked the new ones who they are, and the observer
	// reads the line after that. A view counts from At-Lag.
	Lag time.Duration
}

// Violation is one guarantee a history broke.
type Violation struct {
	Rule   string // lost, 404, cap, over-cap, live-after-heal, duplicate
	Detail string
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// The rules of [Check].
const (
	RuleLost      = "lost"            // an acknowledged job not readable everywhere once healed, or a target read done no longer done
	Rule404       = "404"             // a read answered 404 for a job that exists
	RuleCap       = "cap"             // a caller's live jobs over Cap × the sides at that moment
	RuleOverCap   = "over-cap"        // a caller admitted, every node seeing every node, while its live jobs already filled its cap; or the views never whole again after the heal
	RuleLive      = "live-after-heal" // a job still live after Healed + RetryFor + JobWork
	RuleDuplicate = "duplicate"       // concurrent first submits of the same targets on one side made two jobs
)

// job is what the checker gathers of one acknowledged job.
type job struct {
	id, client string
	acked      time.Time // the first 202's answer
	submitted  time.Time // the first 202's request
	lastLive   time.Time // the latest request whose answer read it live
	done       map[int]bool
}

// Check reads ops (a [History]'s) and views (a [Views]') against m and
// returns the guarantees they break, none for a history that keeps them:
//
//   - lost: every job acknowledged (a 202) is read 200 by a final read on
//     every node, with every target that any read found done still done;
//   - 404: no read, wait, cancel or final read of an acknowledged job
//     answers 404 (503 is allowed while its node is unreachable);
//   - cap: a caller's jobs certainly live at one moment (from the 202's
//     answer to the last request whose answer read it queued or running)
//     never outnumber Cap × the cluster's sides then (the distinct member
//     lists the nodes saw, within Lag);
//   - over-cap: no submit is answered 202 (a new job) while every node
//     sees every node (from Lag before the request to Lag after its
//     answer) and the caller's other jobs certainly live throughout the
//     request already fill Cap: after a heal too, the count comes down as
//     jobs end; and after Healed, the views show every node again;
//   - live-after-heal: no job is read live after its submit + JobWork, or
//     after Healed + RetryFor + JobWork;
//   - duplicate: the two submits of a pair (the same new targets, at once,
//     on two nodes), both answered 202 while the two nodes saw the same
//     members, name the same job.
func Check(ops []Op, views []View, m Model) []Violation {
	var out []Violation
	add := func(rule, format string, args ...any) {
		out = append(out, Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)})
	}
	jobs := map[string]*job{}
	for _, op := range ops {
		if op.Kind != Submit || op.Code != 202 || op.ID == "" {
			continue
		}
		j := jobs[op.ID]
		if j == nil {
			j = &job{id: op.ID, client: op.Client, acked: op.Complete, submitted: op.Invoke, done: map[int]bool{}}
			jobs[op.ID] = j
		}
		if op.Complete.Before(j.acked) {
			j.acked, j.submitted = op.Complete, op.Invoke
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, op := range ops {
		j := jobs[op.ID]
		if j == nil || op.Kind == Submit || op.Kind == List {
			continue
		}
		if op.Code == 404 {
			add(Rule404, "%s of job %s on %s at %s answered 404 (acknowledged at %s)", op.Kind, op.ID, op.Node, stamp(op.Invoke), stamp(j.acked))
		}
		if op.Code == 200 && live(op.Status) && op.Invoke.After(j.lastLive) {
			j.lastLive = op.Invoke
		}
		if op.Code == 200 && op.Kind != Final {
			for _, i := range op.Done {
				j.done[i] = true
			}
		}
	}

	// lost: read whole on every node once healed.
	for _, id := range ids {
		j := jobs[id]
		for _, node := range m.Nodes {
			var final *Op
			for i := range ops {
				if op := &ops[i]; op.Kind == Final && op.ID == id && op.Node == node && op.Code == 200 {
					final = op
				}
			}
			if final == nil {
				add(RuleLost, "job %s of %s (acknowledged at %s) never read 200 on %s once healed", id, j.client, stamp(j.acked), node)
				continue
			}
			var gone []int
			for i := range j.done {
				if !slices.Contains(final.Done, i) {
					gone = append(gone, i)
				}
			}
			if len(gone) > 0 {
				slices.Sort(gone)
				add(RuleLost, "job %s on %s: targets %v were read done, and are not in the final read", id, node, gone)
			}
		}
	}

	// live-after-heal.
	for _, id := range ids {
		j := jobs[id]
		limit := later(j.acked, m.Healed.Add(m.RetryFor)).Add(m.JobWork)
		if j.lastLive.After(limit) {
			add(RuleLive, "job %s of %s read live at %s, after %s (heal + retry-for + job work, or its submit + job work)", id, j.client, stamp(j.lastLive), stamp(limit))
		}
	}

	sides := newSides(views, m)
	// cap: certainly live intervals per caller, counted at each start.
	byClient := map[string][]*job{}
	for _, id := range ids {
		j := jobs[id]
		byClient[j.client] = append(byClient[j.client], j)
	}
	clients := make([]string, 0, len(byClient))
	for c := range byClient {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	for _, c := range clients {
		js := byClient[c]
		slices.SortFunc(js, func(a, b *job) int { return a.acked.Compare(b.acked) })
		for _, s := range js {
			if !s.lastLive.After(s.acked) {
				continue
			}
			var at []string
			for _, j := range js {
				if !j.acked.After(s.acked) && !j.lastLive.Before(s.acked) && j.lastLive.After(j.acked) {
					at = append(at, j.id)
				}
			}
			n := sides.at(s.acked)
			if len(at) > m.Cap*n {
				add(RuleCap, "%s had %d jobs live at %s (%s) with %d side(s): cap %d × %d", c, len(at), stamp(s.acked), strings.Join(at, ","), n, m.Cap, n)
			}
		}
	}

	// over-cap: new jobs admitted while every view was whole.
	if _, ok := sides.wholeAfter(m.Healed); !ok && !m.Healed.IsZero() {
		add(RuleOverCap, "the nodes' views never showed every node again after the heal at %s", stamp(m.Healed))
	}
	for _, op := range ops {
		if op.Kind != Submit || op.Code != 202 || op.Reused || !sides.whole(op.Invoke.Add(-m.Lag), op.Complete.Add(m.Lag)) {
			continue
		}
		var filling []string
		for _, j := range byClient[op.Client] {
			if j.id != op.ID && !j.acked.After(op.Invoke) && !j.lastLive.Before(op.Complete) {
				filling = append(filling, j.id)
			}
		}
		if len(filling) >= m.Cap {
			add(RuleOverCap, "%s admitted job %s on %s at %s, every node seeing every node, while %d of its jobs were live (%s): cap %d", op.Client, op.ID, op.Node, stamp(op.Invoke), len(filling), strings.Join(filling, ","), m.Cap)
		}
	}

	// duplicate: pairs answered 202 on one side.
	pairs := map[int][]Op{}
	for _, op := range ops {
		if op.Kind == Submit && op.Pair != 0 && op.Code == 202 {
			pairs[op.Pair] = append(pairs[op.Pair], op)
		}
	}
	nums := make([]int, 0, len(pairs))
	for p := range pairs {
		nums = append(nums, p)
	}
	slices.Sort(nums)
	for _, p := range nums {
		ps := pairs[p]
		if len(ps) != 2 || ps[0].ID == ps[1].ID {
			continue
		}
		lo := earlier(ps[0].Invoke, ps[1].Invoke).Add(-m.Lag)
		hi := later(ps[0].Complete, ps[1].Complete).Add(m.Lag)
		if sides.together(ps[0].Node, ps[1].Node, lo, hi) {
			add(RuleDuplicate, "%s's concurrent submits of %s on %s and %s at %s made two jobs, %s and %s, on one side", ps[0].Client, ps[0].Targets, ps[0].Node, ps[1].Node, stamp(lo), ps[0].ID, ps[1].ID)
		}
	}
	return out
}

// sides answers questions about the nodes' views over time.
type sides struct {
	views []View // oldest first
	nodes []string
	lag   time.Duration
}

func newSides(views []View, m Model) *sides {
	vs := slices.Clone(views)
	slices.SortStableFunc(vs, func(a, b View) int { return a.At.Compare(b.At) })
	return &sides{views: vs, nodes: m.Nodes, lag: m.Lag}
}

// inForce returns each node's view at t (a node with none yet is absent).
func (s *sides) inForce(t time.Time) map[string][]string {
	now := map[string][]string{}
	for _, v := range s.views {
		if v.At.After(t) {
			break
		}
		now[v.Node] = v.Members
	}
	return now
}

// count is the number of distinct member lists among the views at t; at
// least 1.
func (s *sides) count(t time.Time) int {
	var distinct []string
	for _, ms := range s.inForce(t) {
		k := strings.Join(ms, ",")
		if !slices.Contains(distinct, k) {
			distinct = append(distinct, k)
		}
	}
	return max(1, len(distinct))
}

// at is the most sides the cluster had from Lag before t to Lag after
// it, so that a view recorded late (or early) still counts.
func (s *sides) at(t time.Time) int {
	lo, hi := t.Add(-s.lag), t.Add(s.lag)
	n := s.count(lo)
	for _, v := range s.views {
		if v.At.After(lo) && !v.At.After(hi) {
			n = max(n, s.count(v.At))
		}
	}
	return n
}

// whole reports whether every node's view held every node from lo to hi.
func (s *sides) whole(lo, hi time.Time) bool {
	all := slices.Clone(s.nodes)
	slices.Sort(all)
	isWhole := func(at time.Time) bool {
		now := s.inForce(at)
		for _, n := range s.nodes {
			if !slices.Equal(now[n], all) {
				return false
			}
		}
		return true
	}
	if !isWhole(lo) {
		return false
	}
	for _, v := range s.views {
		if v.At.After(lo) && !v.At.After(hi) && !isWhole(v.At) {
			return false
		}
	}
	return true
}

// wholeAfter returns the first time from t on at which every node's view
// holds every node.
func (s *sides) wholeAfter(t time.Time) (time.Time, bool) {
	all := slices.Clone(s.nodes)
	slices.Sort(all)
	isWhole := func(at time.Time) bool {
		now := s.inForce(at)
		for _, n := range s.nodes {
			if !slices.Equal(now[n], all) {
				return false
			}
		}
		return true
	}
	if isWhole(t) {
		return t, true
	}
	for _, v := range s.views {
		if v.At.After(t) && isWhole(v.At) {
			return v.At, true
		}
	}
	return time.Time{}, false
}

// together reports whether nodes a and b saw one and the same member
// list, holding both, from lo to hi.
func (s *sides) together(a, b string, lo, hi time.Time) bool {
	times := []time.Time{lo}
	for _, v := range s.views {
		if v.At.After(lo) && !v.At.After(hi) {
			times = append(times, v.At)
		}
	}
	for _, t := range times {
		now := s.inForce(t)
		va, vb := now[a], now[b]
		if va == nil || !slices.Equal(va, vb) || !slices.Contains(va, a) || !slices.Contains(va, b) {
			return false
		}
	}
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// stamp is t as the checker prints it: the time of day to the millisecond.
func stamp(t time.Time) string { return t.Format("15:04:05.000") }
