package connlimit_test

import (
	"io"
	"testing"

	"github.com/sift/batch/engine/connlimit"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestAdv34_SlowlorisDoesNotTakeTheCap (holds): a stranger who opens
// connections and never finishes a request's headers (slowloris), from
// several addresses each under the per-address cap, does not hold the
// overall cap: such a connection counts as idle (net/http reports it
// active only once its headers are read), so it is closed for a new
// client, /healthz's prober say.
func TestAdv34_SlowlorisDoesNotTakeTheCap(t *testing.T) {
	lim, addr, _ := setup(t, connlimit.Options{Max: 4, PerAddr: 2})
	for _, from := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"} {
		c := dial(t, addr, from)
		if _, err := io.WriteString(c.c, "GET /ok HTTP/1.1\r\nHost: x\r\n"); err != nil { // headers never finished
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "the stranger's 4 connections held", func() bool { return lim.Open() == 4 })
	if err := dial(t, addr, "127.0.0.1").get("/ok"); err != nil {
		t.Fatalf("a new client beside 4 connections with unfinished headers: %v (refused %v)", err, refused(lim))
	}
}

// TestAdv34_IdleFloodFromManyAddrs (holds): idle keep-alive connections
// from several loopback addresses, the overall cap full of them, still
// leave room for a new client: an idle one is closed for it.
func TestAdv34_IdleFloodFromManyAddrs(t *testing.T) {
	lim, addr, _ := setup(t, connlimit.Options{Max: 6, PerAddr: 2})
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		for range 2 {
			if err := dial(t, addr, from).get("/ok"); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitFor(t, "6 idle", func() bool { return lim.Open() == 6 && connlimit.IdleCount(lim) == 6 })
	for _, from := range []string{"127.0.0.1", "127.0.0.5"} {
		if err := dial(t, addr, from).get("/ok"); err != nil {
			t.Fatalf("a new client from %s beside 6 idle connections: %v", from, err)
		}
	}
	if p, o := lim.Refused(); p+o != 0 {
		t.Errorf("refused %d, %d: none should be", p, o)
	}
	if lim.Open() > 6 {
		t.Errorf("%d open, over the cap of 6", lim.Open())
	}
}

func refused(lim *connlimit.Limiter) [2]int64 {
	p, o := lim.Refused()
	return [2]int64{p, o}
}
