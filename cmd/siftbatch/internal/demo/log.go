package demo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// deliberate counts the panics the demo causes, and the log records of
// them its log has dropped.
type deliberate struct {
	count   atomic.Int64
	dropped atomic.Int64
}

// quietLog is the demo's log: it drops the records of the demo's own
// panics (the runner logs each as an error, then a worker restart), as many
// as the panic page caused, and passes every other record on.
type quietLog struct {
	slog.Handler
	panics *deliberate
}

// Handle drops a record of a deliberate panic, and passes the others on.
func (l *quietLog) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "fetch panicked") {
		if l.panics.dropped.Load() < l.panics.count.Load() {
			l.panics.dropped.Add(1)
			return nil
		}
	}
	if strings.HasPrefix(r.Message, "worker restarted after a panic") && l.panics.dropped.Load() > 0 {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

// WithAttrs and WithGroup keep the filter.
func (l *quietLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &quietLog{Handler: l.Handler.WithAttrs(as), panics: l.panics}
}

func (l *quietLog) WithGroup(name string) slog.Handler {
	return &quietLog{Handler: l.Handler.WithGroup(name), panics: l.panics}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers: the log held
// back while the bars are drawn.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Read(p)
}
