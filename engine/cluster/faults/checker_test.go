package faults

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is the synthetic histories' start.
var t0 = time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)

// at is t0 + s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

var nodes3 = []string{"n1", "n2", "n3"}

// model is the synthetic histories' model: cap 1, healed at 10 s.
func model() Model {
	return Model{Nodes: nodes3, Cap: 1, RetryFor: 3 * time.Second, JobWork: 2 * time.Second, Healed: at(10), Lag: 500 * time.Millisecond}
}

// whole is every node's view of all three from t0.
func whole() []View {
	var vs []View
	for _, n := range nodes3 {
		vs = append(vs, View{Node: n, At: t0, Members: nodes3})
	}
	return vs
}

// submitted is a 202 for client's job id on node, from s to s+0.1.
func submitted(client, node, id string, s float64) Op {
	return Op{Client: client, Node: node, Kind: Submit, ID: id, Targets: id, Invoke: at(s), Complete: at(s + 0.1), Code: 202, Status: "queued"}
}

// read is a read of id on node at s answering code and status, done
// targets done.
func read(kind Kind, client, node, id string, s float64, code int, status string, done ...int) Op {
	return Op{Client: client, Node: node, Kind: kind, ID: id, Invoke: at(s), Complete: at(s + 0.05), Code: code, Status: status, Done: done}
}

// finals are final reads of id, done, through every node at s.
func finals(client, id string, s float64, done ...int) []Op {
	var ops []Op
	for _, n := range nodes3 {
		ops = append(ops, read(Final, client, n, id, s, 200, "done", done...))
	}
	return ops
}

// rules returns the rules of vs, in order.
func rules(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Rule)
	}
	return out
}

// TestCheck_KeptHistory: a history that keeps every guarantee (a job
// read live then done, a 503 while its node was away, one job per
// caller at a time, a pair that made one job) has no violation.
func TestCheck_KeptHistory(t *testing.T) {
	ops := []Op{
		submitted("a", "n1", "j1", 1),
		read(Read, "a", "n2", "j1", 1.5, 200, "running", 0),
		read(Read, "a", "n3", "j1", 2, 503, ""),
		read(Wait, "a", "n2", "j1", 2.5, 200, "done", 0, 1),
		submitted("a", "n2", "j2", 3),
		read(Read, "a", "n1", "j2", 3.5, 200, "done", 0, 1),
		{Client: "b", Node: "n1", Kind: Submit, ID: "k1", Targets: "t", Pair: 1, Invoke: at(4), Complete: at(4.1), Code: 202},
		{Client: "b", Node: "n2", Kind: Submit, ID: "k1", Targets: "t", Pair: 1, Invoke: at(4), Complete: at(4.1), Code: 202, Reused: true},
		read(Read, "b", "n3", "k1", 5, 200, "done"),
		{Client: "b", Node: "n1", Kind: List, Invoke: at(5), Complete: at(5.1), Code: 200},
	}
	for _, id := range []string{"j1", "j2"} {
		ops = append(ops, finals("a", id, 20, 0, 1)...)
	}
	ops = append(ops, finals("b", "k1", 20)...)
	if vs := Check(ops, whole(), model()); len(vs) > 0 {
		t.Fatalf("violations of a kept history: %v", vs)
	}
}

// TestCheck_Lost: a job never read 200 on one node once healed, and a
// target read done that the final read no longer has, are lost.
func TestCheck_Lost(t *testing.T) {
	ops := []Op{submitted("a", "n1", "j1", 1), read(Read, "a", "n1", "j1", 2, 200, "done", 0, 1)}
	ops = append(ops, finals("a", "j1", 20, 0, 1)[:2]...)
	ops = append(ops, read(Final, "a", "n3", "j1", 20, 503, ""))
	vs := Check(ops, whole(), model())
	if !slices.Equal(rules(vs), []string{RuleLost}) || !strings.Contains(vs[0].Detail, "never read 200 on n3") {
		t.Fatalf("got %v, want one lost on n3", vs)
	}
	ops = append(ops[:2], finals("a", "j1", 20, 0)...)
	vs = Check(ops, whole(), model())
	if len(vs) != 3 || vs[0].Rule != RuleLost || !strings.Contains(vs[0].Detail, "targets [1] were read done") {
		t.Fatalf("got %v, want target 1 lost on each node", vs)
	}
}

// TestCheck_404: a read of an acknowledged job answering 404 is a
// violation, whatever its kind; a 503 is not.
func TestCheck_404(t *testing.T) {
	ops := []Op{submitted("a", "n1", "j1", 1), read(Wait, "a", "n2", "j1", 2, 404, ""), read(Read, "a", "n3", "j1", 2, 503, "")}
	ops = append(ops, finals("a", "j1", 20)...)
	vs := Check(ops, whole(), model())
	if !slices.Equal(rules(vs), []string{Rule404}) || !strings.Contains(vs[0].Detail, "wait of job j1 on n2") {
		t.Fatalf("got %v, want one 404", vs)
	}
}

