// Package httpx holds what siftbatch's HTTP packages (httpapi, metrics)
// share and embedders need not see.
package httpx

import "net/http"

// StatusRecorder is a ResponseWriter that remembers the status code a
// handler wrote: Code (200 until one is written) and WroteHeader (once a
// header or a byte is out), and Bytes, the body bytes written. 1xx
// answers are not recorded.
type StatusRecorder struct {
	http.ResponseWriter
	Code        int
	WroteHeader bool
	Bytes       int64
}

// NewStatusRecorder wraps w.
func NewStatusRecorder(w http.ResponseWriter) *StatusRecorder {
	return &StatusRecorder{ResponseWriter: w, Code: http.StatusOK}
}

// WriteHeader implements http.ResponseWriter.
func (s *StatusRecorder) WriteHeader(code int) {
	if !s.WroteHeader && code >= 200 {
		s.Code, s.WroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (s *StatusRecorder) Write(b []byte) (int, error) {
	s.WroteHeader = true
	n, err := s.ResponseWriter.Write(b)
	s.Bytes += int64(n)
	return n, err
}

// KeptWriter is an http.ResponseWriter that may keep the bytes of a
// WriteKept after it returns, rather than copy them: bytes their writer
// never changes again (package httpapi writes a range of a stored result
// so; package mcpserver's in-process transport hands them on to the page
// it answers).
type KeptWriter interface {
	http.ResponseWriter
	WriteKept(p []byte) (int, error)
}

// WriteKept writes p to w for it to keep if w is a [KeptWriter], else as
// any Write. p must never change afterwards.
func WriteKept(w http.ResponseWriter, p []byte) (int, error) {
	if kw, ok := w.(KeptWriter); ok {
		return kw.WriteKept(p)
	}
	return w.Write(p)
}

// WriteKept implements [KeptWriter] over the underlying writer.
func (s *StatusRecorder) WriteKept(b []byte) (int, error) {
	s.WroteHeader = true
	return WriteKept(s.ResponseWriter, b)
}

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
