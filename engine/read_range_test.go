package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
)

// TestRunner_ResultRange: a range of a stored result is the same bytes as
// ResultJSON's, at any offset, small (inline) and large (chunked); n 0
// gives the length alone; a target without a result, an unknown job or an
// idx out of range is false.
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
	for _, idx := range []int{2, 3, -1} {
		_, _, ok := rig.Runner.ResultRange(id, idx, 0, 10)
		require.False(t, ok, "idx %d", idx)
	}
	_, _, ok := rig.Runner.ResultRange("00112233445566778899aabbccddeeff", 0, 0, 10)
	require.False(t, ok)
}

// TestRunner_ContentRange: following End from 0 in ranges of any size
// gives back the content's JSON text whole, each range whole escapes and
// runes that decode alone, and the meta; a range at any offset begins at
// or before it, at most 5 bytes (an escape) before.
func TestRunner_ContentRange(t *testing.T) {
	t.Parallel()
	contents := map[string]string{
		"/plain":   strings.Repeat("abc", 300_000),
		"/mixed":   strings.Repeat("héllo <wörld> ✓ 😀 \"q\" \\ \\\\ \n\t\u0001\u2028", 30_000),
		"/slashes": strings.Repeat(`\`, 40_000) + "u0041" + strings.Repeat(`\`, 3),
		"/empty":   "",
		"/small":   "a\"b",
	}
	fetch := func(_ context.Context, _ *engine.Caller, tg engine.Target) (engine.Result, error) {
		var meta map[string]any
		if !strings.HasSuffix(tg.URL, "/small") {
			meta = map[string]any{"note": `,"meta":{"x":"}"}`, "n": 1.0}
		}
		return engine.Result{Content: contents[tg.URL[len("http://x"):]], Meta: meta}, nil
	}
	rig := enginetest.Setup(t, fetch, engine.Config{})
	paths := []string{"/plain", "/mixed", "/slashes", "/empty", "/small"}
	targets := make([]engine.Target, len(paths))
	for i, p := range paths {
		targets[i] = engine.Target{URL: "http://x" + p}
	}
	id := rig.Submit(t, "alice", targets)
	waitJob(t, rig.Runner, id)
	for idx, p := range paths {
		whole, ok := rig.Runner.ResultJSON(id, idx)
		require.True(t, ok)
		var res engine.Result
		require.NoError(t, json.Unmarshal(whole, &res))
		total := int64(len(whole)) - int64(len(`{"content":"`)) - int64(len(`"}`))
		if res.Meta != nil {
			m, _ := engine.ContentRangeMetaLen(whole)
			total -= int64(m)
		}
		for _, n := range []int64{1, 5, 7, 4096, 256<<10 - 8} {
			var got strings.Builder
			var joined []byte
			for off := int64(0); ; {
				cr, ok := rig.Runner.ContentRange(id, idx, off, n)
				require.True(t, ok, "%s off %d n %d", p, off, n)
				require.Equal(t, total, cr.Total, p)
				require.Equal(t, off, cr.Offset, "%s: following End starts at a boundary", p)
				if off >= cr.Total {
					require.Empty(t, cr.JSON)
					break
				}
				require.Greater(t, cr.End, cr.Offset)
				var s string
				require.NoError(t, json.Unmarshal([]byte(`"`+string(cr.JSON)+`"`), &s), "%s off %d", p, off)
				got.WriteString(s)
				joined = append(joined, cr.JSON...)
				if res.Meta != nil {
					var meta map[string]any
					require.NoError(t, json.Unmarshal(cr.Meta, &meta))
					require.Equal(t, res.Meta, meta)
				} else {
					require.Nil(t, cr.Meta)
				}
				off = cr.End
				if n < 4096 && off > 200 {
					break // small ranges: the start is enough
				}
			}
			if n >= 4096 {
				require.Equal(t, res.Content, got.String(), "%s n %d", p, n)
			} else {
				require.True(t, strings.HasPrefix(res.Content, got.String()), "%s n %d", p, n)
			}
			require.Equal(t, string(whole[12:12+len(joined)]), string(joined))
		}
		for _, off := range []int64{1, 2, 3, 5, 99, 12345, total - 1} {
			if off < 0 || off >= total {
				continue
			}
			cr, ok := rig.Runner.ContentRange(id, idx, off, 100)
			require.True(t, ok)
			require.LessOrEqual(t, cr.Offset, off)
			require.GreaterOrEqual(t, cr.Offset, off-5, "%s off %d", p, off)
		}
	}
	_, ok := rig.Runner.ContentRange(id, 0, -1, 10)
	require.False(t, ok)
	_, ok = rig.Runner.ContentRange(id, 0, 0, 0)
	require.False(t, ok)
}
