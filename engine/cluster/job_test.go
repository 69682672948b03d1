package cluster_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/clustertest"
)

// TestNode_ReadJob: a node reads another node's job and its targets (with
// their options) from that node, whoever the caller; a job of its own, or
// of a tag it never met, it leaves to its runner; a job that node lacks
// reads as none; a node that has gone, or one too old to be asked, is an
// error wrapping ErrNodeUnavailable that names it.
func TestNode_ReadJob(t *testing.T) {
	t.Parallel()
	tc := clustertest.Start(t, clustertest.Options{}, "a", "b")
	a, b := tc.Node("a"), tc.Node("b")
	onA := a.Submit(t, "alice-key", "https://example.com/a")
	a.WaitDone(t, onA)
	onB, _, err := b.Runner.Submit(context.Background(), &engine.Caller{Name: "bob"}, "", []engine.Target{
		{URL: "https://example.com/b/0"}, {URL: "https://example.com/b/1", Options: engine.Options{Grep: "x", JQ: ".a"}}})
	if err != nil {
		t.Fatal(err)
	}
	b.WaitDone(t, onB)
	ctx := context.Background()

	for _, id := range []string{onA, "ffffffff" + onA[8:], "not an id"} {
		if j, ts, node, err := a.Node.ReadJob(ctx, id); node != "" || err != nil || j.ID != "" || ts != nil {
			t.Errorf("ReadJob(%q) on a: %+v %v %q %v, want it left to a's runner", id, j, ts, node, err)
		}
	}
	j, ts, node, err := a.Node.ReadJob(ctx, onB)
	want, wantTS, _ := b.Runner.Targets(onB)
	if err != nil || node != "b" || j != want || len(ts) != 2 {
		t.Fatalf("ReadJob of b's job on a: %+v %d targets %q %v, want %+v", j, len(ts), node, err, want)
	}
	for i := range ts {
		if ts[i].URL != wantTS[i].URL || ts[i].Status != wantTS[i].Status || ts[i].Options != wantTS[i].Options ||
			ts[i].Duration != wantTS[i].Duration || ts[i].StoredAt != wantTS[i].StoredAt {
			t.Errorf("target %d read from b: %+v, want %+v", i, ts[i], wantTS[i])
		}
	}
	tag := hex.EncodeToString(b.Node.Tag())
	if j, _, node, err := a.Node.ReadJob(ctx, tag+strings.Repeat("0", 24)); err != nil || node != "b" || j.ID != "" {
		t.Errorf("ReadJob of a job b lacks: %+v %q %v, want none, from b", j, node, err)
	}

	// A member too old to answer a JobRequest is not sent one.
	cluster.ForgetJobReads(a.Node)
	if _, _, node, err := a.Node.ReadJob(ctx, onB); !errors.Is(err, cluster.ErrNodeUnavailable) || node != "b" || !strings.Contains(err.Error(), "older siftbatch") {
		t.Errorf("ReadJob from an older node: %q %v", node, err)
	}

	// A job whose targets' text passes 256 KiB: the first of them.
	var big []engine.Target
	for i := range 8 {
		big = append(big, engine.Target{URL: fmt.Sprintf("https://example.com/%d/%s", i, strings.Repeat("x", 64<<10))})
	}
	bigID, _, err := b.Runner.Submit(ctx, &engine.Caller{Name: "bob"}, "", big)
	if err != nil {
		t.Fatal(err)
	}
	b.WaitDone(t, bigID)
	cluster.LearnJobReads(a.Node)
	j, ts, _, err = a.Node.ReadJob(ctx, bigID)
	if err != nil || j.TargetsTotal != len(big) || len(ts) == 0 || len(ts) >= len(big) {
		t.Fatalf("ReadJob of a job of 8 targets of 64 KiB each: %d of %d targets, %v", len(ts), j.TargetsTotal, err)
	}
	for i := range ts {
		if ts[i].Idx != i || ts[i].URL != big[i].URL {
			t.Errorf("target %d of the first read: %d %.40s", i, ts[i].Idx, ts[i].URL)
		}
	}

	tc.Stop(b)
	clustertest.WaitSees(t, a, 1)
	if _, _, node, err := a.Node.ReadJob(ctx, onB); !errors.Is(err, cluster.ErrNodeUnavailable) || node != "b" || !strings.Contains(err.Error(), "node b") {
		t.Errorf("ReadJob with b gone: %q %v", node, err)
	}
}
