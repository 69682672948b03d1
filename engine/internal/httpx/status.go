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

// Unwrap lets [http.ResponseController] reach the underlying writer.
func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
