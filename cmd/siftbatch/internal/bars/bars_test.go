package bars

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine/enginetest/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// finish runs f on its own goroutine and fails the test if it does not
// return: a bar left open would hang mpb's Wait.
func finish(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	testkit.RequireClosed(t, done)
}

// TestJobs_Endings drives the bars through every kind of ending: a job
// done, a job ended short of its total (its bar aborted), and a job that
// never starts (aborted by Finish); Finish returns.
func TestJobs_Endings(t *testing.T) {
	var out bytes.Buffer
	v := NewJobs(&out, []Job{{"job1 alice", 2}, {"job2 bob", 3}, {"job3 carol", 1}}, 0, "queued")
	if v.Shown() != 3 {
		t.Fatalf("%d bars for 3 jobs on an unknown height", v.Shown())
	}
	v.Update(0, 1, 2, "running, fetching #1 slow", false)
	v.Update(0, 2, 2, "done", true)
	v.Update(1, 1, 3, "cancelled", true)
	if !v.bars[0].Completed() || !v.bars[1].Aborted() || v.bars[2].Aborted() {
		t.Errorf("job1 completed %v (want true), job2 aborted %v (want true), job3 aborted %v (want false)",
			v.bars[0].Completed(), v.bars[1].Aborted(), v.bars[2].Aborted())
	}
	finish(t, func() { v.Finish(false) })
	if !v.bars[2].Aborted() {
		t.Error("Finish left job3's bar open")
	}
}

// TestJobs_FitsHeight: with more jobs than the terminal has rows, the
// first ones get bars and the rest one "+N more" line; an interrupt
// removes them all without hanging.
func TestJobs_FitsHeight(t *testing.T) {
	var js []Job
	for i := range 12 {
		js = append(js, Job{fmt.Sprintf("job%d alice", i+1), 2})
	}
	var out bytes.Buffer
	v := NewJobs(&out, js, 10, "queued")
	if v.Shown() != 10-Reserve || v.more == nil {
		t.Fatalf("%d bars and more %v for 12 jobs on 10 rows", v.Shown(), v.more != nil)
	}
	for i := range js {
		v.Update(i, 1, 2, "running", false)
	}
	if got := v.more.Current(); got != int64(len(js)-v.Shown()) {
		t.Errorf("the +N more line counts %d targets done, want %d", got, len(js)-v.Shown())
	}
	finish(t, func() { v.Finish(true) })
}

// TestLive_Finishes: Set moves a bar to its total without completing it
// (a job's answers go on changing after it ends), Finish ends every bar
// and returns, and a line printed after it is dropped.
func TestLive_Finishes(t *testing.T) {
	var out testkit.SyncBuffer
	v := NewLive(&out, 10*time.Millisecond)
	i := v.Add(func() string { return "job1 alice @n1" }, func() string { return "running" })
	j := v.Add(func() string { return "job2 bob @n2" }, func() string { return "queued" })
	v.Set(i, 2, 2)
	v.Set(j, 0, 0) // no total yet: nothing changes
	v.Print("step one")
	if v.bars[i].Current() != 2 || v.bars[j].Current() != 0 {
		t.Errorf("bars at %d and %d, want 2 and 0", v.bars[i].Current(), v.bars[j].Current())
	}
	finish(t, func() { v.Finish(false) })
	if !v.bars[i].Aborted() || !v.bars[j].Aborted() {
		t.Error("Finish left a bar open")
	}
	v.Print("after the end")
	if strings.Contains(out.String(), "after the end") {
		t.Errorf("printed after Finish:\n%q", out.String())
	}
}

// TestFit_NotATerminal: a buffer gets plain lines.
func TestFit_NotATerminal(t *testing.T) {
	if ok, h := Fit(&bytes.Buffer{}); ok || h != 0 {
		t.Errorf("Fit(buffer) = %v, %d; want false, 0", ok, h)
	}
}
