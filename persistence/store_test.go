package persistence

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Badger's Open left its cache monitor and its allocator pool running
	// when it failed on a damaged key registry or value log, or for want of
	// space (TestStore_OpenDamaged, the full-disk tests), until
	// persistence/internal/badger's cleanup stopped them: none is allowed.
	goleak.VerifyTestMain(closingM{m})
}

// closingM closes the stores the benchmarks keep from one run to the next
// (BenchmarkStore_Scaling's) once every test and benchmark has run, before
// goleak looks for goroutines left running.
type closingM struct{ m *testing.M }

func (c closingM) Run() int {
	defer closeScalingStores()
	return c.m.Run()
}

// mustOpen opens a store in dir ("" in memory) and closes it at cleanup.
func mustOpen(tb testing.TB, dir string) *Store {
	tb.Helper()
	s, err := Open(dir)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, s.Close()) })
	return s
}

func testID(n int) string { return fmt.Sprintf("%032x", n) }

// putJob stores a job of n targets with the given times, settled or not.
func putJobRecord(tb testing.TB, s *Store, n int, created, lease int64, settled bool) JobRecord {
	tb.Helper()
	j := JobRecord{ID: testID(n), Caller: "alice", Status: StatusQueued, TargetsTotal: 2, Created: created, Lease: lease}
	j.Key[0], j.Key[1] = byte(n>>8), byte(n)
	if settled {
		j.Status, j.Settled = StatusDone, true
	}
	ts := []TargetRecord{{Idx: 0, URL: "http://a", Options: []byte(`{}`)}, {Idx: 1, URL: "http://b"}}
	require.NoError(tb, s.CreateJob(&j, ts))
	return j
}

func TestStore_Open(t *testing.T) {
	t.Run("InUse", func(t *testing.T) {
		dir := t.TempDir()
		mustOpen(t, dir)
		_, err := Open(dir)
		require.ErrorIs(t, err, ErrInUse)
	})
	t.Run("NotAStore", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("garbage, not a manifest"), 0o644))
		_, err := Open(dir)
		require.ErrorIs(t, err, ErrCorrupt)
	})
	t.Run("ForeignDirTouchesNothing", func(t *testing.T) {
		// Someone else's files, with names a store's crash leftovers have:
		// refused as no store, and not one deleted, changed or added.
		dir := t.TempDir()
		files := map[string]string{"notes.txt": "keep", "000001.mem": "", "000001.vlog": "", "LOCK": ""}
		for name, content := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
		_, err := Open(dir)
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, dir)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, len(files))
		for name, content := range files {
			b, err := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err, name)
			require.Equal(t, content, string(b), name)
		}
	})
	t.Run("FirstOpenKilledBeforeItsManifest", func(t *testing.T) {
		// What Badger's first Open writes before its MANIFEST (its lock's
		// pid file, the MANIFEST half written) is no one else's: a store.
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "LOCK"), []byte("12345\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "MANIFEST-REWRITE"), []byte("Badg"), 0o644))
		s := mustOpen(t, dir)
		j := putJobRecord(t, s, 1, 1, 1, false)
		got, err := s.Job(j.ID)
		require.NoError(t, err)
		require.Equal(t, j.ID, got.ID)
	})
	t.Run("FileNotDir", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(f, nil, 0o644))
		_, err := Open(f)
		require.Error(t, err)
	})
	t.Run("CreatesDir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		s := mustOpen(t, dir)
		require.Equal(t, dir, s.Dir())
	})
	t.Run("ReopenKeepsRowsAndBytes", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(dir)
		require.NoError(t, err)
		j := putJobRecord(t, s, 1, 1, 1, false)
		j.Status, j.TargetsDone, j.ResultBytes, j.Lease = StatusRunning, 1, 7, 5
		require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte(`{"c":1}`)}))
		want := requireCounted(t, s)
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "Close is idempotent")

		s = mustOpen(t, dir)
		require.Equal(t, want, s.Bytes())
		got, ts, err := s.JobWithTargets(j.ID)
		require.NoError(t, err)
		require.Equal(t, j, got)
		require.Equal(t, TargetDone, ts[0].Status)
		require.Equal(t, `{"c":1}`, string(ts[0].Result))
		require.Equal(t, TargetPending, ts[1].Status)
	})
	t.Run("Closed", func(t *testing.T) {
		s, err := Open("")
		require.NoError(t, err)
		require.NoError(t, s.Close())
		_, err = s.Job(testID(1))
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, s.SaveJob(&JobRecord{ID: testID(1)}), ErrClosed)
	})
}

