package reexport_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sift/batch/engine/internal/reexport"
)

// file is engine's reexport.go, generated from ../../batchtype.
var file = filepath.Join("..", "..", "reexport.go")

// TestReexport_MatchesBatchtype checks that engine's reexport.go
// re-exports every exported name of package batchtype with batchtype's doc:
// a name or a doc changed in batchtype fails this test until go generate
// ./engine (SIFTBATCH_UPDATE_REEXPORTS=1) writes the file again.
func TestReexport_MatchesBatchtype(t *testing.T) {
	want, err := reexport.Generate(filepath.Join("..", "..", "batchtype"))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SIFTBATCH_UPDATE_REEXPORTS") == "1" {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what batchtype's names and docs give: run go generate ./engine", file)
	}
}
