package engine_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// TestRunner_SubmitInvalidUTF8 is the regression test for a FuzzRunner_Submit
// finding. Targets are stored and keyed by their JSON, and encoding/json
// writes every invalid UTF-8 byte as U+FFFD: a URL or an option that is not
// valid UTF-8 was stored altered, and two different submissions
// ("http://h/\xff" and "http://h/\xfe") had the same idempotency key, so the
// second was answered with the first one's job as reused. Such a target is
// now invalid.
func TestRunner_SubmitInvalidUTF8(t *testing.T) {
	t.Parallel()
	b := setup(t, okFetch, engine.Config{JobsPerCaller: 8})
	ctx := context.Background()
	for _, tg := range []engine.Target{
		{URL: "http://h/\xff"},
		{URL: "http://h/ok", Options: engine.Options{Mode: "\xfe"}},
		{URL: "http://h/ok", Options: engine.Options{Question: "a\xc3"}},
		{URL: "http://h/ok", Options: engine.Options{Pages: "\xed\xa0\x80"}}, // a surrogate
		{URL: "http://h/ok", Options: engine.Options{Grep: "\x80"}},
		{URL: "http://h/ok", Options: engine.Options{JQ: "\xc0\xaf"}}, // overlong
	} {
		_, _, err := b.r.Submit(ctx, caller("alice"), "", []engine.Target{{URL: "http://h/first"}, tg})
		require.ErrorIs(t, err, engine.ErrInvalid, "%+q", tg)
	}
	require.Zero(t, b.hooks.job("created"))

	// Valid UTF-8 that JSON escapes is kept exactly, and keys apart.
	a := b.submit(t, "alice", []engine.Target{{URL: "http://h/\u2028<>&", Options: engine.Options{Mode: "ü\u0000"}}})
	c := b.submit(t, "alice", []engine.Target{{URL: "http://h/\u2029<>&", Options: engine.Options{Mode: "ü\u0000"}}})
	require.NotEqual(t, a, c)
	_, ts, ok := b.r.Status(a)
	require.True(t, ok)
	require.Equal(t, "http://h/\u2028<>&", ts[0].URL)
}

// TestRunner_JobIDs submits many jobs and checks their ids: 32 lowercase hex
// characters (128 bits), all different, and every one of the 128 bits set in
// about half of them (a counter or a clock in the id would show as bits
// that hardly change).
func TestRunner_JobIDs(t *testing.T) {
	t.Parallel()
	const n = 4000
	// Not setup: its hook recorder holds 1024 endings, and hooks must not
	// block.
	store, err := persistence.Open("")
	require.NoError(t, err)
	r, err := engine.New(store, okFetch, engine.Config{JobsPerCaller: n, JobsTotal: n}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		r.Close()
		require.NoError(t, store.Close())
	})
	seen := make(map[string]bool, n)
	var ones [128]int
	for i := range n {
		id, reused, err := r.Submit(context.Background(), caller("alice"), "", targets(fmt.Sprintf("j%d", i), 1))
		require.NoError(t, err)
		require.False(t, reused)
		require.Regexp(t, `^[0-9a-f]{32}$`, id)
		require.False(t, seen[id], "id %s handed out twice", id)
		seen[id] = true
		raw, err := hex.DecodeString(id)
		require.NoError(t, err)
		for bit := range 128 {
			if raw[bit/8]&(1<<(bit%8)) != 0 {
				ones[bit]++
			}
		}
	}
	// Binomial(4000, 1/2): a standard deviation of ~32; 45%–55% is ±6σ.
	for bit, c := range ones {
		require.InDelta(t, n/2, c, n*0.05, "bit %d is set in %d of %d ids", bit, c, n)
	}
}
