package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/persistence"
	"github.com/stretchr/testify/require"
)

// storeJob stores a settled, done job of caller's with id, created at
// created (unix nanoseconds), as a store of an earlier run holds it.
func storeJob(t *testing.T, s *persistence.Store, id, caller string, created int64) {
	t.Helper()
	j := persistence.JobRecord{ID: id, Caller: caller, Status: persistence.StatusDone, TargetsTotal: 1, TargetsDone: 1,
		Created: created, Lease: created, Settled: true}
	copy(j.Key[:], id)
	require.NoError(t, s.CreateJob(&j, []persistence.TargetRecord{{Idx: 0, URL: "http://" + id}}))
}

// TestShortID: the first 8 hex digits, or 9 to 16 for an id that begins
// with a node tag the process knows; anything else cut to 8 bytes.
func TestShortID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0123abcd", engine.ShortID("0123abcd456789ef0123456789abcdef"))
	for in, want := range map[string]string{"": "", "abc": "abc", "0123456789": "01234567",
		"0123ABCD456789EF0123456789ABCDEF": "0123ABCD", "0123abcd456789ef0123456789abcdefXX": "0123abcd"} {
		require.Equal(t, want, engine.ShortID(in), "%q", in)
	}
	// A runner with a node tag: its ids begin with it.
	tag := []byte{0x5e, 0x1f, 0x7a, 0x90}
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{NodeTag: tag})
	id := b.Submit(t, "alice", enginetest.Targets("tagged", 1))
	require.True(t, strings.HasPrefix(id, "5e1f7a90"))
	require.Equal(t, id[8:16], engine.ShortID(id))
	require.Equal(t, "5e1f7a9", engine.ShortID("5e1f7a9")[:7], "not an id: as it is")
}

// TestRunner_FindJobs: the jobs whose short id (or, past 8 digits, whole
// id) starts with a prefix, newest first, at most limit; a caller's own
// only, every caller's for ""; expired jobs never; bad prefixes and
// limits refused.
func TestRunner_FindJobs(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	clk := testkit.NewClock()
	start := clk.Now()
	ids := map[string]string{ // id → caller
		"abcd0000000000000000000000000001": "alice",
		"abcd1000000000000000000000000002": "alice",
		"abcd2000000000000000000000000003": "bob",
		"abce0000000000000000000000000004": "alice",
		"0bcd0000000000000000000000000005": "bob",
	}
	created := map[string]int64{}
	n := int64(0)
	for _, id := range []string{"abcd0000000000000000000000000001", "abcd1000000000000000000000000002", "abcd2000000000000000000000000003",
		"abce0000000000000000000000000004", "0bcd0000000000000000000000000005"} {
		n++
		created[id] = start.UnixNano() - (10-n)*int64(time.Second) // each newer than the one before
		storeJob(t, store, id, ids[id], created[id])
	}
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{TTL: time.Hour, Now: clk.Now})
	find := func(caller, prefix string, limit int) []string {
		t.Helper()
		jobs, err := b.Runner.FindJobs(caller, prefix, limit)
		require.NoError(t, err, "%q %q", caller, prefix)
		for _, j := range jobs {
			if caller != "" {
				require.Equal(t, caller, j.Caller)
			}
			require.Equal(t, ids[j.ID], j.Caller)
		}
		return jobIDs(jobs)
	}
	require.Equal(t, []string{"abcd1000000000000000000000000002", "abcd0000000000000000000000000001"}, find("alice", "abcd", 0), "newest first, alice's only")
	require.Equal(t, []string{"abcd2000000000000000000000000003", "abcd1000000000000000000000000002", "abcd0000000000000000000000000001"}, find("", "abcd", 0), "every caller's")
	require.Equal(t, []string{"abcd2000000000000000000000000003"}, find("", "abcd", 1), "at most limit")
	require.Equal(t, []string{"abcd1000000000000000000000000002"}, find("alice", "ABCD1", 0), "odd length, upper case")
	require.Equal(t, []string{"abcd2000000000000000000000000003"}, find("bob", "abcd2", 0))
	require.Empty(t, find("bob", "abcd1", 0), "another caller's job is not found")
	require.Empty(t, find("carol", "abcd", 0))
	require.Equal(t, []string{"abcd0000000000000000000000000001"}, find("alice", "abcd0000000", 0), "past 8 digits: the whole id's prefix")
	require.Equal(t, []string{"abcd0000000000000000000000000001"}, find("alice", "abcd0000000000000000000000000001", 0), "a whole id")
	require.Empty(t, find("alice", "abcd0000000000000000000000000009", 0))
	require.Empty(t, find("", "ffff", 0))

	for _, bad := range []string{"", "abc", "abcg", "ab cd", "abcd0000000000000000000000000001f", "-bcd", "ａｂｃｄ"} {
		_, err := b.Runner.FindJobs("alice", bad, 0)
		require.ErrorIs(t, err, engine.ErrBadList, "%q", bad)
	}
	for _, limit := range []int{-1, engine.MaxFindLimit + 1} {
		_, err := b.Runner.FindJobs("alice", "abcd", limit)
		require.ErrorIs(t, err, engine.ErrBadList, "limit %d", limit)
	}

	// Expired: never found.
	clk.Advance(2 * time.Hour)
	require.Empty(t, find("", "abcd", 0))
}

