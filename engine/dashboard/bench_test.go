package dashboard_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/clustertest"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// benchFill stores n settled done jobs of 2 targets each, of 100 callers
// (bench-0 … bench-99), one a nanosecond apart, straight into store.
func benchFill(b *testing.B, store *persistence.Store, n int) {
	b.Helper()
	fillJobs(b, store, n, time.Now(), nil, func(i int) string { return "bench-" + strconv.Itoa(i%100) })
}

// fillJobs stores n settled done jobs of 2 targets each (URLs
// https://example.com/bench/I/a and …/b) straight into store, job i made
// an hour before now plus i nanoseconds (so the last is the newest), its
// lease a year on: id(i) is its id (random when id is nil), caller(i) its
// caller.
func fillJobs(tb testing.TB, store *persistence.Store, n int, now time.Time, id func(int) string, caller func(int) string) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 26))
	created := now.Add(-time.Hour).UnixNano()
	lease := now.Add(365 * 24 * time.Hour).UnixNano()
	var raw [16]byte
	for i := range n {
		for k := 0; k < len(raw); k += 8 {
			binary.BigEndian.PutUint64(raw[k:], rng.Uint64())
		}
		jobID := hex.EncodeToString(raw[:])
		if id != nil {
			jobID = id(i)
		}
		ts := []persistence.TargetRecord{
			{Idx: 0, URL: fmt.Sprintf("https://example.com/bench/%d/a", i), Options: []byte("{}")},
			{Idx: 1, URL: fmt.Sprintf("https://example.com/bench/%d/b", i), Options: []byte("{}")},
		}
		j := persistence.JobRecord{
			ID: jobID, Caller: caller(i), Status: persistence.StatusDone,
			TargetsTotal: 2, TargetsDone: 2, Created: created + int64(i), Lease: lease + int64(i), Settled: true,
		}
		for k := 0; k < len(j.Key); k += 8 {
			binary.BigEndian.PutUint64(j.Key[k:], rng.Uint64())
		}
		if err := store.CreateJob(&j, ts); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkDashboard_JobsPage measures the server's time for one jobs
// page (GET /ui/jobs through the handler, rendered) with 1,000 and
// 100,000 jobs stored, for an admin: every caller's newest 25 (ListAll),
// one caller's (List; 10 jobs stored for it at 1k, 25 shown at 100k), a
// search by id prefix (FindJobs) and a search by URL that matches nothing
// (the bounded one: the newest 5,000 jobs' targets read, or all 1,000).
// Both stores are filled first; each case then runs at 1k and at 100k in
// turn, so that the two sizes meet the same machine.
func BenchmarkDashboard_JobsPage(b *testing.B) {
	type stored struct {
		name   string
		h      *dashboard.Handler
		cookie *http.Cookie
		newest string
	}
	var sizes []stored
	for _, size := range []struct {
		name string
		n    int
	}{{"1k", 1_000}, {"100k", 100_000}} {
		store := enginetest.OpenStore(b, "")
		benchFill(b, store, size.n)
		r, err := engine.New(store, enginetest.OKFetch, engine.Config{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(r.Close)
		keys, err := httpapi.ReadKeys(strings.NewReader("root root-key admin\n"))
		if err != nil {
			b.Fatal(err)
		}
		h, err := dashboard.New(r, keys, dashboard.Options{Refresh: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Close)
		req := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader(url.Values{"key": {"root-key"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		cookies := rec.Result().Cookies()
		if len(cookies) == 0 {
			b.Fatalf("sign in: %d", rec.Code)
		}
		all, _, err := r.ListAll(engine.ListOptions{Limit: 1})
		if err != nil || len(all) != 1 {
			b.Fatalf("ListAll: %v", err)
		}
		sizes = append(sizes, stored{size.name, h, cookies[0], all[0].ID})
	}
	for _, c := range []struct{ name, query string }{
		{"every-caller", ""},
		{"one-caller", "?caller=bench-7"},
		{"id-prefix", "?q=%s"},
		{"url-search", "?q=no-such-url"},
	} {
		for _, st := range sizes {
			query := c.query
			if strings.Contains(query, "%s") {
				query = fmt.Sprintf(query, st.newest[:6])
			}
			b.Run(c.name+"/stored="+st.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, "/ui/jobs"+query, nil)
					req.AddCookie(st.cookie)
					rec := httptest.NewRecorder()
					st.h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("GET /ui/jobs%s: %d", query, rec.Code)
					}
				}
			})
		}
	}
}

// BenchmarkDashboard_ClusterJobPage measures the server's time for a job
// page (GET /ui/jobs/{id}, 4 targets) on node a of an in-process cluster
// of two: a job of node a's own (read from its runner) and one of node b's
// (read from b: Node.ReadJob, a JobRequest over the loopback, with mutual
// TLS), alternating.
func BenchmarkDashboard_ClusterJobPage(b *testing.B) {
	c := clustertest.Start(b, clustertest.Options{}, "a", "b")
	na, nb := c.Node("a"), c.Node("b")
	urls := []string{"https://example.com/1", "https://example.com/2", "https://example.com/3", "https://example.com/4"}
	onA := na.Submit(b, "root-key", urls...)
	na.WaitDone(b, onA)
	onB := nb.Submit(b, "root-key", append(urls[1:], "https://example.com/b")...) // not the same targets: idempotency would give a's job back
	nb.WaitDone(b, onB)
	keys, err := httpapi.ReadKeys(strings.NewReader(clustertest.Keys))
	if err != nil {
		b.Fatal(err)
	}
	h, err := dashboard.New(na.Runner, keys, dashboard.Options{Cluster: na.Node, Refresh: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	req := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader(url.Values{"key": {"root-key"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if len(cookies) == 0 {
		b.Fatalf("sign in: %d", rec.Code)
	}
	for range 3 {
		for _, c := range []struct{ name, id string }{{"own-node", onA}, {"other-node", onB}} {
			b.Run(c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, "/ui/jobs/"+c.id, nil)
					req.AddCookie(cookies[0])
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("GET /ui/jobs/%s: %d", c.id, rec.Code)
					}
				}
			})
		}
	}
}