func TestStore_Records(t *testing.T) {
	j := JobRecord{ID: testID(9), Caller: "ünïcode caller", Status: StatusPartial, Error: "restart",
		TargetsTotal: 32, TargetsDone: 31, TargetsFailed: 2, Created: -5, Lease: 1 << 62, ResultBytes: 12345, Settled: true}
	j.Key[31] = 7
	id, _ := parseID(j.ID)
	got, err := decodeJob(id, encodeJob(&j))
	require.NoError(t, err)
	require.Equal(t, j, got)

	ts := []TargetRecord{
		{Idx: 0, URL: "https://x/a", Status: TargetPending},
		{Idx: 1, URL: "https://x/ünï", Options: []byte(`{"mode":"m"}`), Status: TargetPending},
		{Idx: 2, URL: "", Status: TargetPending},
		{Idx: 3, URL: "https://x/y?z", Options: []byte(`{"mode":"m"}`), Status: TargetFailed, Error: "e", Hint: "h", Stored: 1<<62 + 3},
	}
	specs := encodeSpecs(ts)
	got2, err := decodeSpecs(specs)
	require.NoError(t, err)
	require.Len(t, got2, len(ts))
	require.NoError(t, decodeOutcome(&got2[3], encodeOutcome(&ts[3])))
	require.Equal(t, ts, got2)
	for idx := range ts {
		one, found, err := decodeSpecAt(specs, idx)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, got2[idx].URL, one.URL)
		require.Equal(t, got2[idx].Options, one.Options)
		require.Equal(t, idx, one.Idx)
	}
	for _, idx := range []int{-1, len(ts), 0xffff} {
		_, found, err := decodeSpecAt(specs, idx)
		require.NoError(t, err)
		require.False(t, found, "no target %d", idx)
	}
	none, err := decodeSpecs(encodeSpecs(nil))
	require.NoError(t, err)
	require.Empty(t, none)

	for _, bad := range [][]byte{nil, {9}, {formatVersion}, bytes.Repeat([]byte{0xff}, 80)} {
		_, err := decodeJob(id, bad)
		require.ErrorIs(t, err, ErrCorrupt)
		_, err = decodeSpecs(bad)
		require.ErrorIs(t, err, ErrCorrupt)
		if len(bad) != 0 && bad[0] == formatVersion {
			continue
		}
		require.ErrorIs(t, decodeOutcome(&TargetRecord{}, bad), ErrCorrupt)
	}
	for name, bad := range map[string][]byte{
		"version":       append([]byte{formatVersion + 1}, specs[1:]...),
		"version-1":     append([]byte{1}, specs[1:]...),
		"count-high":    append([]byte{formatVersion, 0, byte(len(ts) + 1)}, specs[3:]...),
		"count-low":     append([]byte{formatVersion, 0, byte(len(ts) - 1)}, specs[3:]...),
		"count-huge":    {formatVersion, 0xff, 0xff, 0, 0},
		"truncated":     specs[:len(specs)-1],
		"trailing-byte": append(bytes.Clone(specs), 0),
		"long-length":   {formatVersion, 0, 1, 0x80, 0x00, 0},
	} {
		_, err := decodeSpecs(bad)
		require.ErrorIs(t, err, ErrCorrupt, name)
		_, _, err = decodeSpecAt(bad, 0)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
}