// TestRunner_FindJobsByShortIDOfANode: on a node (ids begin with its tag)
// the short id is digits 9 to 16, and that is what is found.
func TestRunner_FindJobsByShortIDOfANode(t *testing.T) {
	t.Parallel()
	b := enginetest.Setup(t, enginetest.OKFetch, engine.Config{NodeTag: []byte{0x77, 0x6e, 0x6f, 0x64}, JobsPerCaller: 8})
	var ids []string
	for i := range 5 {
		id := b.Submit(t, "alice", enginetest.Targets("node"+string(rune('a'+i)), 1))
		waitJob(t, b.Runner, id)
		ids = append(ids, id)
	}
	for _, id := range ids {
		short := engine.ShortID(id)
		require.Equal(t, id[8:16], short)
		jobs, err := b.Runner.FindJobs("alice", short, 0)
		require.NoError(t, err)
		require.Equal(t, []string{id}, jobIDs(jobs))
		jobs, err = b.Runner.FindJobs("alice", short[:4], 0)
		require.NoError(t, err)
		require.Contains(t, jobIDs(jobs), id)
		jobs, err = b.Runner.FindJobs("bob", short, 0)
		require.NoError(t, err)
		require.Empty(t, jobs)
		jobs, err = b.Runner.FindJobs("alice", id, 0)
		require.NoError(t, err)
		require.Equal(t, []string{id}, jobIDs(jobs), "the whole id")
	}
}

// FuzzRunner_FindJobs: any prefix is refused with ErrBadList, or finds
// only jobs whose short id (or, past 8 digits, whole id) starts with it,
// of the caller asked for; never a panic.
func FuzzRunner_FindJobs(f *testing.F) {
	b := enginetest.Setup(f, enginetest.OKFetch, engine.Config{JobsPerCaller: 8})
	var ids []string
	for i, caller := range []string{"alice", "bob", "alice"} {
		id := b.Submit(f, caller, enginetest.Targets("fuzz"+string(rune('a'+i)), 1))
		b.WaitSettled(f, id)
		ids = append(ids, id)
	}
	for _, seed := range []string{ids[0][:4], strings.ToUpper(ids[1][:8]), ids[2], ids[0][:9], "", "abc", "zzzz", "0000", ids[0] + "0", "ａｂｃｄ", "\xff\xfe\xfd\xfc"} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, prefix string, own bool) {
		caller := ""
		if own {
			caller = "alice"
		}
		jobs, err := b.Runner.FindJobs(caller, prefix, 0)
		if err != nil {
			require.ErrorIs(t, err, engine.ErrBadList)
			require.Nil(t, jobs)
			return
		}
		p := strings.ToLower(prefix)
		require.GreaterOrEqual(t, len(p), engine.MinShortPrefix)
		for _, j := range jobs {
			if len(p) > engine.ShortIDLen {
				require.True(t, strings.HasPrefix(j.ID, p), "%s for %q", j.ID, prefix)
			} else {
				require.True(t, strings.HasPrefix(engine.ShortID(j.ID), p), "%s for %q", j.ID, prefix)
			}
			if own {
				require.Equal(t, "alice", j.Caller)
			}
		}
	})
}

// TestRunner_FindAndListAllAfterClose: once the runner and its store are
// closed, ListAll and FindJobs answer an error (or nothing), never panic,
// while readers that began before Close page on.
func TestRunner_FindAndListAllAfterClose(t *testing.T) {
	t.Parallel()
	store := enginetest.OpenStore(t, "")
	b := enginetest.SetupOn(t, store, enginetest.OKFetch, engine.Config{})
	var ids []string
	for i := range 30 {
		ids = append(ids, b.Submit(t, fmt.Sprintf("c%d", i%3), enginetest.Targets(fmt.Sprintf("j%d", i), 1)))
		waitJob(t, b.Runner, ids[i])
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 50 {
				cursor := ""
				for {
					jobs, next, err := b.Runner.ListAll(engine.ListOptions{Limit: 3, Cursor: cursor})
					if err != nil {
						if errors.Is(err, engine.ErrBadList) {
							t.Errorf("a cursor the runner gave is bad: %v", err)
						}
						break
					}
					for _, j := range jobs {
						if !strings.HasPrefix(j.Caller, "c") {
							t.Errorf("listed a job of %q", j.Caller)
						}
					}
					if next == "" {
						break
					}
					cursor = next
				}
				_, _ = b.Runner.FindJobs("", ids[i][:4], 0)
			}
		}()
	}
	close(start)
	b.Runner.Close()
	require.NoError(t, store.Close())
	wg.Wait()
	_, _, err := b.Runner.ListAll(engine.ListOptions{})
	require.Error(t, err, "a closed store lists nothing")
	jobs, err := b.Runner.FindJobs("", ids[0][:4], 0)
	require.True(t, err != nil || len(jobs) == 0, "a closed store finds nothing: %v %v", jobs, err)
}
