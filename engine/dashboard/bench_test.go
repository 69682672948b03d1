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
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// benchFill stores n settled done jobs of 2 targets each, of 100 callers
// (bench-0 … bench-99), one a nanosecond apart, straight into store.
func benchFill(b *testing.B, store *persistence.Store, n int) {
	b.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), 26))
	created := time.Now().Add(-time.Hour).UnixNano()
	lease := time.Now().Add(365 * 24 * time.Hour).UnixNano()
	var id [16]byte
	for i := range n {
		for k := 0; k < len(id); k += 8 {
			binary.BigEndian.PutUint64(id[k:], rng.Uint64())
		}
		ts := []persistence.TargetRecord{
			{Idx: 0, URL: fmt.Sprintf("https://example.com/bench/%d/a", i), Options: []byte("{}")},
			{Idx: 1, URL: fmt.Sprintf("https://example.com/bench/%d/b", i), Options: []byte("{}")},
		}
		j := persistence.JobRecord{
			ID: hex.EncodeToString(id[:]), Caller: "bench-" + strconv.Itoa(i%100), Status: persistence.StatusDone,
			TargetsTotal: 2, TargetsDone: 2, Created: created + int64(i), Lease: lease + int64(i), Settled: true,
		}
		for k := 0; k < len(j.Key); k += 8 {
			binary.BigEndian.PutUint64(j.Key[k:], rng.Uint64())
		}
		if err := store.CreateJob(&j, ts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDashboard_JobsPage measures the server's time for one jobs
// page (GET /ui/jobs through the handler, rendered) with 1,000 and
// 100,000 jobs stored, for an admin: every caller's newest 25 (ListAll),
// one caller's (List), a search by id prefix (FindJobs) and a search by
// URL (the newest 5,000 jobs' targets read: the bounded one).
func BenchmarkDashboard_JobsPage(b *testing.B) {
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
		keys, err := httpapi.ReadKeys(strings.NewReader("root root-key admin\n"))
		if err != nil {
			b.Fatal(err)
		}
		h, err := dashboard.New(r, keys, dashboard.Options{Refresh: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
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
		for _, c := range []struct{ name, query string }{
			{"every-caller", ""},
			{"one-caller", "?caller=bench-7"},
			{"id-prefix", "?q=" + all[0].ID[:6]},
			{"url-search", "?q=no-such-url"},
		} {
			b.Run(c.name+"/stored="+size.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, "/ui/jobs"+c.query, nil)
					req.AddCookie(cookies[0])
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("GET /ui/jobs%s: %d", c.query, rec.Code)
					}
				}
			})
		}
		h.Close()
		r.Close()
	}
}
