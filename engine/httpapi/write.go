package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// errorJSON is every error answer.
type errorJSON struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// setJSONHeaders sets the headers of every JSON answer.
func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

// writeJSON writes v as a JSON answer, without HTML escaping: results are
// page text, so "<" stays readable; the type is JSON, never sniffed.
func writeJSON(w http.ResponseWriter, code int, v any) {
	setJSONHeaders(w)
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg, hint string) {
	writeJSON(w, code, errorJSON{Error: msg, Hint: hint})
}

// writeHeld writes v as a 200 JSON answer, as writeJSON does, holding r's
// turn only to encode it: the answer is encoded first, reserved from the
// caller's budget (429 if it does not fit), then written without the turn.
func (h *Handler) writeHeld(w http.ResponseWriter, r *http.Request, v any) {
	bp := getBuf()
	b := bytes.NewBuffer((*bp)[:0])
	defer func() { *bp = b.Bytes(); putBuf(bp) }()
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // v is the handler's own: it encodes
	if !h.hold(w, r, b.Len()) {
		return
	}
	setJSONHeaders(w)
	w.WriteHeader(http.StatusOK)
	giveTurn(r)
	_, _ = w.Write(b.Bytes())
}
