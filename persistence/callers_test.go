package persistence

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
)

// callerJob stores a job of caller's created at created.
func callerJob(t *testing.T, s *Store, n int, caller string, created int64, settled bool) JobRecord {
	t.Helper()
	j := JobRecord{ID: testID(n), Caller: caller, Status: StatusQueued, TargetsTotal: 1, Created: created, Lease: created}
	j.Key[0], j.Key[1] = byte(n>>8), byte(n)
	if settled {
		j.Status, j.Settled = StatusDone, true
	}
	require.NoError(t, s.CreateJob(&j, []TargetRecord{{Idx: 0, URL: "http://a"}}))
	return j
}

// pages lists all of caller's jobs, limit a page, and returns their ids
// and the number of pages.
func pages(t *testing.T, s *Store, caller string, limit int, keep func(*JobRecord) bool) ([]string, int) {
	t.Helper()
	var ids []string
	var after []byte
	for n := 1; ; n++ {
		jobs, next, err := s.CallerJobs(caller, after, limit, keep)
		require.NoError(t, err)
		require.LessOrEqual(t, len(jobs), limit)
		for _, j := range jobs {
			require.Equal(t, caller, j.Caller)
			ids = append(ids, j.ID)
		}
		if next == nil {
			return ids, n
		}
		after = next
	}
}

// TestStore_CallerJobs: a caller's jobs come newest first (created, then
// id, both descending), a page at a time, only theirs, filtered by keep,
// as Job reads them; deleting a job deletes its entry.
func TestStore_CallerJobs(t *testing.T) {
	s := mustOpen(t, "")
	var alice []JobRecord
	for n := range 25 {
		created := int64(100 + n/3) // three jobs a time: ties broken by id
		alice = append(alice, callerJob(t, s, n, "alice", created, n%2 == 0))
		callerJob(t, s, 1000+n, "bob", created, false)
	}
	want := make([]string, len(alice))
	sorted := append([]JobRecord(nil), alice...)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].Created != sorted[b].Created {
			return sorted[a].Created > sorted[b].Created
		}
		return sorted[a].ID > sorted[b].ID
	})
	for i := range sorted {
		want[i] = sorted[i].ID
	}
	for _, limit := range []int{1, 4, 25, 100} {
		got, n := pages(t, s, "alice", limit, nil)
		require.Equal(t, want, got, "limit %d", limit)
		require.Equal(t, max(1, (len(want)+limit-1)/limit), n, "no empty page at the end")
	}
	bob, _ := pages(t, s, "bob", 7, nil)
	require.Len(t, bob, 25)
	none, _ := pages(t, s, "carol", 7, nil)
	require.Empty(t, none)

	// keep: the unsettled ones, as Job reads them (progress recounted).
	require.NoError(t, s.SaveOutcome(alice[1].ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("{}"), Stored: 500}))
	live, _ := pages(t, s, "alice", 3, func(j *JobRecord) bool { return !j.Settled })
	require.Len(t, live, 12)
	jobs, _, err := s.CallerJobs("alice", nil, 100, func(j *JobRecord) bool { return j.ID == alice[1].ID })
	require.NoError(t, err)
	one, err := s.Job(alice[1].ID)
	require.NoError(t, err)
	require.Equal(t, []JobRecord{one}, jobs)
	require.Equal(t, 1, one.TargetsDone)

	_, _, err = s.CallerJobs("alice", []byte("not a cursor"), 3, nil)
	require.ErrorIs(t, err, ErrBadCursor)

	// Deleted with its job.
	n, _, err := s.Sweep(1<<62, 100)
	require.NoError(t, err)
	require.Equal(t, 13, n)
	left, _ := pages(t, s, "alice", 100, nil)
	require.Len(t, left, 12)
}

// Another caller's job under this caller's prefix (two names whose SHA-256
// begin with the same 8 bytes) is passed over.
func TestStore_CallerJobsHashCollision(t *testing.T) {
	s := mustOpen(t, "")
	a := callerJob(t, s, 1, "alice", 10, false)
	b := callerJob(t, s, 2, "bob", 20, false)
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		k := callerKey("alice", b.Created, mustID(t, b.ID)) // bob's job under alice's prefix
		return 0, txn.Set(k, nil)
	}))
	jobs, next, err := s.CallerJobs("alice", nil, 10, nil)
	require.NoError(t, err)
	require.Nil(t, next)
	require.Len(t, jobs, 1)
	require.Equal(t, a.ID, jobs[0].ID)
}

