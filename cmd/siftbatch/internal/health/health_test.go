package health

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// runner is a runner whose Err a test sets.
type runner struct {
	closed atomic.Bool
	full   atomic.Bool
}

func (r *runner) Disk() engine.DiskState {
	if r.full.Load() {
		return engine.DiskState{Free: 1 << 20, Reserve: 2 << 20, Full: true}
	}
	return engine.DiskState{Free: 3 << 20, Reserve: 2 << 20}
}

func (r *runner) Err() error {
	if r.closed.Load() {
		return errors.New("closed")
	}
	return nil
}

// member is a node's membership as a test sets it.
type member struct {
	mu sync.Mutex
	m  cluster.Membership
}

func (f *member) Membership() cluster.Membership {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m
}

func (f *member) set(m cluster.Membership) {
	f.mu.Lock()
	f.m = m
	f.mu.Unlock()
}

func get(h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// TestHandler_Cluster: GET /healthz?cluster=1 answers 200 before the node
// first joins, while it is a member, and while it has been out of its own
// member list for up to the grace; 503 "not a member" past it, and 200
// again once it is back. /healthz itself never looks at the membership. A
// runner that has stopped answers 503 "unavailable" on both.
func TestHandler_Cluster(t *testing.T) {
	t.Parallel()
	const grace = 30 * time.Second
	clock := testkit.NewClock()
	t0 := clock.Now()
	r, node := &runner{}, &member{}
	h := Handler(r, node, clock.Now, grace)
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
		clock.Set(t0.Add(step.at))
		if code, body := get(h, "/healthz?"+ClusterParam+"=1"); code != step.code || body != "{\"status\":\""+step.status+"\"}\n" {
			t.Errorf("%s: ?cluster=1 answers %d %s; want %d %s", step.name, code, body, step.code, step.status)
		}
		if code, _ := get(h, "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz answers %d; want 200", step.name, code)
		}
	}
	r.closed.Store(true)
	for _, path := range []string{"/healthz", "/healthz?cluster=1"} {
		if code, body := get(h, path); code != http.StatusServiceUnavailable || body != "{\"status\":\"unavailable\"}\n" {
			t.Errorf("after the runner closed, %s: %d %s", path, code, body)
		}
	}
}

// TestHandler_NoNode: without a node (no --cluster), ?cluster=1 answers as
// /healthz, and never caches.
func TestHandler_NoNode(t *testing.T) {
	t.Parallel()
	h := Handler(&runner{}, nil, time.Now, time.Second)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz?cluster=1", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "{\"status\":\"ok\"}\n" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("no node, ?cluster=1: %d %q, Cache-Control %q", rec.Code, rec.Body, rec.Header().Get("Cache-Control"))
	}
}

// TestHandler_DiskFull: while the disk is below its reserve /healthz says
// so, with 200 (the node serves reads; a restart makes no room), and says
// ok again once there is room.
func TestHandler_DiskFull(t *testing.T) {
	t.Parallel()
	r := &runner{}
	h := Handler(r, nil, time.Now, time.Second)
	r.full.Store(true)
	for _, path := range []string{"/healthz", "/healthz?cluster=1"} {
		if code, body := get(h, path); code != http.StatusOK || body != "{\"status\":\"disk full\",\"free_bytes\":1048576,\"reserve_bytes\":2097152}\n" {
			t.Errorf("disk full, %s: %d %s", path, code, body)
		}
	}
	r.full.Store(false)
	if code, body := get(h, "/healthz"); code != http.StatusOK || body != "{\"status\":\"ok\"}\n" {
		t.Errorf("room again: %d %s", code, body)
	}
}
