package dashboard

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// The result view reads only the head and the tail of a stored result
// ([engine.Runner.ResultRange]): the first previewBytes of its content,
// and its meta, which the stored JSON holds last. A stored result is
// {"content":"…","meta":{…}} (meta omitted when empty), as the engine
// encodes [engine.Result].
const (
	// contentStart is the stored JSON before the content's text.
	contentStart = len(`{"content":"`)
	// headBytes is the stored JSON read for previewBytes of content: an
	// escape is at most 6 bytes for the 1 to 3 it stands for.
	headBytes = contentStart + 6*previewBytes + 8
	// tailBytes is the stored JSON read for the meta; a larger meta is
	// not shown.
	tailBytes = 64 << 10
)

// metaKey begins the meta in the stored JSON. Inside a JSON string every
// quote is escaped, so these bytes, with their unescaped quotes, occur
// only outside one: at the top level first (the meta's own keys come
// after it).
var metaKey = []byte(`,"meta":`)

// resultHead is what the result view shows of a stored result.
type resultHead struct {
	content   string // its first previewBytes at most, cut at a rune
	truncated bool   // the content goes on
	meta      map[string]any
	size      int64 // the stored JSON's length
}

// readHead reads the head and the tail of target idx's stored result.
func readHead(r runner, id string, idx int) (resultHead, bool) {
	head, size, ok := r.ResultRange(id, idx, 0, int64(headBytes))
	if !ok {
		return resultHead{}, false
	}
	h := resultHead{size: size}
	if size <= int64(len(head)) { // all of it: decoded whole
		var res struct {
			Content string         `json:"content"`
			Meta    map[string]any `json:"meta"`
		}
		if json.Unmarshal(head, &res) != nil {
			return resultHead{}, false
		}
		h.content, h.meta = res.Content, res.Meta
		h.content, h.truncated = cutPreview(h.content)
		return h, true
	}
	if !bytes.HasPrefix(head, []byte(`{"content":"`)) {
		return resultHead{}, false
	}
	h.content, h.truncated = cutPreview(decodePrefix(head[contentStart:]))
	off := max(size-tailBytes, 0)
	tail, _, ok := r.ResultRange(id, idx, off, tailBytes)
	if !ok {
		return resultHead{}, false
	}
	if i := bytes.Index(tail, metaKey); i >= 0 && len(tail) > 0 && tail[len(tail)-1] == '}' {
		var meta map[string]any
		if json.Unmarshal(tail[i+len(metaKey):len(tail)-1], &meta) == nil {
			h.meta = meta
		}
	}
	return h, true
}

// cutPreview cuts s to previewBytes at a rune boundary.
func cutPreview(s string) (string, bool) {
	if len(s) <= previewBytes {
		return s, false
	}
	cut := previewBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

// decodePrefix decodes the JSON string text b begins with (after its
// opening quote), up to its closing quote or as far as b holds whole
// escapes and runes.
func decodePrefix(b []byte) string {
	i := 0
	for i < len(b) && b[i] != '"' {
		if b[i] != '\\' {
			i++
			continue
		}
		n := 2
		if i+1 < len(b) && b[i+1] == 'u' {
			n = 6
		}
		if i+n > len(b) {
			break
		}
		i += n
	}
	raw := b[:i]
	// A rune the end cuts is left out.
	for k := len(raw) - 1; k >= 0 && k >= len(raw)-utf8.UTFMax; k-- {
		if utf8.RuneStart(raw[k]) {
			if !utf8.FullRune(raw[k:]) {
				raw = raw[:k]
			}
			break
		}
	}
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	var s string
	if json.Unmarshal(quoted, &s) != nil {
		return ""
	}
	return s
}
