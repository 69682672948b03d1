package enginetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestMain checks that no test leaves a goroutine behind: a bundle closes
// its runner and store when its test ends.
func TestMain(m *testing.M) { enginetest.Main(m) }

func TestSetup_RunsAJobToDoneWithTheFakeClockAndHooks(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
	id := b.Submit(t, "alice", enginetest.Targets("a", 3))
	j := b.WaitSettled(t, id)
	if j.Status != "done" {
		t.Fatalf("job %s settled %s, want done", id, j.Status)
	}
	if j.CreatedAt != testkit.Start.Unix() {
		t.Fatalf("CreatedAt %v, want the fake clock's %v", j.CreatedAt, testkit.Start)
	}
	j, ts := b.WaitStatus(t, id, "done")
	if len(ts) != 3 || j.ID != id {
		t.Fatalf("job %+v with %d targets", j, len(ts))
	}
	if got := testkit.Recv(t, b.Hooks.Ended()); got != "done" {
		t.Fatalf("the Job hook ended the job %q", got)
	}
	testkit.WaitFor(t, "the target hooks", func() bool { return b.Hooks.Targets() == 3 })
	if b.Hooks.Job("created") != 1 || b.Hooks.Job("done") != 1 || b.Hooks.TargetErrors() != 0 {
		t.Fatalf("hooks: created %d, done %d, target errors %d", b.Hooks.Job("created"), b.Hooks.Job("done"), b.Hooks.TargetErrors())
	}
	testkit.WaitFor(t, "the JobSeconds hook", func() bool { return b.Hooks.JobSeconds() == 1 })
	if b.Hooks.Depths() == 0 || b.Hooks.MaxDepth() != 1 || b.Hooks.Inflights() == 0 || b.Hooks.MaxInflight() != 1 {
		t.Fatalf("depth %d calls max %d, inflight %d calls max %d", b.Hooks.Depths(), b.Hooks.MaxDepth(), b.Hooks.Inflights(), b.Hooks.MaxInflight())
	}
	rec, err := b.Store.Job(id)
	if err != nil || rec.Status != "done" {
		t.Fatalf("the store holds %+v, %v", rec, err)
	}
	if len(b.Logs.Lines()) == 0 {
		t.Fatalf("the bundle captured no log line")
	}
}

func TestSetup_CallsTheTestsOwnHooksAfterRecording(t *testing.T) {
	t.Parallel()
	outcomes := make(chan string, 8)
	b := enginetest.Setup(t, enginetest.FailFetch(errors.New("boom")), engine.Config{
		Hooks: engine.Hooks{Job: func(o string) { outcomes <- o }},
	})
	id := b.Submit(t, "bob", enginetest.Targets("b", 2))
	if j := b.WaitSettled(t, id); j.Status != "failed" {
		t.Fatalf("job settled %s, want failed", j.Status)
	}
	if got := testkit.Recv(t, outcomes); got != "created" {
		t.Fatalf("the test's own hook saw %q first", got)
	}
	if got := testkit.Recv(t, outcomes); got != "failed" {
		t.Fatalf("the test's own hook saw %q", got)
	}
	testkit.WaitFor(t, "two failed target hooks", func() bool { return b.Hooks.TargetErrors() == 2 })
}

func TestSetupOn_RunsOnAStoreOnDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := enginetest.OpenStore(t, dir)
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{})
	id := b.Submit(t, "carol", enginetest.Targets("c", 1))
	b.WaitStatus(t, id, "done")
	if _, err := store.Job(id); err != nil {
		t.Fatalf("the store on disk: %v", err)
	}
}

func TestGatedFetch_HoldsTargetsUntilOpen(t *testing.T) {
	t.Parallel()
	g := testkit.NewGate()
	b := enginetest.Setup(t, enginetest.GatedFetch(g), engine.Config{})
	id := b.Submit(t, "dave", enginetest.Targets("d", 2))
	testkit.Recv(t, g.Entered())
	if j, _ := b.Runner.Job(id); j.Status != "running" {
		t.Fatalf("job reads %s while its fetch waits at the gate", j.Status)
	}
	g.Open()
	b.WaitStatus(t, id, "done")
	if g.Count() != 2 {
		t.Fatalf("the gate saw %d fetches, want 2", g.Count())
	}
}

func TestCountingFetch_CountsPerURL(t *testing.T) {
	t.Parallel()
	var f enginetest.CountingFetch
	b := enginetest.Setup(t, f.Fetch, engine.Config{})
	ts := enginetest.Targets("e", 3)
	b.WaitStatus(t, b.Submit(t, "erin", ts), "done")
	b.WaitStatus(t, b.Submit(t, "erin", ts[:1]), "done")
	if f.Calls(ts[0].URL) != 2 || f.Calls(ts[1].URL) != 1 || f.Calls("http://nowhere/") != 0 || f.Total() != 4 {
		t.Fatalf("calls %d %d, total %d", f.Calls(ts[0].URL), f.Calls(ts[1].URL), f.Total())
	}
	res, err := f.Fetch(context.Background(), enginetest.Caller("x"), ts[2])
	if err != nil || res.Content != enginetest.Content(ts[2].URL) {
		t.Fatalf("a nil Next fetches like OKFetch: %+v, %v", res, err)
	}
}

func TestPanicFetch_FailsTheTargetAndNoLogCarriesTheValue(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.PanicFetch, engine.Config{})
	id := b.Submit(t, "frank", enginetest.Targets("f", 1))
	if j := b.WaitSettled(t, id); j.Status != "failed" {
		t.Fatalf("a panicking fetch settled the job %s, want failed", j.Status)
	}
	b.Runner.Close()
	testkit.RequireNoneOf(t, b.Logs.String(), enginetest.PanicValue)
}

func TestTargets_AreNamedAndNumbered(t *testing.T) {
	t.Parallel()
	ts := enginetest.Targets("job", 2)
	if len(ts) != 2 || ts[0].URL != "http://h/job/0" || ts[1].URL != "http://h/job/1" {
		t.Fatalf("targets %+v", ts)
	}
	if c := enginetest.Caller("alice"); c.Name != "alice" {
		t.Fatalf("caller %+v", c)
	}
}
