package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdv37_OpenStoreUnderAFile: --data FILE/sub (a directory asked for
// under a file) still answers "mkdir FILE: not a directory", the message
// the issue asked to replace with one that names --data and the file.
func TestAdv37_OpenStoreUnderAFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenStore(filepath.Join(file, "store"))
	if err == nil || !strings.Contains(err.Error(), "--data") || !strings.Contains(err.Error(), file+" is a file") {
		t.Errorf("OpenStore(FILE/store): %v; want an error that names --data and says %s is a file", err, file)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "mine" {
		t.Errorf("the file after: %q %v", b, err)
	}
}
