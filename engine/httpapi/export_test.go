package httpapi

import (
	"bytes"
	"net/http"
	"sync"
)

// AnswerBytesHeld is what caller's answers hold of its budget now
// (Options.MaxAnswerBytes), and how many callers hold anything.
func AnswerBytesHeld(h *Handler, caller string) (held int64, callers int) {
	h.answers.mu.Lock()
	defer h.answers.mu.Unlock()
	if e := h.answers.held[caller]; e != nil {
		held = e.n
	}
	return held, len(h.answers.held)
}

// AnswerWaiting reports whether an answer of caller waits for room in its
// budget (a ?results=1 answer whose status is out).
func AnswerWaiting(h *Handler, caller string) bool {
	h.answers.mu.Lock()
	defer h.answers.mu.Unlock()
	e := h.answers.held[caller]
	return e != nil && e.freed != nil
}

// BlockingWriter is a ResponseWriter whose Writes block until Release is
// called: a client's socket that takes nothing in. Entered is closed when
// the first Write begins. It keeps the status and the bytes written (each
// Write's before it blocks). Make one with NewBlockingWriter; its methods
// are safe for concurrent use.
type BlockingWriter struct {
	entered, release chan struct{}
	enter, free      sync.Once
	mu               sync.Mutex
	header           http.Header
	code             int
	body             bytes.Buffer
}

// NewBlockingWriter returns a BlockingWriter whose Writes block.
func NewBlockingWriter() *BlockingWriter {
	return &BlockingWriter{entered: make(chan struct{}), release: make(chan struct{}), header: http.Header{}}
}

// Entered is closed when the first Write begins.
func (w *BlockingWriter) Entered() <-chan struct{} { return w.entered }

// Release lets every Write, blocked or to come, return; calling it again
// does nothing.
func (w *BlockingWriter) Release() { w.free.Do(func() { close(w.release) }) }

// Written returns the status and the bytes written so far.
func (w *BlockingWriter) Written() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.code, w.body.String()
}

func (w *BlockingWriter) Header() http.Header { return w.header }

func (w *BlockingWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code = code
	}
}

func (w *BlockingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.body.Write(p)
	w.mu.Unlock()
	w.enter.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}
