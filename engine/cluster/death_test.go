package cluster_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCluster_WaitEndsWhenHolderLeaves: a request forwarded to a node that
// stops answering (alive, its handler hung) ends with 503 "node
// unavailable" once that node leaves the membership, not after its
// long-poll's wait and the timeout (30 s + 3 s here): a node that dies holds
// no API call longer than it takes the provider to drop it.
func TestCluster_WaitEndsWhenHolderLeaves(t *testing.T) {
	tc := newTestCluster(t)
	arrived := make(chan struct{}, 1)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // runs before the nodes stop (registered after newTestCluster's)
	a := tc.addWith("a", nodeOptions{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.RawQuery, "wait=") {
				select {
				case arrived <- struct{}{}:
				default:
				}
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			}
			h.ServeHTTP(w, r)
		})
	}})
	b := tc.add("b")
	tc.waitMembers(2)
	code, id := post(t, a, "alice-key", "https://example.com/a")
	if code != http.StatusAccepted {
		t.Fatalf("submit on a: %d", code)
	}

	done := make(chan answer, 1)
	go func() { done <- send(context.Background(), b, "GET", "/v1/batch/"+id+"?wait=30s", bearer("alice-key")) }()
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the long-poll did not reach a")
	}
	// a leaves the membership (as the provider drops a node that died),
	// though its process lives on.
	host, port, err := net.SplitHostPort(a.node.Address())
	if err != nil {
		t.Fatal(err)
	}
	left := false
	for _, s := range tc.agent.GetStatusHealth() {
		if s.Host == host && strconv.Itoa(s.Port) == port {
			tc.agent.DeregisterService(s.ID)
			left = true
		}
	}
	if !left {
		t.Fatalf("a (%s) is not registered", a.node.Address())
	}
	select {
	case got := <-done:
		if got.code != http.StatusServiceUnavailable || got.hdr.Get("Retry-After") == "" || !strings.Contains(string(got.body), `"error":"node unavailable"`) {
			t.Fatalf("the long-poll through b once a left: %d %v %s %v", got.code, got.hdr, got.body, got.err)
		}
	case <-time.After(20 * time.Second): // the wait (30 s) has not ended: only a's leaving ends it
		t.Fatal("the long-poll through b did not end when a left")
	}
}
