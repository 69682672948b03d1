package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/health"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/httpapi"
)

// fakeMembership is a node's membership as a test sets it.
type fakeMembership struct {
	mu sync.Mutex
	m  cluster.Membership
}

func (f *fakeMembership) Membership() cluster.Membership {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m
}

func (f *fakeMembership) set(m cluster.Membership) {
	f.mu.Lock()
	f.m = m
	f.mu.Unlock()
}

// TestServe_HealthCluster: GET /healthz?cluster=1 answers 200 before the
// node first joins, while it is a member, and while it has been out of its
// own member list for up to the grace; 503 "not a member" past it, and 200
// again once it is back. /healthz itself never looks at the membership;
// without --cluster, ?cluster=1 answers as /healthz. A runner that has
// stopped answers 503 "unavailable" on both.
func TestServe_HealthCluster(t *testing.T) {
	t.Parallel()
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := startServer(serveFlags{}, keys, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.close(); err != nil {
			t.Error(err)
		}
	}()
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	// Without --cluster: as /healthz.
	if code, body := get(srv.http.Handler, "/healthz?cluster=1"); code != http.StatusOK || body != "{\"status\":\"ok\"}\n" {
		t.Fatalf("no cluster, ?cluster=1: %d %s", code, body)
	}

	const grace = 30 * time.Second
	t0 := time.Unix(1_000_000, 0)
	var (
		clockMu sync.Mutex
		clock   = t0
	)
	now := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return clock
	}
	at := func(d time.Duration) {
		clockMu.Lock()
		clock = t0.Add(d)
		clockMu.Unlock()
	}
	node := &fakeMembership{}
	h := health.Handler(srv.runner, node, now, grace)
	for _, step := range []struct {
		name   string
		m      cluster.Membership
		at     time.Duration
		code   int // of ?cluster=1; /healthz is 200 throughout
		status string
	}{
		{"not joined yet", cluster.Membership{}, time.Hour, http.StatusOK, "ok"},
		{"member", cluster.Membership{Joined: true, Member: true, Since: t0}, time.Hour, http.StatusOK, "ok"},
		{"out, just", cluster.Membership{Joined: true, Since: t0}, 0, http.StatusOK, "ok"},
		{"out, at the grace", cluster.Membership{Joined: true, Since: t0}, grace, http.StatusOK, "ok"},
		{"out, past the grace", cluster.Membership{Joined: true, Since: t0}, grace + time.Second, http.StatusServiceUnavailable, "not a member"},
		{"back", cluster.Membership{Joined: true, Member: true, Since: t0.Add(time.Minute)}, 2 * time.Minute, http.StatusOK, "ok"},
	} {
		node.set(step.m)
		at(step.at)
		if code, body := get(h, "/healthz?cluster=1"); code != step.code || body != "{\"status\":\""+step.status+"\"}\n" {
			t.Errorf("%s: ?cluster=1 answers %d %s; want %d %s", step.name, code, body, step.code, step.status)
		}
		if code, _ := get(h, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz answers %d; want 200", step.name, code)
		}
	}
	srv.runner.Close()
	for _, path := range []string{"/healthz", "/healthz?cluster=1"} {
		if code, body := get(h, path); code != http.StatusServiceUnavailable || !strings.Contains(body, "unavailable") {
			t.Errorf("after the runner closed, %s: %d %s", path, code, body)
		}
	}
}