// A store whose jobs have no caller entries (written before the index) is
// indexed by the next Open, once.
func TestStore_CallerIndexWrittenByOpen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	for n := range 10 {
		callerJob(t, s, n, "alice", int64(n), n%2 == 0)
	}
	// As a store of format 2 was: no c keys, no marker.
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		for n := range 10 {
			if err := txn.Delete(callerKey("alice", int64(n), mustID(t, testID(n)))); err != nil {
				return 0, err
			}
		}
		return 0, txn.Delete(keyCallers)
	}))
	ids, _ := pages(t, s, "alice", 100, nil)
	require.Empty(t, ids)
	require.NoError(t, s.Close())

	s = mustOpen(t, dir)
	ids, _ = pages(t, s, "alice", 3, nil)
	require.Len(t, ids, 10)
	require.Equal(t, testID(9), ids[0])
	require.Equal(t, 10, keysByPrefix(t, s)[prefixCaller])
}

// allPages lists every job, limit a page, and returns their ids and the
// number of pages.
func allPages(t *testing.T, s *Store, limit int, keep func(*JobRecord) bool) ([]string, int) {
	t.Helper()
	var ids []string
	var after []byte
	for n := 1; ; n++ {
		jobs, next, err := s.AllJobs(after, limit, keep)
		require.NoError(t, err)
		require.LessOrEqual(t, len(jobs), limit)
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		if next == nil {
			return ids, n
		}
		after = next
	}
}

// TestStore_AllJobs: every caller's jobs come newest first (created, then
// id, both descending), a page at a time, filtered by keep, as Job reads
// them; a cursor of CallerJobs is a position in the same order; deleting
// a job (the sweep) deletes its entry.
func TestStore_AllJobs(t *testing.T) {
	s := mustOpen(t, "")
	var all []JobRecord
	for n := range 30 {
		caller := []string{"alice", "bob", "carol"}[n%3]
		all = append(all, callerJob(t, s, n, caller, int64(100+n/4), n%2 == 0)) // four jobs a time: ties broken by id
	}
	sorted := append([]JobRecord(nil), all...)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].Created != sorted[b].Created {
			return sorted[a].Created > sorted[b].Created
		}
		return sorted[a].ID > sorted[b].ID
	})
	want := make([]string, len(sorted))
	for i := range sorted {
		want[i] = sorted[i].ID
	}
	for _, limit := range []int{1, 4, 30, 100} {
		got, n := allPages(t, s, limit, nil)
		require.Equal(t, want, got, "limit %d", limit)
		require.Equal(t, max(1, (len(want)+limit-1)/limit), n, "no empty page at the end")
	}

	// keep sees every job, as Job reads it.
	require.NoError(t, s.SaveOutcome(all[1].ID, &TargetRecord{Idx: 0, Status: TargetDone, Result: []byte("{}"), Stored: 500}))
	jobs, _, err := s.AllJobs(nil, 100, func(j *JobRecord) bool { return j.ID == all[1].ID })
	require.NoError(t, err)
	one, err := s.Job(all[1].ID)
	require.NoError(t, err)
	require.Equal(t, []JobRecord{one}, jobs)
	require.Equal(t, 1, one.TargetsDone)
	bobs, _ := allPages(t, s, 3, func(j *JobRecord) bool { return j.Caller == "bob" })
	require.Len(t, bobs, 10)

	// A CallerJobs cursor goes on after its job in this order too.
	_, next, err := s.CallerJobs("alice", nil, 1, nil)
	require.NoError(t, err)
	after, _, err := s.AllJobs(next, 100, nil)
	require.NoError(t, err)
	newest := slices.IndexFunc(sorted, func(j JobRecord) bool { return j.Caller == "alice" })
	var afterIDs []string
	for _, j := range after {
		afterIDs = append(afterIDs, j.ID)
	}
	require.Equal(t, want[newest+1:], afterIDs)

	_, _, err = s.AllJobs([]byte("not a cursor"), 3, nil)
	require.ErrorIs(t, err, ErrBadCursor)

	// Deleted with its job: the sweep takes the settled ones.
	n, _, err := s.Sweep(1<<62, 100)
	require.NoError(t, err)
	require.Equal(t, 15, n)
	left, _ := allPages(t, s, 100, nil)
	require.Len(t, left, 15)
	require.Equal(t, 15, keysByPrefix(t, s)[prefixEvery])
}

