package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sift/batch/persistence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestParseFlags_AfterPositional: flags may follow positional arguments
// ("show ID --results"); --help prints the usage and returns ErrHelpShown;
// a bad flag is a usage error whose hint names the command's --help.
func TestParseFlags_AfterPositional(t *testing.T) {
	t.Parallel()
	fs := NewFlagSet("show", "show [--results] ID", "Print one job.")
	results := fs.Bool("results", false, "include results")
	pos, err := ParseFlags(fs, []string{"abc", "--results"}, nil)
	if err != nil || len(pos) != 1 || pos[0] != "abc" || !*results {
		t.Fatalf("got %v, %v, results %v", pos, err, *results)
	}
	var out strings.Builder
	if _, err := ParseFlags(NewFlagSet("show", "show ID", "Print one job."), []string{"--help"}, &out); !errors.Is(err, ErrHelpShown) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.HasPrefix(out.String(), "Usage: siftbatch show ID\n\nPrint one job.\n") {
		t.Errorf("usage:\n%s", out.String())
	}
	_, err = ParseFlags(NewFlagSet("show", "show ID", ""), []string{"--nope"}, nil)
	var ue *UsageError
	if !errors.As(err, &ue) || ue.Hint() != `run "siftbatch show --help" for its flags` || !strings.HasPrefix(ue.Error(), "show: ") {
		t.Fatalf("bad flag: %v", err)
	}
	if err := ParseNoArgs(NewFlagSet("jobs", "jobs", ""), []string{"extra"}, nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), `unexpected argument "extra"`) {
		t.Fatalf("extra argument: %v", err)
	}
	if err := Usagef("no command"); !errors.As(err, &ue) || ue.Hint() != `run "siftbatch help" for the commands` {
		t.Fatalf("Usagef: %v", err)
	}
}

// TestOpenForInspection_Errors: no directory is a usage error, a directory
// without a store says so and creates nothing, and a store in use names
// its directory and wraps persistence.ErrInUse.
func TestOpenForInspection_Errors(t *testing.T) {
	t.Parallel()
	var ue *UsageError
	if _, err := OpenForInspection(""); !errors.As(err, &ue) {
		t.Errorf(`"": %v, want a usage error`, err)
	}
	missing := filepath.Join(t.TempDir(), "none")
	if _, err := OpenForInspection(missing); err == nil || !strings.Contains(err.Error(), "no siftbatch store at "+missing) {
		t.Errorf("missing: %v", err)
	}
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, open := range map[string]func(string) (*persistence.Store, error){"OpenStore": OpenStore, "OpenForInspection": OpenForInspection} {
		_, err := open(dir)
		var in *StoreInUseError
		if !errors.As(err, &in) || !errors.Is(err, persistence.ErrInUse) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s of a store in use: %v", name, err)
		}
	}
}

// TestPlural picks the word for n.
func TestPlural(t *testing.T) {
	t.Parallel()
	if Plural(1, "job", "jobs") != "job" || Plural(0, "job", "jobs") != "jobs" || Plural(2, "job", "jobs") != "jobs" {
		t.Error("Plural")
	}
}

// TestOpenStore_DataIsAFile: --data naming a file is an error that says
// so, for serve and demo (OpenStore) and jobs and show (OpenForInspection);
// the file is left as it was.
func TestOpenStore_DataIsAFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "--data " + file + " is a file: give the store's directory (made if missing), or \"\" for a store in memory"
	if _, err := OpenStore(file); err == nil || err.Error() != want {
		t.Errorf("OpenStore(a file): %v, want %s", err, want)
	}
	if _, err := OpenForInspection(file); err == nil || err.Error() != want {
		t.Errorf("OpenForInspection(a file): %v, want %s", err, want)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "mine" {
		t.Errorf("the file after: %q %v", b, err)
	}
}

// TestHint_PrintedApart: WithHint keeps the error (errors.Is) and carries
// the hint; nil stays nil.
func TestHint_PrintedApart(t *testing.T) {
	t.Parallel()
	base := errors.New("dial: refused")
	err := WithHint(fmt.Errorf("submit: %w", base), "hint: start serve")
	if !errors.Is(err, base) || err.Error() != "submit: dial: refused" || HintOf(fmt.Errorf("x: %w", err)) != "hint: start serve" {
		t.Errorf("WithHint: %v, hint %q", err, HintOf(err))
	}
	if WithHint(nil, "h") != nil || HintOf(base) != "" {
		t.Error("WithHint(nil) or HintOf without a hint")
	}
}

// TestVersion_FromBuildInfo: the module's path and version, the VCS
// revision (marked modified) and time, and Go's version; a build without
// VCS information says so.
func TestVersion_FromBuildInfo(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sift/batch", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-06T06:37:04Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "siftbatch github.com/sift/batch v1.2.3\nrevision: abc123 (modified)\ncommit time: 2026-12-06T06:37:04Z\ngo: go1.26.8"
	if got := versionOf(bi); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sift/batch"}}
	want = "siftbatch github.com/sift/batch (devel)\nrevision: unknown (built without VCS information: go run, or -buildvcs=false)\ngo: go1.26.8"
	if got := versionOf(bi); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if v := Version(); !strings.HasPrefix(v, "siftbatch ") || !strings.Contains(v, "go: go") {
		t.Errorf("Version() of this binary: %q", v)
	}
}
