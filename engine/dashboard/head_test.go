package dashboard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sift/batch/engine"
)

// rangeRunner serves ResultRange from stored JSON, as the engine does,
// and counts the bytes read.
type rangeRunner struct {
	runner
	stored []byte
	read   int64
}

func (r *rangeRunner) ResultRange(_ string, _ int, off, n int64) ([]byte, int64, bool) {
	size := int64(len(r.stored))
	if off < 0 || n <= 0 || off >= size {
		return []byte{}, size, true
	}
	b := r.stored[off:min(size, off+n)]
	r.read += int64(len(b))
	return bytes.Clone(b), size, true
}

// TestReadHead: the result view's head and meta, read from the stored
// JSON's first and last bytes, are the whole result's decoded first
// previewBytes (cut at a rune) and meta, whatever escapes and runes fall
// at the cuts; a large result is not read whole.
func TestReadHead(t *testing.T) {
	units := []string{"a", "é", "✓", "😀", "\"", "\\", "\n", "\u0001", "<", "\u2028", "\\u0041"}
	for _, unit := range units {
		for _, n := range []int{0, 1, previewBytes - 1, previewBytes, previewBytes + 1, 3 * previewBytes, 200_000} {
			for _, meta := range []map[string]any{nil, {"status": 200.0, "note": `,"meta":{"x":1}`}} {
				content := strings.Repeat(unit, (n+len(unit)-1)/len(unit)) // n bytes, or a few more
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(engine.Result{Content: content, Meta: meta}); err != nil {
					t.Fatal(err)
				}
				r := &rangeRunner{stored: bytes.TrimSuffix(buf.Bytes(), []byte("\n"))}
				h, ok := readHead(r, "id", 0)
				if !ok {
					t.Fatalf("unit %q n %d: not read", unit, n)
				}
				want, trunc := cutPreview(content)
				if h.content != want || h.truncated != trunc {
					t.Fatalf("unit %q n %d: content %d bytes truncated %v, want %d bytes truncated %v", unit, n, len(h.content), h.truncated, len(want), trunc)
				}
				if !utf8.ValidString(h.content) {
					t.Fatalf("unit %q n %d: invalid UTF-8", unit, n)
				}
				if len(meta) != len(h.meta) || meta != nil && h.meta["note"] != meta["note"] {
					t.Fatalf("unit %q n %d: meta %v, want %v", unit, n, h.meta, meta)
				}
				if h.size != int64(len(r.stored)) {
					t.Fatalf("size %d, want %d", h.size, len(r.stored))
				}
				if r.read > int64(headBytes+tailBytes) {
					t.Fatalf("unit %q n %d: read %d bytes of %d", unit, n, r.read, len(r.stored))
				}
			}
		}
	}
}
