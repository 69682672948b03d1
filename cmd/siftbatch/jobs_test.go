package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// fillStore stores three finished jobs in dir: alice's "partial" job of two
// targets, alice's "done" job of one, and bob's "done" job of one. It
// returns their ids in that order.
func fillStore(t *testing.T, dir string) []string {
	t.Helper()
	store, err := persistence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	release := make(chan struct{})
	close(release)
	r, err := engine.New(store, fakeFetch(release), engine.Config{JobsPerCaller: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ids []string
	for _, s := range []struct {
		caller string
		urls   []string
	}{
		{"alice", []string{"https://example.com/a", "https://example.com/fail"}},
		{"alice", []string{"https://example.com/b"}},
		{"bob", []string{"https://example.com/c"}},
	} {
		ts := make([]engine.Target, len(s.urls))
		for i, u := range s.urls {
			ts[i] = engine.Target{URL: u}
		}
		id, _, err := r.Submit(context.Background(), &engine.Caller{Name: s.caller}, httpapi.ClassStandard, ts)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		testkit.WaitFor(t, "job "+id, func() bool {
			j, _, ok := r.Status(id)
			return ok && !engine.IsLive(j.Status)
		})
	}
	return ids
}

func TestJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := fillStore(t, dir)
	out, _, err := run(t, "jobs", "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 jobs:\n%s", out)
	}
	for _, col := range []string{"ID", "CALLER", "STATUS", "DONE/TOTAL", "FAILED", "NOT RUN", "CREATED", "LAST ACTIVE"} {
		if !strings.Contains(lines[0], col) {
			t.Fatalf("header %q lacks %s", lines[0], col)
		}
	}
	want := map[string][]string{
		ids[0]: {"alice", "partial", "2/2"},
		ids[1]: {"alice", "done", "1/1"},
		ids[2]: {"bob", "done", "1/1"},
	}
	for i, l := range lines[1:] {
		f := strings.Fields(l)
		w, ok := want[f[0]]
		if !ok || f[1] != w[0] || f[2] != w[1] || f[3] != w[2] {
			t.Errorf("row %q, want %v", l, w)
		}
		if f[0] != ids[len(ids)-1-i] {
			t.Errorf("row %d is %s, want %s: newest first", i, f[0], ids[len(ids)-1-i])
		}
		delete(want, f[0])
	}
	if len(want) != 0 {
		t.Errorf("jobs missing: %v", want)
	}

	t.Run("filters", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string // newest first
		}{
			{[]string{"--status", "done"}, []string{ids[2], ids[1]}},
			{[]string{"--status", "terminal"}, []string{ids[2], ids[1], ids[0]}},
			{[]string{"--status", "partial"}, []string{ids[0]}},
			{[]string{"--caller", "alice"}, []string{ids[1], ids[0]}},
			{[]string{"--caller", "bob", "--status", "done"}, []string{ids[2]}},
			{[]string{"--caller", "alice", "--status", "live"}, nil},
			{[]string{"--caller", "carol"}, nil},
		} {
			out, _, err := run(t, append([]string{"jobs", "--data", dir}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v: %v", tc.args, err)
			}
			if tc.want == nil {
				if !strings.HasPrefix(out, "no jobs in ") || !strings.Contains(out, "that match") {
					t.Fatalf("%v: %q", tc.args, out)
				}
				continue
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
				got = append(got, strings.Fields(l)[0])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%v: %v, want %v", tc.args, got, tc.want)
			}
		}
		var ue *cli.UsageError
		if _, _, err := run(t, "jobs", "--data", dir, "--status", "finished"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "finished") {
			t.Fatalf("--status finished: %v, want a usage error", err)
		}
	})

	t.Run("empty store", func(t *testing.T) {
		empty := t.TempDir()
		s, err := persistence.Open(empty)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		out, _, err := run(t, "jobs", "--data", empty)
		if err != nil || !strings.HasPrefix(out, "no jobs in ") {
			t.Fatalf("%q %v", out, err)
		}
	})

	t.Run("no such directory", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, _, err := run(t, "jobs", "--data", missing)
		if err == nil || !strings.Contains(err.Error(), "no siftbatch store at") {
			t.Fatalf("got %v", err)
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("jobs created the directory")
		}
	})
}

func TestJobs_StoreInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, dir)
	holdStoreInChild(t, dir)

	for _, args := range [][]string{{"jobs", "--data", dir}, {"show", "--data", dir, "0123456789abcdef0123456789abcdef"}} {
		_, _, err := run(t, args...)
		if !errors.Is(err, persistence.ErrInUse) {
			t.Fatalf("%s: %v, want ErrInUse", args[0], err)
		}
		var msg bytes.Buffer
		if code := report(err, &msg); code != exitError {
			t.Fatalf("exit %d, want 1", code)
		}
		if want := "siftbatch: store " + dir + " is in use by another process (a running siftbatch serve?); stop it first\n"; msg.String() != want {
			t.Fatalf("printed %q, want %q", msg.String(), want)
		}
	}
}

// TestJobs_StoreInUseBinary: the built command, given a store another
// process holds, exits 1 with one line on stderr and nothing on stdout.
func TestJobs_StoreInUseBinary(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, dir)
	holdStoreInChild(t, dir)
	bin := clitest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "jobs", "--data", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want code 1; stderr %q", err, stderr.String())
	}
	if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "is in use by another process") {
		t.Fatalf("stderr %q, want one line", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("stdout %q", stdout.String())
	}
}

// snapshot lists every file under dir with its size, mode and mtime.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = fmt.Sprintf("%s %d %s", info.Mode(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestInspect_NeverWrites: jobs and show read a store without changing a
// byte of its directory (listing, sizes, modes and mtimes before and after),
// and refuse a directory that is not a store, creating nothing in it.
func TestInspect_NeverWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ids := fillStore(t, dir)
	before := snapshot(t, dir)
	for _, args := range [][]string{
		{"jobs", "--data", dir},
		{"show", "--data", dir, ids[0]},
		{"show", "--data", dir, ids[0], "--results"},
		{"show", "--data", dir, "0123456789abcdef0123456789abcdef"},
	} {
		_, _, _ = run(t, args...)
		if after := snapshot(t, dir); !equalMaps(before, after) {
			t.Fatalf("%v changed the store directory:\nbefore %v\nafter  %v", args, before, after)
		}
	}
	out, _, err := run(t, "jobs", "--data", dir)
	if err != nil || !strings.Contains(out, ids[0]) {
		t.Fatalf("jobs read nothing: %q %v", out, err)
	}

	for _, setup := range []struct {
		name  string
		files map[string]string
	}{
		{"empty", nil},
		{"notes", map[string]string{"notes.txt": "mine"}},
	} {
		t.Run(setup.name, func(t *testing.T) {
			other := t.TempDir()
			for name, body := range setup.files {
				if err := os.WriteFile(filepath.Join(other, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, other)
			for _, args := range [][]string{{"jobs", "--data", other}, {"show", "--data", other, ids[0]}} {
				_, _, err := run(t, args...)
				if err == nil || !strings.Contains(err.Error(), "no siftbatch store at "+other) {
					t.Fatalf("%v: %v", args, err)
				}
				var msg bytes.Buffer
				if code := report(err, &msg); code != exitError {
					t.Fatalf("exit %d, want 1", code)
				}
				if after := snapshot(t, other); !equalMaps(before, after) {
					t.Fatalf("%v wrote into a directory that is not a store: %v", args, after)
				}
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
