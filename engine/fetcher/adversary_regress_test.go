package fetcher_test

// Adversarial tests that FAIL against the current fetcher. Each names the
// rule it breaks.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
)

const advChildEnv = "SIFTBATCH_ADV_CHILD"

// TestAdversary_JQDeepSetpathKillsProcess: rule 10 ("No input makes
// library code panic") and issue 13 (a jq program "that fails or runs out
// of bounds → that target fails with a hint"). One jq program, accepted by
// Check at submit, builds a 4-million-deep value in a single gojq call
// (setpath recurses once per path element), overflows the goroutine stack
// and kills the whole process with "fatal error: stack overflow" — a
// fatal error that no recover, and so no supervision strategy, can catch:
// the embedding service dies. The program runs in a child process here.
func TestAdversary_JQDeepSetpathKillsProcess(t *testing.T) {
	const program = `("\u0000" * 4000000 | explode) as $p | null | setpath($p; 1) | 1`
	if os.Getenv(advChildEnv) == "setpath" {
		s := advJSONSite(t, `null`)
		f, _ := advFetcher(t, fetcher.Options{AllowPrivate: true})
		// A few tries: on a slow machine the program may run out of its
		// second before it reaches setpath.
		for i := 0; i < 3; i++ {
			_, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: s.URL, Options: engine.Options{JQ: program}})
			println("try", i, "ended:", err != nil)
		}
		println("ADV-SURVIVED")
		return
	}
	f, err := fetcher.New(fetcher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Check(engine.Target{URL: "https://example.com", Options: engine.Options{JQ: program}}); err != nil {
		t.Skipf("refused at submit (fine): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAdversary_JQDeepSetpathKillsProcess$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), advChildEnv+"=setpath")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "ADV-SURVIVED") {
		first := string(out)
		for _, l := range strings.Split(first, "\n") {
			if strings.Contains(l, "fatal error") || strings.Contains(l, "exceeds") {
				first = l
				break
			}
		}
		if len(first) > 300 {
			first = first[:300]
		}
		t.Fatalf("a jq program accepted at submit killed the process (%v): %s", err, first)
	}
}

// TestAdversary_JQNativeCallOverrunsTimeBound: issue 13, jq "bounded in
// time (1 s)". The bound is a context that gojq checks between its own
// steps only; one builtin call on a large string (here test/1 on a string
// of some hundred KB, built by "a" * N in one more call) runs for seconds
// before the context is looked at. The worker is held that long (a larger N holds it
// for minutes), and the fetch's own deadline does not stop it either.
// (RE2 is linear, but with a big constant: ~400 KB against a regular
// expression with a bounded repeat costs seconds; 1 MB ~10 s.)
func TestAdversary_JQNativeCallOverrunsTimeBound(t *testing.T) {
	s := advJSONSite(t, `null`)
	f, _ := advFetcher(t, fetcher.Options{AllowPrivate: true})
	const expr = `((a|b)(a|c)?){1,100}z`
	// Size the string so that the one call takes about 4 s in this build
	// (the race detector slows RE2 tenfold): time it on 20 KB.
	re := regexp.MustCompile(expr)
	probe := strings.Repeat("a", 20000)
	t0 := time.Now()
	re.MatchString(probe)
	perByte := time.Since(t0) / time.Duration(len(probe))
	n := int(4 * time.Second / max(perByte, time.Nanosecond))
	n = min(max(n, 5000), 4000000)
	program := `("a" * ` + strconv.Itoa(n) + `) | test("` + expr + `")`
	if err := f.Check(engine.Target{Options: engine.Options{JQ: program}}); err != nil {
		t.Skipf("refused at submit (fine): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	_, err := f.Fetch(ctx, &engine.Caller{Name: "t"}, engine.Target{URL: s.URL, Options: engine.Options{JQ: program}})
	took := time.Since(start)
	if took > 1500*time.Millisecond {
		t.Fatalf("jq on a %d KB string ran %s (bound: 1 s; allowed here: 1.5 s); error %v", n>>10, took.Round(time.Millisecond), err)
	}
}

// TestAdversary_JQOutputBuiltBeforeTheCap: issue 13, jq bounded in
// "output (the body cap)". The cap is checked only once a whole output
// value has been built and marshalled: one value of a program accepted at
// submit costs hundreds of MB with a 64 KiB cap (setpath([N]) allocates an
// N-element array in one call; N may be up to 2^29, 8 GiB), so a few
// targets run out the embedding service's memory.
func TestAdversary_JQOutputBuiltBeforeTheCap(t *testing.T) {
	s := advJSONSite(t, `null`)
	const maxBody = 64 << 10
	f, _ := advFetcher(t, fetcher.Options{AllowPrivate: true, MaxBody: maxBody})
	const program = `null | setpath([20000000]; 1)`
	if err := f.Check(engine.Target{Options: engine.Options{JQ: program}}); err != nil {
		t.Skipf("refused at submit (fine): %v", err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: s.URL, Options: engine.Options{JQ: program}})
	runtime.ReadMemStats(&after)
	var te *engine.TargetError
	if !errors.As(err, &te) {
		t.Errorf("want a failed target (output over the cap), got %v", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(64 * maxBody); alloc > limit {
		t.Fatalf("one jq target allocated %d MiB with a %d KiB output cap (%v)", alloc>>20, maxBody>>10, err)
	}
}
