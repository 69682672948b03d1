package enginetest

import (
	"testing"

	"github.com/sift/batch/persistence"
)

// OpenStore opens a Badger store in dir ("" keeps it in memory) and closes
// it when the test ends, failing the test if either fails.
func OpenStore(t testing.TB, dir string) *persistence.Store {
	t.Helper()
	s, err := persistence.Open(dir)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}