// TestStore_EveryIndexWrittenByOpen: a store whose jobs have no e keys
// (written before format 4) is indexed by the next Open, and checked at each
// Open after; a store opened read-only is not written.
func TestStore_EveryIndexWrittenByOpen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	require.NoError(t, err)
	for n := range 10 {
		callerJob(t, s, n, []string{"alice", "bob"}[n%2], int64(n), n%2 == 0)
	}
	// As a store of format 3 was: no e keys, no marker.
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		for n := range 10 {
			if err := txn.Delete(everyKey(int64(n), mustID(t, testID(n)))); err != nil {
				return 0, err
			}
		}
		return 0, txn.Delete(keyEvery)
	}))
	ids, _ := allPages(t, s, 100, nil)
	require.Empty(t, ids)
	require.NoError(t, s.Close())

	ro, err := OpenReadOnly(dir)
	require.NoError(t, err)
	ids, _ = allPages(t, ro, 100, nil)
	require.Empty(t, ids, "a read-only store is not indexed")
	require.NoError(t, ro.Close())

	s = mustOpen(t, dir)
	ids, _ = allPages(t, s, 3, nil)
	require.Len(t, ids, 10)
	require.Equal(t, testID(9), ids[0])
	require.Equal(t, 10, keysByPrefix(t, s)[prefixEvery])
	require.NoError(t, s.Close())

	// Checked at each Open, not only once: a job that lost its entry is
	// indexed again although the marker is stored, and an entry whose job
	// row is gone (an older version deleted the job) is deleted.
	s, err = Open(dir)
	require.NoError(t, err)
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		if err := txn.Delete(everyKey(0, mustID(t, testID(0)))); err != nil {
			return 0, err
		}
		return 0, txn.Delete(jobKey(mustID(t, testID(1))))
	}))
	require.NoError(t, s.Close())
	s = mustOpen(t, dir)
	ids, _ = allPages(t, s, 100, nil)
	require.Len(t, ids, 9)
	require.Equal(t, testID(0), ids[len(ids)-1])
	require.Equal(t, 9, keysByPrefix(t, s)[prefixEvery])
	require.Equal(t, 9, keysByPrefix(t, s)[prefixJob])
}

// TestStore_JobsByIDPrefix: the jobs whose id starts with a prefix, in id
// order, filtered by keep, at most scan looked at.
func TestStore_JobsByIDPrefix(t *testing.T) {
	s := mustOpen(t, "")
	ids := []string{
		"abcd0000000000000000000000000001",
		"abcd0000000000000000000000000002",
		"abce0000000000000000000000000003",
		"0bcd0000000000000000000000000004",
	}
	for i, id := range ids {
		j := JobRecord{ID: id, Caller: []string{"alice", "bob"}[i%2], Status: StatusQueued, TargetsTotal: 1, Created: int64(i), Lease: int64(i)}
		j.Key[0] = byte(i)
		require.NoError(t, s.CreateJob(&j, []TargetRecord{{Idx: 0, URL: "http://a"}}))
	}
	idsOf := func(jobs []JobRecord) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	jobs, truncated, err := s.JobsByIDPrefix([]byte{0xab, 0xcd}, 100, nil)
	require.NoError(t, err)
	require.False(t, truncated)
	require.Equal(t, ids[:2], idsOf(jobs))
	jobs, _, err = s.JobsByIDPrefix([]byte{0xab}, 100, func(j *JobRecord) bool { return j.Caller == "alice" })
	require.NoError(t, err)
	require.Equal(t, []string{ids[0], ids[2]}, idsOf(jobs))
	jobs, truncated, err = s.JobsByIDPrefix([]byte{0xab}, 2, nil)
	require.NoError(t, err)
	require.True(t, truncated)
	require.Equal(t, ids[:2], idsOf(jobs))
	jobs, _, err = s.JobsByIDPrefix(nil, 100, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 4)
	jobs, _, err = s.JobsByIDPrefix([]byte{0xff}, 100, nil)
	require.NoError(t, err)
	require.Empty(t, jobs)
	_, _, err = s.JobsByIDPrefix(make([]byte, 17), 100, nil)
	require.ErrorIs(t, err, ErrBadCursor)
}

