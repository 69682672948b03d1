package mcpcmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sift/batch/cmd/siftbatch/internal/mcpcmd"
	"github.com/sift/batch/engine/enginetest/testkit"
)

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want, err string
	}{
		{"alone", "s3cret-key", "s3cret-key", ""},
		{"newline", "  s3cret-key\n", "s3cret-key", ""},
		{"empty", "\n", "", "it is empty"},
		{"keys line", "alice s3cret-key\n", "", "more than one word"},
		{"large", strings.Repeat("k", 5000), "", "over 4 KiB"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := mcpcmd.ReadKeyFile(path)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			continue
		}
		testkit.RequireNoneOf(t, err.Error(), "s3cret-key")
	}
	if _, err := mcpcmd.ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing key file was read")
	}
}
