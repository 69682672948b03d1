package engine_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// The reliability tests (crash, disk trouble, load) put these in every URL,
// caller key and panic value they make, and scan every log line for them:
// log lines carry job ids, counts and statuses, never a URL, a host, a key or
// a panic value.
const (
	secretHost  = "secret-host.example"
	secretKey   = "KEY-5ecret-sha256-0f0f"
	secretPanic = "panic value 5ecret"
)

// secretURL is a URL full of secrets: host, path and query.
func secretURL(job string, idx int) string {
	return fmt.Sprintf("https://%s/path-%s/%d?token=s3cr3t", secretHost, job, idx)
}

// secrets are the strings no log line may contain.
var secrets = []string{secretHost, "secret-host", "path-", "s3cr3t", "https://", secretKey, "5ecret"}

// logScanner is a log sink that keeps no lines: it counts them and records
// the first few that carry a secret. Safe for concurrent writes (a slog
// handler writes one record per Write).
type logScanner struct {
	mu     sync.Mutex
	lines  int
	warns  int
	leaks  []string
	keep   *bytes.Buffer // every line, when asked for (see keepLines)
	detect []string      // extra strings that count as leaks
}

func (s *logScanner) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines += bytes.Count(p, []byte{'\n'})
	if bytes.Contains(p, []byte("level=WARN")) {
		s.warns++
	}
	if s.keep != nil {
		s.keep.Write(p)
	}
	if len(s.leaks) < 5 {
		for _, sec := range append(secrets, s.detect...) {
			if bytes.Contains(p, []byte(sec)) {
				s.leaks = append(s.leaks, string(p))
				break
			}
		}
	}
	return len(p), nil
}

// keepLines makes the scanner keep every line for String.
func (s *logScanner) keepLines() *logScanner {
	s.keep = &bytes.Buffer{}
	return s
}

func (s *logScanner) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keep == nil {
		return ""
	}
	return s.keep.String()
}

// check fails t if a line carried a secret, and returns the lines scanned.
func (s *logScanner) check(t *testing.T) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leaks) > 0 {
		t.Fatalf("%d+ log lines carry a secret, the first:\n%s", len(s.leaks), strings.Join(s.leaks, ""))
	}
	return s.lines
}

// scanLogText checks a whole log (a child process's stderr) line by line.
func scanLogText(t *testing.T, what, logs string) int {
	t.Helper()
	s := &logScanner{}
	_, _ = s.Write([]byte(logs))
	if n := strings.Count(logs, "\n"); n > 0 {
		s.lines = n
	}
	if len(s.leaks) > 0 {
		for _, line := range strings.Split(logs, "\n") {
			for _, sec := range secrets {
				if strings.Contains(line, sec) {
					t.Fatalf("%s: a log line carries %q:\n%s", what, sec, line)
				}
			}
		}
	}
	return s.lines
}
