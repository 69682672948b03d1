package docs

import (
	"os"
	"strings"
	"testing"
)

// TestAdv34_SecurityDocNamesEachLimit: issue 34 asks for
// SECURITY.md (in docs): the threat model, each limit with its default and the
// attack it answers. Each of serve's limits of issue 34 is named there.
func TestAdv34_SecurityDocNamesEachLimit(t *testing.T) {
	b, err := os.ReadFile("SECURITY.md")
	if err != nil {
		t.Fatalf("SECURITY.md (in docs): %v", err)
	}
	for _, name := range []string{"--max-conns", "--max-conns-per-addr", "--max-queued-reads", "--max-mcp-calls", "--max-answer-bytes", "429", "Retry-After", "batch", "16 characters"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("SECURITY.md (in docs) does not name %s", name)
		}
	}
}
