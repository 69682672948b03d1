package nohooktest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
)

// markerDir is where a copy of this test binary started as a filter
// process (which, without the hook, runs the tests again) leaves a mark
// named after its parent: its environment is emptied by the fetcher, so a
// fixed directory is the only way to tell the parent.
var markerDir = filepath.Join(os.TempDir(), "siftbatch-nohooktest")

// TestMain deliberately does NOT call fetcher.RunFilterChild: this is the
// embedder who forgot the hook. If this binary was started by the fetcher
// as a filter process (its parent is the same executable), it leaves a
// mark and exits before any test runs, so that a missing guard in the
// fetcher can never turn into a fork bomb here.
func TestMain(m *testing.M) {
	if sameExeAncestors() > 0 {
		_ = os.MkdirAll(markerDir, 0o700)
		_ = os.WriteFile(filepath.Join(markerDir, strconv.Itoa(os.Getppid())+"-"+strconv.Itoa(os.Getpid())), []byte(strings.Join(os.Args, " ")), 0o600)
		os.Exit(3)
	}
	goleak.VerifyTestMain(m)
}

// TestFetcher_FilterWithoutHook checks the rule "A program that does not
// call [RunFilterChild] gets no filter process: its filtered targets fail
// with "filters unavailable"" (fetcher's doc): a clear failed target with
// a hint, never a hang; its unfiltered targets are fetched as usual; and
// the filter processes it tries to start never run the program's own main
// (here: the tests) again.
func TestFetcher_FilterWithoutHook(t *testing.T) {
	if os.Getenv("SIFTBATCH_ADV_FINDINGS") != "1" {
		t.Skip("finding 1 (a filter process of a program without the hook runs its main again): set SIFTBATCH_ADV_FINDINGS=1")
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("no /proc")
	}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"a":1}`))
	}))
	defer site.Close()
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true, FilterProcs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: site.URL})
	if err != nil || res.Content != `{"a":1}` {
		t.Fatalf("unfiltered: %q %v", res.Content, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(context.Background(), &engine.Caller{Name: "t"}, engine.Target{URL: site.URL, Options: engine.Options{JQ: ".a"}})
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute): // a hang, not a bound on how long it takes
		t.Fatal("a filtered fetch without the hook hangs")
	}
	var te *engine.TargetError
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "filters unavailable") || te.Hint == "" {
		t.Errorf("filtered fetch without the hook: %v (%+v), want a failed target \"filters unavailable\" with a hint", err, te)
	}
	marks, _ := filepath.Glob(filepath.Join(markerDir, strconv.Itoa(os.Getpid())+"-*"))
	for _, m := range marks {
		args, _ := os.ReadFile(m)
		t.Errorf("a filter process ran this program's main (its tests) again: %s, args %q", filepath.Base(m), args)
		os.Remove(m)
	}
}

// sameExeAncestors counts this process's ancestors that run the same
// executable.
func sameExeAncestors() int {
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0
	}
	n := 0
	for pid := os.Getppid(); pid > 1; {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil || exe != self {
			return n
		}
		n++
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return n
		}
		_, rest, _ := strings.Cut(string(stat), ") ")
		f := strings.Fields(rest)
		if len(f) < 2 {
			return n
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return n
}
