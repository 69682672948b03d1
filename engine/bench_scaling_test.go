package engine_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/persistence"
)

// benchFillerTargets is the number of targets of each filler job: 32, the
// most a job may have. (With one spec row per target, filling 100,000 of
// those stalled Badger for over 100 s, and the fillers had 8; a job's specs
// are one row now.) A filler has its specs row but no result rows: only the
// job row, the specs row and the index entries matter to the lookups
// measured here.
const benchFillerTargets = 32

// benchFill writes n settled jobs (status done) straight through the
// store into dir, closes the store, and opens it once more to let Badger's
// compactions finish, so that they sit in Badger's settled tables rather
// than its memtable, as in a store that has been serving for a while.
// Ids and idempotency keys are random (seeded), as the runner's are; leases
// are a year ahead, so that no filler ever expires during a run.
func benchFill(b *testing.B, dir string, n int) {
	b.Helper()
	store, err := persistence.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 4))
	ts := make([]persistence.TargetRecord, benchFillerTargets)
	for i := range ts {
		ts[i] = persistence.TargetRecord{Idx: i, URL: fmt.Sprintf("https://example.com/filler/page-%d", i), Options: []byte("{}")}
	}
	created := time.Now().Add(-time.Hour).UnixNano()
	lease := time.Now().Add(365 * 24 * time.Hour).UnixNano()
	var id [16]byte
	for i := 0; i < n; i++ {
		for k := 0; k < len(id); k += 8 {
			binary.BigEndian.PutUint64(id[k:], rng.Uint64())
		}
		j := persistence.JobRecord{
			ID: hex.EncodeToString(id[:]), Caller: "filler-" + strconv.Itoa(i%100), Status: persistence.StatusDone,
			TargetsTotal: benchFillerTargets, TargetsDone: benchFillerTargets, Created: created + int64(i), Lease: lease + int64(i),
			Settled: true,
		}
		for k := 0; k < len(j.Key); k += 8 {
			binary.BigEndian.PutUint64(j.Key[k:], rng.Uint64())
		}
		if err := store.CreateJob(&j, ts); err != nil {
			b.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		b.Fatal(err)
	}
	if store, err = persistence.Open(dir); err != nil {
		b.Fatal(err)
	}
	badgerSettle()
	if err := store.Close(); err != nil {
		b.Fatal(err)
	}
}

// benchCopyDir copies the files of a store directory (Badger's are flat).
func benchCopyDir(b *testing.B, from, to string) {
	b.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		b.Fatal(err)
	}
}

// benchStoredSizes are the stored-job counts of the scaling benchmarks.
var benchStoredSizes = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"100k", 100_000}}

// BenchmarkRunner_Scaling measures Submit and Status with 1,000 and 100,000
// settled jobs already stored (filler jobs, see benchFill). Issue 4 wants
// each at 100k within 1.5× of itself at 1k. Every run starts from a fresh
// copy of the same filled store.
//
//   - Submit/stored=N: one op is one Submit of a new 32-target job: the
//     idempotency lookup, the caps, the job's rows and its actor. The
//     FetchFunc blocks until Close, so the submitted jobs wait in the
//     rotation and nothing else runs meanwhile.
//   - Status/stored=N: one op is one Status of a done 32-target job (300-byte
//     results): read from the store and decoded.
func BenchmarkRunner_Scaling(b *testing.B) {
	templates := map[int]string{}
	template := func(n int) string {
		if templates[n] == "" {
			dir := filepath.Join(b.TempDir(), "template")
			benchFill(b, dir, n)
			templates[n] = dir
		}
		return templates[n]
	}
	open := func(b *testing.B, n int) *persistence.Store {
		dir := filepath.Join(b.TempDir(), "store")
		benchCopyDir(b, template(n), dir)
		store, err := persistence.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		badgerSettle()
		b.Cleanup(func() {
			if err := store.Close(); err != nil {
				b.Error(err)
			}
		})
		return store
	}
	for _, size := range benchStoredSizes {
		b.Run("Submit/stored="+size.name, func(b *testing.B) { benchSubmit(b, open(b, size.n)) })
	}
	for _, size := range benchStoredSizes {
		b.Run("Status/stored="+size.name, func(b *testing.B) { benchStatus(b, open(b, size.n)) })
	}
}

func benchSubmit(b *testing.B, store *persistence.Store) {
	blocked := func(ctx context.Context, _ *engine.Caller, _ engine.Target) (engine.Result, error) {
		<-ctx.Done()
		return engine.Result{}, ctx.Err()
	}
	r, err := engine.New(store, blocked, engine.Config{JobsTotal: 1 << 30, JobsPerCaller: 1 << 30}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	c := &engine.Caller{Name: "bench"}
	ts := make([]engine.Target, 32)
	for i := range ts {
		ts[i] = engine.Target{URL: fmt.Sprintf("https://example.com/submit/page-%d", i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ts[0].URL = "https://example.com/submit/" + strconv.Itoa(i) // a new idempotency key
		if _, reused, err := r.Submit(context.Background(), c, "", ts); err != nil || reused {
			b.Fatalf("submit %d: reused %v, %v", i, reused, err)
		}
	}
	b.StopTimer()
}

func benchStatus(b *testing.B, store *persistence.Store) {
	content := string(benchValue)
	done := make(chan string, 1)
	r, err := engine.New(store, func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
		return engine.Result{Content: content, Meta: map[string]any{"status": 200}}, nil
	}, engine.Config{Hooks: engine.Hooks{Job: func(o string) {
		if o != "created" {
			done <- o
		}
	}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ts := make([]engine.Target, 32)
	for i := range ts {
		ts[i] = engine.Target{URL: fmt.Sprintf("https://example.com/status/page-%d", i)}
	}
	id, _, err := r.Submit(context.Background(), &engine.Caller{Name: "bench"}, "", ts)
	if err != nil {
		b.Fatal(err)
	}
	select {
	case o := <-done:
		if o != "done" {
			b.Fatalf("job ended %s", o)
		}
	case <-time.After(benchTimeout):
		b.Fatal("job did not end")
	}
	// The hook runs just before the supervisor lets the job's actor go;
	// from then on Status reads the store.
	time.Sleep(10 * time.Millisecond)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j, got, ok := r.Status(id)
		if !ok || j.Status != "done" || len(got) != 32 || got[31].Result == nil {
			b.Fatalf("status: %v %+v %d", ok, j, len(got))
		}
	}
	b.StopTimer()
}
