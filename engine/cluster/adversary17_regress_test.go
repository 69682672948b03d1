package cluster_test

// Adversarial checks of issue 17 that fail: each a defect, with the rule it
// breaks and what was observed.

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// gatedAdmission is a node's Admission that, while gate is set, holds each
// admitted submission (after its grain said ADMIT, before the runner creates
// the job) until gate is closed: a slow node, to order two first submits.
type gatedAdmission struct {
	engine.Admission
	admitted chan struct{}
	gate     chan struct{}
	armed    atomic.Bool // holds the next admitted submission only
}

func (g *gatedAdmission) Admit(ctx context.Context, caller, key, id string) (string, error) {
	reuse, err := g.Admission.Admit(ctx, caller, key, id)
	if err == nil && reuse == "" && g.armed.Swap(false) {
		g.admitted <- struct{}{}
		<-g.gate
	}
	return reuse, err
}

// addGated starts a node as tc.add does, its Admission wrapped in gated.
func (tc *testCluster) addGated(name string, gated *gatedAdmission) *node {
	t := tc.t
	t.Helper()
	log := slog.New(slog.NewTextHandler(tc.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cn, err := cluster.New(cluster.Config{Name: tc.name, Node: name, Addr: "127.0.0.1:0", TLS: nodeTLS(t, name),
		Provider: cluster.ProtoactorProvider(test.NewTestProvider(tc.agent)), Timeout: 3 * time.Second, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	gated.Admission = cn.Admission()
	cfg := tc.cfg
	cfg.NodeTag, cfg.Admission = cn.Tag(), gated
	cfg.TargetsPerJob = 64
	r, err := engine.New(store, tc.fetch, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(r, keys, httpapi.Options{Cluster: cn, TargetsPerJob: 64, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := cn.Start(r, api); err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, store: store, runner: r, node: cn, api: api, srv: httptest.NewServer(api)}
	tc.nodes = append(tc.nodes, n)
	return n
}

// Rule (issue 17, 3; docs/CLUSTER.md "Reuse"): an idempotent resubmit to any
// node returns the same job while that job's node is a member.
//
// Observed: two first submits of the same targets race (allowed: a slow node
// a holds its admission while b's first submit is admitted too, so two jobs
// exist, ja on a and jb on b, both live). Once jb is cancelled, a resubmit
// on a returns ja (a's runner's own idempotency), but the grain never learns
// of ja: a resubmit of the same targets on b then creates a third job,
// while ja is live on a, a member. Two resubmits in a row, on two members,
// answer two different live jobs.
func TestAdv17Regress_ResubmitAfterRaceSplitsJobs(t *testing.T) {
	w := watchCaps(t)
	tc := newTestCluster(t)
	tc.cfg.JobsPerCaller, tc.cfg.JobsTotal = 4, 64
	ga := &gatedAdmission{admitted: make(chan struct{}, 1), gate: make(chan struct{})}
	ga.armed.Store(true)
	a := tc.addGated("a", ga)
	b := tc.add("b")
	tc.waitMembers(2)

	const url = "https://example.com/same/hold"
	type answer struct {
		code int
		id   string
	}
	first := make(chan answer, 1)
	go func() {
		code, id := post(t, a, "alice-key", url)
		first <- answer{code, id}
	}()
	select {
	case <-ga.admitted:
	case <-time.After(20 * time.Second):
		t.Fatal("a's first submit was not admitted")
	}
	codeB, jb := post(t, b, "alice-key", url) // a has not created its job yet
	close(ga.gate)
	fa := <-first
	if fa.code != http.StatusAccepted || codeB != http.StatusAccepted {
		t.Fatalf("first submits: a %d, b %d", fa.code, codeB)
	}
	ja := fa.id
	t.Logf("two first submits: %s on a, %s on b", ja, jb)
	if ja == jb {
		t.Skip("the first submits did not race: one job")
	}
	if !b.runner.Cancel(jb) {
		t.Fatal("cancel jb")
	}
	code, onA := postUntil(t, a, "alice-key", url)
	if code != http.StatusAccepted {
		t.Fatalf("resubmit on a: %d", code)
	}
	code, onB := postUntil(t, b, "alice-key", url)
	if code != http.StatusAccepted {
		t.Fatalf("resubmit on b: %d", code)
	}
	if onA != onB {
		t.Fatalf("resubmits of the same targets: %s on a, %s on b (ja %s live on a, a member; jb %s cancelled)", onA, onB, ja, jb)
	}
	w.check(t)
}
