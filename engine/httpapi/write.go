package httpapi

import (
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
