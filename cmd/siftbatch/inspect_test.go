package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
