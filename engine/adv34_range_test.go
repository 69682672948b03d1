package engine_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
)

// TestAdv34_ResultRangeEdges: Runner.ResultRange, public, never panics
// ("library code never panics") and answers the bytes that exist for
// any off and n: at and past the ends, negative, and huge (off+n past
// MaxInt64, which today wraps negative and slices [off:negative]); for
// an inline result (under 512 bytes), one of exactly 512 bytes, and a
// chunked one, at the 512 KiB chunk boundary.
func TestAdv34_ResultRangeEdges(t *testing.T) {
	t.Parallel()
	contents := map[string]string{
		"/small": "x",
		"/empty": "",
		"/b512":  strings.Repeat("a", 512),
		"/big":   strings.Repeat("é<\"", 300_000), // ~1.5 MB: chunked
	}
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		return engine.Result{Content: contents[tg.URL[strings.LastIndex(tg.URL, "/"):]]}, nil
	}
	rig := enginetest.Setup(t, fetch, engine.Config{})
	id := rig.Submit(t, "alice", []engine.Target{{URL: "http://x/small"}, {URL: "http://x/empty"}, {URL: "http://x/b512"}, {URL: "http://x/big"}})
	waitJob(t, rig.Runner, id)
	for idx := range 4 {
		whole, ok := rig.Runner.ResultJSON(id, idx)
		if !ok {
			t.Fatalf("target %d: no result", idx)
		}
		n := int64(len(whole))
		for _, rg := range [][2]int64{
			{0, math.MaxInt64}, {1, math.MaxInt64}, {n - 1, math.MaxInt64}, {math.MaxInt64, math.MaxInt64},
			{math.MaxInt64, 1}, {-1, 10}, {0, -1}, {n + 1, 1}, {512<<10 - 1, 2}, {512 << 10, 1}, {511, 2},
		} {
			var got []byte
			var size int64
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("target %d (%d bytes), range %v: panic %v", idx, n, rg, p)
					}
				}()
				got, size, ok = rig.Runner.ResultRange(id, idx, rg[0], rg[1])
			}()
			if !ok || size != n {
				continue // reported above if it panicked; a false or a size other than n is below
			}
			var want []byte
			if rg[0] >= 0 && rg[1] > 0 && rg[0] < n {
				want = whole[rg[0]:min(n, rg[0]+min(rg[1], n))]
			}
			if string(got) != string(want) {
				t.Errorf("target %d range %v: %d bytes, want %d", idx, rg, len(got), len(want))
			}
		}
	}
}
