package powercuttest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// history is a round's history: job a (2 targets, target 0 shown done
// with "x"), job b cancelled; all answered before the cut at cut.
func history(cut time.Time) *History {
	h := &History{}
	h.AddSubmit(Submit{Key: "k", ID: "a", Targets: 2, At: cut.Add(-3 * time.Second)})
	h.AddShown(Shown{Key: "k", ID: "a", Idx: 0, Sum: SumOf("x"), At: cut.Add(-2 * time.Second)})
	h.AddSubmit(Submit{Key: "k", ID: "b", Targets: 1, At: cut.Add(-time.Second)})
	h.AddCancel(Cancel{Key: "k", ID: "b", At: cut.Add(-time.Second / 2)})
	return h
}

// intact is what serve reads back when nothing was lost.
func intact() map[string]Reading {
	return map[string]Reading{
		"a": {Code: 200, Status: "failed", Done: map[int]Sum{0: SumOf("x")}},
		"b": {Code: 200, Status: "cancelled"},
	}
}

func TestCheck_Intact(t *testing.T) {
	cut := time.Now()
	require.Empty(t, Check(history(cut), cut, intact()))
	s, tg, c := history(cut).Counts(cut)
	require.Equal(t, []int{2, 1, 1}, []int{s, tg, c})
}

// Each rule, broken by a reading that breaks it alone (or, for a lost
// job, with the rules that follow from it).
func TestCheck_Rules(t *testing.T) {
	cut := time.Now()
	for _, tc := range []struct {
		name    string
		breakIt func(map[string]Reading)
		want    []Loss
	}{
		{"submit lost", func(r map[string]Reading) { r["b"] = Reading{Code: 404} },
			[]Loss{{RuleSubmitLost, "b", -1, time.Second}}},
		{"target lost", func(r map[string]Reading) { r["a"] = Reading{Code: 200, Status: "failed"} },
			[]Loss{{RuleTargetLost, "a", 0, 2 * time.Second}}},
		{"target unreadable", func(r map[string]Reading) {
			r["a"] = Reading{Code: 200, Status: "failed", Unreadable: map[int]bool{0: true}}
		}, []Loss{{RuleTargetUnreadable, "a", 0, 2 * time.Second}}},
		{"target changed", func(r map[string]Reading) {
			r["a"] = Reading{Code: 200, Status: "failed", Done: map[int]Sum{0: SumOf("y")}}
		}, []Loss{{RuleTargetChanged, "a", 0, 2 * time.Second}}},
		{"cancel lost", func(r map[string]Reading) { r["b"] = Reading{Code: 200, Status: "failed"} },
			[]Loss{{RuleCancelLost, "b", -1, time.Second / 2}}},
		{"live after restart", func(r map[string]Reading) {
			r["a"] = Reading{Code: 200, Status: "running", Done: map[int]Sum{0: SumOf("x")}}
		}, []Loss{{RuleLive, "a", -1, 0}}},
		{"unread", func(r map[string]Reading) { delete(r, "b") },
			[]Loss{{RuleUnread, "b", -1, time.Second}, {RuleUnread, "b", -1, time.Second / 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := intact()
			tc.breakIt(after)
			require.Equal(t, tc.want, Check(history(cut), cut, after))
		})
	}
}

// An answer that arrived after the cut acknowledges nothing (the power
// was off): its job, target or cancel may be lost.
func TestCheck_AfterTheCutAcknowledgesNothing(t *testing.T) {
	cut := time.Now()
	h := history(cut)
	h.AddSubmit(Submit{Key: "k", ID: "c", At: cut.Add(time.Millisecond)})
	h.AddShown(Shown{Key: "k", ID: "a", Idx: 1, Sum: SumOf("z"), At: cut})
	h.AddCancel(Cancel{Key: "k", ID: "a", At: cut.Add(time.Second)})
	h.AddShown(Shown{Key: "k", ID: "a", Idx: 0, Sum: SumOf("x"), At: cut.Add(-time.Second)}) // read again: counted once
	require.Empty(t, Check(h, cut, intact()))
	s, tg, c := h.Counts(cut)
	require.Equal(t, []int{2, 1, 1}, []int{s, tg, c})
}
