package testkit

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is an io.Writer that keeps everything written to it, safe for
// concurrent use (a log sink shared by a runner's goroutines). The zero
// value is empty and ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns everything written so far split into lines, without their
// newlines; a last line without a newline counts, an empty buffer has none.
func (s *SyncBuffer) Lines() []string {
	text := strings.TrimSuffix(s.String(), "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}
