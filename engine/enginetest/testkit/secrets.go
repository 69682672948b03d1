package testkit

import (
	"strings"
	"testing"
)

// RequireNoneOf fails the test if text contains any of secrets (a URL, a
// host, a key, a panic value that must never reach a log), naming the
// secret and showing the text around it. Empty secrets are ignored.
func RequireNoneOf(t testing.TB, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if i := strings.Index(text, s); i >= 0 {
			lo, hi := max(0, i-200), min(len(text), i+len(s)+200)
			t.Fatalf("text carries %q: …%s…", s, text[lo:hi])
		}
	}
}
