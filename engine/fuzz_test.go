package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// fuzzRunner is one runner per fuzzing process: a runner (an actor system
// and an in-memory Badger) per input would make each input cost
// milliseconds. Caps are raised so that every well-formed input is accepted.
type fuzzRunner struct {
	r     *engine.Runner
	store *persistence.Store
}

func newFuzzRunner(f *testing.F) *fuzzRunner {
	f.Helper()
	store := enginetest.OpenStore(f, "")
	fetch := func(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		return engine.Result{Content: t.URL, Meta: map[string]any{"mode": t.Options.Mode}}, nil
	}
	r, err := engine.New(store, fetch, engine.Config{
		TargetsPerJob: engine.MaxTargetsPerJob, JobsPerCaller: 1 << 30, JobsTotal: 1 << 30, Workers: 2,
	}, nil)
	require.NoError(f, err)
	f.Cleanup(r.Close) // before the store's cleanup
	return &fuzzRunner{r: r, store: store}
}

// fuzzTargets builds up to 64 targets from the fuzzer's strings: urls split
// on "\n"; each target's options take the option strings split on "\n" in
// turn, so targets differ.
func fuzzTargets(urls, mode, question, pages, grep, jq string, flags uint8) []engine.Target {
	parts := strings.Split(urls, "\n")
	if len(parts) > 64 {
		parts = parts[:64]
	}
	pick := func(s string, i int) string {
		ss := strings.Split(s, "\n")
		return ss[i%len(ss)]
	}
	ts := make([]engine.Target, len(parts))
	for i, u := range parts {
		ts[i] = engine.Target{URL: u, Options: engine.Options{
			Mode: pick(mode, i), Question: pick(question, i), Pages: pick(pages, i), Grep: pick(grep, i), JQ: pick(jq, i),
			Recover: flags&(1<<(i%3)) != 0,
		}}
		switch (flags >> 3 >> (i % 2)) & 3 {
		case 1:
			ts[i].Options.Context = new(bool)
		case 2:
			yes := true
			ts[i].Options.Context = &yes
		}
	}
	if flags&0x80 != 0 {
		ts = ts[:0] // no targets
	}
	return ts
}

// FuzzRunner_Submit submits arbitrary targets and options under arbitrary
// caller names: Submit never panics; it returns an error, or a job whose
// stored targets (URL and options, as the store holds them and as Status
// reads them) are exactly the ones submitted.
func FuzzRunner_Submit(f *testing.F) {
	f.Add("alice", "http://h/a", "", "", "", "", "", uint8(0))
	f.Add("bob", "https://x.example/p?q=1\nhttps://y.example/\n\nz", "markdown\ntext", "what?", "1-3", "needle", ".a", uint8(0x1f))
	f.Add("", "http://h/a", "", "", "", "", "", uint8(0))
	f.Add("carol", "", "", "", "", "", "", uint8(0x80))
	f.Add("dave\x00eve", "http://h/\xff\nhttp://h/\xfe", "\xff", "", "", "", "", uint8(2))
	f.Add("ünï", "http://h/ünï\u2028", "\u0000", "<>&", "", "", "", uint8(0x18))
	fr := newFuzzRunner(f)
	var mu sync.Mutex
	seen := map[string][]engine.Target{} // a job id → the targets it was created or reused for
	f.Fuzz(func(t *testing.T, name, urls, mode, question, pages, grep, jq string, flags uint8) {
		ts := fuzzTargets(urls, mode, question, pages, grep, jq, flags)
		id, reused, err := fr.r.Submit(context.Background(), &engine.Caller{Name: name, KeySHA256: "k"}, "class", ts)
		if err != nil {
			require.Empty(t, id)
			require.False(t, reused)
			switch {
			case name == "", len(ts) == 0, slicesContainsEmptyURL(ts):
				require.True(t, errors.Is(err, engine.ErrInvalid) || errors.Is(err, engine.ErrNoTargets), "%v", err)
			case !validUTF8(ts):
				require.ErrorIs(t, err, engine.ErrInvalid)
			default:
				// Only a submission too large for one store write may fail.
				require.ErrorIs(t, err, persistence.ErrTooLarge)
			}
			return
		}
		require.NotEmpty(t, name)
		require.NotEmpty(t, ts)
		require.Regexp(t, `^[0-9a-f]{32}$`, id)

		mu.Lock()
		prev, known := seen[id]
		if !known {
			seen[id] = ts
		}
		mu.Unlock()
		if known {
			require.True(t, reused, "an id is handed out once, then only as reused")
			require.Equal(t, prev, ts, "a reused job has exactly these targets")
		}

		j, got, ok := fr.r.Status(id)
		require.True(t, ok)
		require.Equal(t, name, j.Caller)
		require.Equal(t, len(ts), j.TargetsTotal)
		require.Len(t, got, len(ts))
		rec, stored, err := fr.store.JobWithTargets(id)
		require.NoError(t, err)
		require.Equal(t, name, rec.Caller)
		require.Len(t, stored, len(ts))
		for i := range ts {
			require.Equal(t, i, got[i].Idx)
			require.Equal(t, ts[i].URL, got[i].URL, "Status reads the URL back exactly")
			require.Equal(t, ts[i].URL, stored[i].URL, "the store holds the URL exactly")
			var opts engine.Options
			require.NoError(t, json.Unmarshal(stored[i].Options, &opts))
			require.Equal(t, ts[i].Options, opts, "the store holds the options exactly")
		}
	})
}

func slicesContainsEmptyURL(ts []engine.Target) bool {
	for _, t := range ts {
		if t.URL == "" {
			return true
		}
	}
	return false
}

func validUTF8(ts []engine.Target) bool {
	for _, t := range ts {
		o := t.Options
		for _, s := range []string{t.URL, o.Mode, o.Question, o.Pages, o.Grep, o.JQ} {
			if !utf8.ValidString(s) {
				return false
			}
		}
	}
	return true
}

// FuzzRunner_ID hands Status, Touch and Cancel arbitrary job ids, next to a
// real one: never a panic; an id that is not a job's is unknown (false) and
// changes nothing.
func FuzzRunner_ID(f *testing.F) {
	fr := newFuzzRunner(f)
	real, _, err := fr.r.Submit(context.Background(), &engine.Caller{Name: "owner"}, "", []engine.Target{{URL: "http://h/a"}})
	require.NoError(f, err)
	f.Add(real)
	f.Add(strings.ToUpper(real))
	f.Add(real[:31])
	f.Add(real + "0")
	f.Add("")
	f.Add("../../etc/passwd")
	f.Add("00000000000000000000000000000000")
	f.Add("zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz")
	f.Add("\xff\x00job")
	f.Fuzz(func(t *testing.T, id string) {
		j, ts, ok := fr.r.Status(id)
		fr.r.Touch(id)
		cancelled := fr.r.Cancel(id)
		if id != real {
			require.False(t, ok, "an unknown id is not found")
			require.Empty(t, ts)
			require.Zero(t, j)
			require.False(t, cancelled)
			_, err := fr.store.Job(id)
			require.ErrorIs(t, err, persistence.ErrNotFound)
			return
		}
		require.True(t, ok)
		require.Equal(t, "owner", j.Caller)
	})
}