// TestCheck_CapCountsSides: two jobs of a caller live at once, cap 1,
// break the cap on a whole cluster, and not while the views show two
// sides (within Lag of the moment).
func TestCheck_CapCountsSides(t *testing.T) {
	ops := []Op{
		submitted("a", "n1", "j1", 1), read(Read, "a", "n1", "j1", 3, 200, "running"),
		submitted("a", "n3", "j2", 2), read(Read, "a", "n3", "j2", 3, 200, "running"),
	}
	for _, id := range []string{"j1", "j2"} {
		ops = append(ops, finals("a", id, 20)...)
	}
	vs := Check(ops, whole(), model())
	if !slices.Equal(rules(vs), []string{RuleCap, RuleOverCap}) || !strings.Contains(vs[0].Detail, "2 jobs live") {
		t.Fatalf("got %v, want the cap broken (and the second admitted over it)", vs)
	}
	split := append(whole(),
		View{Node: "n1", At: at(1.9), Members: []string{"n1", "n2"}},
		View{Node: "n2", At: at(1.9), Members: []string{"n1", "n2"}},
		View{Node: "n3", At: at(2.4), Members: []string{"n3"}})
	m := model()
	m.Healed = time.Time{}
	if vs := Check(ops, split, m); len(vs) > 0 {
		t.Fatalf("two sides, two jobs: %v", vs)
	}
}

// TestCheck_OverCapAfterHeal: once the views are whole again after the
// heal, a new job admitted while the caller's live jobs fill its cap is
// a violation; views that never come whole again after the heal are one
// too.
func TestCheck_OverCapAfterHeal(t *testing.T) {
	views := append(whole(),
		View{Node: "n3", At: at(5), Members: []string{"n3"}},
		View{Node: "n3", At: at(11), Members: nodes3})
	ops := []Op{
		submitted("a", "n1", "j1", 9), read(Read, "a", "n1", "j1", 13, 200, "running"),
		submitted("a", "n2", "j2", 12), read(Read, "a", "n2", "j2", 12.5, 200, "done"),
	}
	for _, id := range []string{"j1", "j2"} {
		ops = append(ops, finals("a", id, 20)...)
	}
	m := model()
	vs := Check(ops, views, m)
	if !slices.Contains(rules(vs), RuleOverCap) {
		t.Fatalf("got %v, want an admission over the cap after the heal", vs)
	}
	vs = Check(ops, views[:len(views)-1], m)
	found := false
	for _, v := range vs {
		found = found || v.Rule == RuleOverCap && strings.Contains(v.Detail, "never showed every node again")
	}
	if !found {
		t.Fatalf("got %v, want views never whole again", vs)
	}
}

// TestCheck_LiveAfterHeal: a job read live after Healed + RetryFor +
// JobWork is a violation; read live before that it is not.
func TestCheck_LiveAfterHeal(t *testing.T) {
	ops := []Op{submitted("a", "n1", "j1", 1), read(Read, "a", "n1", "j1", 14.5, 200, "running")}
	ops = append(ops, finals("a", "j1", 20)...)
	if vs := Check(ops, whole(), model()); len(vs) > 0 {
		t.Fatalf("live within the bound: %v", vs)
	}
	ops[1] = read(Read, "a", "n1", "j1", 15.5, 200, "running")
	vs := Check(ops, whole(), model())
	if !slices.Equal(rules(vs), []string{RuleLive}) {
		t.Fatalf("got %v, want live after the heal", vs)
	}
}

// TestCheck_Duplicate: the two concurrent submits of a pair answering two
// jobs on one side are a violation; on two sides they are not.
func TestCheck_Duplicate(t *testing.T) {
	ops := []Op{
		{Client: "b", Node: "n1", Kind: Submit, ID: "k1", Targets: "t", Pair: 7, Invoke: at(4), Complete: at(4.1), Code: 202},
		{Client: "b", Node: "n2", Kind: Submit, ID: "k2", Targets: "t", Pair: 7, Invoke: at(4), Complete: at(4.1), Code: 202},
	}
	for _, id := range []string{"k1", "k2"} {
		ops = append(ops, finals("b", id, 20)...)
	}
	m := model()
	m.Cap = 2
	vs := Check(ops, whole(), m)
	if !slices.Equal(rules(vs), []string{RuleDuplicate}) {
		t.Fatalf("got %v, want a duplicate", vs)
	}
	split := append(whole(), View{Node: "n2", At: at(3), Members: []string{"n2"}}, View{Node: "n1", At: at(3), Members: []string{"n1", "n3"}})
	m.Healed = time.Time{}
	if vs := Check(ops, split, m); len(vs) > 0 {
		t.Fatalf("two sides: %v", vs)
	}
}
