package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
)

// TestRunner_ResultRange: a range of a stored result is the same bytes as
// ResultJSON's, at any offset, small (inline) and large (chunked); n 0
// gives the length alone; a target without a result, an unknown job, an
// idx out of range or a negative off or n is false.
func TestRunner_ResultRange(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("héllo <wörld> \"q\"\n", 100_000) // ~1.9 MB: chunked
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(tg.URL, "/big"):
			return engine.Result{Content: big, Meta: map[string]any{"k": "v"}}, nil
		case strings.HasSuffix(tg.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Msg: "no"}
		}
		return engine.Result{Content: "small"}, nil
	}
	rig := enginetest.Setup(t, fetch, engine.Config{})
	id := rig.Submit(t, "alice", []engine.Target{{URL: "http://x/small"}, {URL: "http://x/big"}, {URL: "http://x/fail"}})
	waitJob(t, rig.Runner, id)
	for idx := range 2 {
		whole, ok := rig.Runner.ResultJSON(id, idx)
		require.True(t, ok)
		n := int64(len(whole))
		for _, rg := range [][2]int64{{0, n}, {0, 12}, {n - 1, 5}, {n / 2, 256 << 10}, {512<<10 - 2, 4}, {n, 1}} {
			got, size, ok := rig.Runner.ResultRange(id, idx, rg[0], rg[1])
			require.True(t, ok)
			require.Equal(t, n, size)
			want := whole[min(rg[0], n):min(n, rg[0]+rg[1])]
			require.Equal(t, string(want), string(got), "target %d range %v", idx, rg)
		}
		_, size, ok := rig.Runner.ResultRange(id, idx, 0, 0)
		require.True(t, ok)
		require.Equal(t, n, size)
	}
	for _, rg := range [][2]int64{{-1, 10}, {0, -1}} {
		_, _, ok := rig.Runner.ResultRange(id, 0, rg[0], rg[1])
		require.False(t, ok, "range %v", rg)
	}
	for _, idx := range []int{2, 3, -1} {
		_, _, ok := rig.Runner.ResultRange(id, idx, 0, 10)
		require.False(t, ok, "idx %d", idx)
	}
	_, _, ok := rig.Runner.ResultRange("00112233445566778899aabbccddeeff", 0, 0, 10)
	require.False(t, ok)
}