// TestStore_EveryIndexAfterARollback: a store indexed by this version,
// then run by a version before the e keys (a rollback: it creates jobs
// with their c keys only, and leaves the marker, which it does not know),
// then opened by this version again lists every job across callers, as
// it lists each caller's: the index is checked at Open, not trusted for
// good once its marker is stored.
func TestStore_EveryIndexAfterARollback(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	for n := range 4 {
		callerJob(t, s, n, "alice", int64(n), true)
	}
	// The older version's jobs: their rows and c keys, no e key.
	for n := 4; n < 8; n++ {
		callerJob(t, s, n, "bob", int64(n), true)
	}
	require.NoError(t, s.update("test", func(txn *badger.Txn) (int64, error) {
		for n := 4; n < 8; n++ {
			if err := txn.Delete(everyKey(int64(n), mustID(t, testID(n)))); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}))
	require.NoError(t, s.Close())

	s = mustOpen(t, dir)
	bob, _, err := s.CallerJobs("bob", nil, 100, nil)
	require.NoError(t, err)
	require.Len(t, bob, 4, "bob's own list has his jobs")
	ids, _ := allPages(t, s, 100, nil)
	require.Len(t, ids, 8, "the list across callers lacks the jobs bob's list has: %v", ids)
	require.NoError(t, s.Close())
}

// BenchmarkStore_OpenIndexCheck is what Open's check of the caller index
// and the index of every job costs (indexes, with both whole: a
// key-only walk of the job rows and of each index), at 1k and 100k stored
// jobs on disk; Open is the whole Open and Close of such a store.
func BenchmarkStore_OpenIndexCheck(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		dir := filepath.Join(b.TempDir(), "store")
		s, err := Open(dir)
		require.NoError(b, err)
		wb := s.db.NewWriteBatch()
		for i := range n {
			var id [idLen]byte
			binary.BigEndian.PutUint64(id[8:], uint64(i)+1)
			j := JobRecord{ID: hex.EncodeToString(id[:]), Caller: fmt.Sprint("caller", i%100), Status: StatusDone, Settled: true, TargetsTotal: 1, Created: int64(i) + 1}
			for _, kv := range [][2][]byte{{jobKey(id), encodeJob(&j)}, {callerKey(j.Caller, j.Created, id), nil}, {everyKey(j.Created, id), nil}} {
				require.NoError(b, wb.Set(kv[0], kv[1]))
			}
		}
		require.NoError(b, wb.Flush())
		require.NoError(b, s.Close())
		name := fmt.Sprintf("stored=%dk", n/1000)
		b.Run(name+"/check", func(b *testing.B) {
			s, err := Open(dir)
			require.NoError(b, err)
			defer s.Close()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.indexes(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/Open", func(b *testing.B) {
			for b.Loop() {
				s, err := Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStore_ListScanBoundsAPage: a page looks at most at ListScan index
// entries, whatever keep refuses: with a filter that only the oldest of
// 2.5 × ListScan jobs passes, CallerJobs and AllJobs give pages with no
// job and a next cursor until the one that holds it, and the walk lists
// it once; a filter that passes all fills each page as before.
func TestStore_ListScanBoundsAPage(t *testing.T) {
	s := mustOpen(t, "")
	n := ListScan*5/2 + 1
	for i := range n {
		callerJob(t, s, i, "alice", int64(i)+1, true)
	}
	var looked int
	oldest := func(j *JobRecord) bool {
		looked++
		return j.ID == testID(0)
	}
	ids, pagesAll := allPages(t, s, 10, oldest)
	require.Equal(t, []string{testID(0)}, ids)
	require.Equal(t, 3, pagesAll, "ListScan entries a page: three pages for 2.5 × ListScan")
	require.Equal(t, n, looked, "each job looked at once")
	ids, pagesMine := pages(t, s, "alice", 10, oldest)
	require.Equal(t, []string{testID(0)}, ids)
	require.Equal(t, 3, pagesMine)

	jobs, next, err := s.AllJobs(nil, 10, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 10, "a filter that passes all fills the page")
	require.NotNil(t, next)
}
