package engine_test

import (
	"context"
	"testing"

	"github.com/sift/batch/engine"
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
