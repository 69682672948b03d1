package mcpserver

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSpliceWriter_PageInPlaceOfItsMarker: the page's text replaces its
// marker wherever the writes cut it, once; what surrounds it, and the
// answers of requests that set no page, pass as they are.
func TestSpliceWriter_PageInPlaceOfItsMarker(t *testing.T) {
	for cut := 0; cut < 80; cut++ {
		rec := httptest.NewRecorder()
		w := &spliceWriter{ResponseWriter: rec}
		_, _ = w.Write([]byte("event: message\n"))
		marker := w.set([]byte(`page \"text\" <b>`))
		msg := `data: {"content":[{"type":"text","text":"` + marker + `"}],"again":"` + marker + `"}` + "\n\n"
		for _, part := range []string{msg[:min(cut, len(msg))], msg[min(cut, len(msg)):]} {
			if n, err := w.Write([]byte(part)); n != len(part) || err != nil {
				t.Fatalf("cut %d: Write %d %v", cut, n, err)
			}
		}
		w.Flush()
		want := "event: message\n" + `data: {"content":[{"type":"text","text":"page \"text\" <b>"}],"again":"` + marker + `"}` + "\n\n"
		if got := rec.Body.String(); got != want {
			t.Fatalf("cut %d:\n got %q\nwant %q", cut, got, want)
		}
	}
	rec := httptest.NewRecorder()
	w := &spliceWriter{ResponseWriter: rec}
	w.set([]byte("page"))
	_, _ = w.Write([]byte(`{"error":"no page"}`))
	w.end()
	if got := rec.Body.String(); got != `{"error":"no page"}` {
		t.Fatalf("an answer without the marker: %q", got)
	}
	rec = httptest.NewRecorder()
	w = &spliceWriter{ResponseWriter: rec}
	_, _ = w.Write([]byte(`"siftbatch-page-x"`))
	if got := rec.Body.String(); got != `"siftbatch-page-x"` || !strings.HasPrefix(w.set(nil), "siftbatch-page-") {
		t.Fatalf("without a page: %q", got)
	}
}
