package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// piecesGated is a runner whose ResultRange, for job gated, says which
// offset it reads on entered and waits for a token on proceed.
type piecesGated struct {
	runner
	gated   string
	entered chan int64
	proceed chan struct{}
}

func (g piecesGated) ResultRange(id string, idx int, off, n int64) ([]byte, int64, bool) {
	if id == g.gated {
		g.entered <- off
		<-g.proceed
	}
	return g.runner.ResultRange(id, idx, off, n)
}

// TestAPI_LargeResultReadPieceByPiece: a result larger than a piece is
// read and sent piece by piece (512 KiB), the turn held for one piece's
// read at a time: with one turn, another caller's read that comes while
// alice's second piece is read is served before her third, not after her
// whole result. Her answer is whole, and the same as an ungated read's.
func TestAPI_LargeResultReadPieceByPiece(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", 3*resultPiece/16) // 3 pieces, and the JSON's head
	r := newRunnerWith(t, func(_ context.Context, c *engine.Caller, _ engine.Target) (engine.Result, error) {
		if c.Name == "bob" {
			return engine.Result{Content: "small"}, nil
		}
		return engine.Result{Content: big}, nil
	})
	ctx := context.Background()
	submit := func(who string) string {
		id, _, err := r.Submit(ctx, &engine.Caller{Name: who}, "", []engine.Target{{URL: "https://example.com/" + who}})
		if err != nil {
			t.Fatal(err)
		}
		waitJob(t, r, id)
		return id
	}
	aliceJob, bobJob := submit("alice"), submit("bob")
	g := piecesGated{runner: r, gated: aliceJob, entered: make(chan int64, 8), proceed: make(chan struct{})}
	h, err := newHandler(g, testAuth, Options{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	alice := make(chan *httptest.ResponseRecorder, 1)
	go func() { alice <- get("alice-key", "/v1/batch/"+aliceJob+"/0") }()
	if off := testkit.Recv(t, g.entered); off != 0 {
		t.Fatalf("alice's first read at %d", off)
	}
	g.proceed <- struct{}{}
	second := testkit.Recv(t, g.entered) // under the turn again
	if second != resultPiece {
		t.Fatalf("alice's second read at %d, want %d: her result is read piece by piece", second, resultPiece)
	}
	bob := make(chan *httptest.ResponseRecorder, 1)
	go func() { bob <- get("bob-key", "/v1/batch/"+bobJob+"/0") }()
	testkit.WaitFor(t, "bob's read to wait for the turn", func() bool { return h.reads.Waiting("bob") == 1 })
	g.proceed <- struct{}{} // her second piece is read; the turn goes to bob
	if rec := testkit.Recv(t, bob); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "small") {
		t.Fatalf("bob's read: %d %.200s", rec.Code, rec.Body)
	}
	for { // her next pieces, after bob's
		select {
		case <-g.entered:
			g.proceed <- struct{}{}
			continue
		case rec := <-alice:
			var tg struct {
				Result struct {
					Content string `json:"content"`
				} `json:"result"`
			}
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &tg) != nil || tg.Result.Content != big {
				t.Fatalf("alice's answer: %d, %d bytes, not her whole result", rec.Code, rec.Body.Len())
			}
			want := httptest.NewRecorder() // the same as a read that is not gated
			req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+aliceJob+"/0", nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			ungated, err := newHandler(r, testAuth, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ungated.ServeHTTP(want, req)
			if want.Body.String() != rec.Body.String() {
				t.Fatal("alice's answer differs from an ungated read's")
			}
			return
		case <-time.After(testkit.Deadline):
			t.Fatal("alice's answer did not end")
		}
	}
}
