package mcpserver

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
)

// A batch_result page is written into its answer, not marshalled by the
// SDK. The SDK would encode the page's text three times over (the text
// content, the tool's result, the JSON-RPC message: each json.Marshal
// growing a buffer to twice its size, then copying it), then copy the
// message into its Server-Sent Event, and the unescaper once more: 20×
// the page's bytes allocated per page. Instead the tool answers a text
// that is a marker, random per call (32 hex digits: no content, URL or
// meta can spell it), and hands the page, the JSON text of its content as
// the API wrote it, to its request's spliceWriter, which writes the page
// in the marker's place as the SDK's message goes by. The client reads
// the same JSON-RPC message, with the page's text as a JSON string
// written by the API (without HTML escapes, as every answer of the
// server).

// spliceWriter is the ResponseWriter of one HTTP request to /mcp (under
// its unescaper, above the caller's budget count): it passes every byte
// as it is, but, once set, writes a page's text in place of its marker.
// Its methods are safe for concurrent use (the SDK writes from its own
// goroutine).
type spliceWriter struct {
	http.ResponseWriter

	mu      sync.Mutex
	pattern []byte // `"marker"`: the marker as a JSON string; nil: nothing to splice
	text    []byte // the JSON text written between the quotes instead of the marker
	held    []byte // the end of the bytes written so far that may begin pattern
}

// set has text (a JSON string's text, between its quotes) written in
// place of the marker it returns, the text to give the SDK; text must
// not change until the answer is written.
func (w *spliceWriter) set(text []byte) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	marker := "siftbatch-page-" + hex.EncodeToString(b[:])
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pattern, w.text = []byte(`"`+marker+`"`), text
	return marker
}

// Write writes p, the page's text in place of the marker.
func (w *spliceWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pattern == nil {
		return w.ResponseWriter.Write(p)
	}
	data := p
	if len(w.held) > 0 {
		data = append(w.held, p...) // a marker cut between two writes: rare, and short
		w.held = nil
	}
	if i := bytes.Index(data, w.pattern); i >= 0 {
		rest := data[i+len(w.pattern)-1:] // from the closing quote
		text := w.text
		w.pattern, w.text = nil, nil
		for _, part := range [][]byte{data[:i+1], text, rest} {
			if _, err := w.ResponseWriter.Write(part); err != nil {
				return 0, err
			}
		}
		return len(p), nil
	}
	// Hold what could begin the marker; write the rest.
	keep := min(len(data), len(w.pattern)-1)
	if _, err := w.ResponseWriter.Write(data[:len(data)-keep]); err != nil {
		return 0, err
	}
	w.held = append([]byte(nil), data[len(data)-keep:]...)
	return len(p), nil
}

// flushHeld writes the bytes held. w.mu is held.
func (w *spliceWriter) flushHeld() error {
	if len(w.held) == 0 {
		return nil
	}
	held := w.held
	w.held = nil
	_, err := w.ResponseWriter.Write(held)
	return err
}

// Flush writes what is held and flushes the answer.
func (w *spliceWriter) Flush() {
	w.mu.Lock()
	err := w.flushHeld()
	w.mu.Unlock()
	if err == nil {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// end writes what is held, once the handler has returned.
func (w *spliceWriter) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.flushHeld()
	w.pattern, w.text = nil, nil
}

// Unwrap is the ResponseWriter underneath, for http.ResponseController.
func (w *spliceWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