// TestStore_Targets checks the specs row: one Badger entry for all of a
// job's targets, read whole or one target at a time, deleted with its job.
func TestStore_Targets(t *testing.T) {
	s := mustOpen(t, "")
	const n = 40
	j := JobRecord{ID: testID(7), Caller: "alice", Status: StatusQueued, TargetsTotal: n, Created: 1, Lease: 1}
	ts := make([]TargetRecord, n)
	for i := range ts {
		ts[i] = TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/%d", i), Options: []byte(fmt.Sprintf(`{"n":%d}`, i)), Status: TargetPending}
	}
	require.NoError(t, s.CreateJob(&j, ts))
	require.Equal(t, map[byte]int{prefixJob: 1, prefixSpecs: 1, prefixIdem: 1, prefixLive: 1, prefixCaller: 1, prefixEvery: 1, prefixMeta: 3}, keysByPrefix(t, s),
		"one specs row for all the targets")

	j.Status, j.TargetsDone, j.TargetsFailed, j.ResultBytes = StatusRunning, 2, 1, 2
	require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: 5, Status: TargetDone, Result: []byte("{}")}))
	require.NoError(t, s.SaveTarget(&j, &TargetRecord{Idx: n - 1, Status: TargetFailed, Error: "e", Hint: "h"}))
	ts[5].Status, ts[5].Result, ts[5].ResultSize = TargetDone, []byte("{}"), 2
	ts[n-1].Status, ts[n-1].Error, ts[n-1].Hint = TargetFailed, "e", "h"

	got, err := s.Targets(j.ID)
	require.NoError(t, err)
	require.Equal(t, ts, got)
	_, got, err = s.JobWithTargets(j.ID)
	require.NoError(t, err)
	require.Equal(t, ts, got)
	for i := range ts {
		tr, err := s.Target(j.ID, i)
		require.NoError(t, err)
		require.Equal(t, ts[i], tr)
	}
	for _, idx := range []int{n, 0xffff, 0x10000, -1} {
		_, err := s.Target(j.ID, idx)
		require.ErrorIs(t, err, ErrNotFound, "target %d", idx)
	}
	_, err = s.Target(testID(8), 0)
	require.ErrorIs(t, err, ErrNotFound, "an unknown job")
	_, err = s.Targets(testID(8))
	require.ErrorIs(t, err, ErrNotFound, "an unknown job")

	// A job stored without targets has no specs row, and no targets.
	empty := JobRecord{ID: testID(9), Caller: "bob", Status: StatusQueued, Created: 1, Lease: 1}
	empty.Key[0] = 9
	require.NoError(t, s.CreateJob(&empty, nil))
	_, err = s.Targets(empty.ID)
	require.ErrorIs(t, err, ErrNotFound)
	_, got, err = s.JobWithTargets(empty.ID)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = s.Target(empty.ID, 0)
	require.ErrorIs(t, err, ErrNotFound)

	// Deleting the jobs leaves no key of theirs.
	for _, jr := range []*JobRecord{&j, &empty} {
		jr.Status, jr.Settled = StatusDone, true
		require.NoError(t, s.SaveJob(jr))
	}
	deleted, _, err := s.Sweep(1, 10)
	require.NoError(t, err)
	require.Equal(t, 2, deleted)
	require.Equal(t, emptyStore, keysByPrefix(t, s), "only the byte total is left")
}

// emptyStore is what keysByPrefix gives for a store whose jobs are all
// deleted: the byte total and the keys that say the caller index and the
// index of every job are complete.
var emptyStore = map[byte]int{prefixMeta: 3}

// keysByPrefix counts the store's keys by their first byte.
func keysByPrefix(t *testing.T, s *Store) map[byte]int {
	t.Helper()
	n := map[byte]int{}
	require.NoError(t, s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n[it.Item().Key()[0]]++
		}
		return nil
	}))
	return n
}

// FuzzDecode feeds the row decoders arbitrary bytes: never a panic, and a
// row that decodes encodes back to the same bytes (one record, one row). A
// length in a longer uvarint form than needed once decoded
// (testdata/fuzz/FuzzDecode/09bf466ad7954f84).
func FuzzDecode(f *testing.F) {
	j := JobRecord{ID: testID(1), Caller: "c", Status: StatusDone, TargetsTotal: 1}
	tr := TargetRecord{URL: "u", Options: []byte("{}"), Status: TargetDone, Result: []byte("{}")}
	f.Add(encodeJob(&j))
	f.Add(encodeSpecs([]TargetRecord{tr}))
	f.Add(encodeSpecs([]TargetRecord{tr, {URL: "v"}, {Options: []byte("{}")}}))
	f.Add(encodeOutcome(&tr))
	f.Add(encodeOutcome(&TargetRecord{Status: TargetDone, Result: bytes.Repeat([]byte("x"), inlineResultMax+1)}))
	f.Add(encodeOutcomeV2(&tr))
	f.Fuzz(func(t *testing.T, b []byte) {
		// A row of an older version is written again in the current
		// one: compare with the encoders of that version.
		var id [idLen]byte
		if j, err := decodeJob(id, b); err == nil {
			require.Equal(t, b, encodeJobAs(b[0], &j), "a decoded job encodes back to the same bytes")
		}
		ts, err := decodeSpecs(b)
		if err == nil {
			require.Equal(t, b, encodeSpecsAs(b[0], ts))
		}
		for _, idx := range []int{0, 1, len(ts) - 1, len(ts)} {
			one, found, err2 := decodeSpecAt(b, idx)
			require.Equal(t, err == nil, err2 == nil, "decodeSpecAt accepts the rows decodeSpecs does")
			require.Equal(t, err == nil && idx >= 0 && idx < len(ts), found)
			if found {
				require.Equal(t, ts[idx], one)
			}
		}
		var t2 TargetRecord
		if err := decodeOutcome(&t2, b); err == nil {
			require.Equal(t, b, encodeOutcomeAs(b[0], &t2))
			require.Equal(t, int64(len(t2.Result)) == t2.ResultSize, t2.ResultSize <= inlineResultMax || b[0] == formatVersion2,
				"a result is inline or in chunks by its length")
		}
	})
}
