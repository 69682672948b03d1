package engine

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// ContentRange is a range of a stored result's content as the result's
// stored JSON holds it ([Runner.ContentRange]): offsets count the bytes
// of the content's JSON string text (between its quotes, each escape its
// bytes, "\n" two), which is what an answer that writes the content as
// JSON carries, since the store and the API write it alike (no HTML
// escaping). A range never splits an escape or a UTF-8 sequence.
type ContentRange struct {
	// JSON is the range of the content's JSON text: whole escapes and
	// whole UTF-8 sequences, to be written between quotes as it is. It
	// is read for this range alone: nothing else holds it or changes it,
	// so that a writer may keep it rather than copy it.
	JSON []byte
	// Offset is where JSON begins: the offset asked, moved back to the
	// start of an escape or a UTF-8 sequence it would split (Total if it
	// was past the end).
	Offset int64
	// End is where JSON ends: the next range's offset; Total at the end.
	End int64
	// Total is the length of the content's JSON text.
	Total int64
	// Meta is the result's meta, its stored JSON; nil when it has none.
	Meta json.RawMessage
}

// window is bytes of a stored result read, from off.
type window struct {
	off int64
	b   []byte
}

// contentStart is the length of a stored result's JSON before its
// content's text: [Result] is encoded with Content first.
const contentStart = int64(len(`{"content":"`))

// metaKey begins a stored result's meta. Inside a JSON string every quote
// is escaped, so these bytes, with their unescaped quotes, occur outside
// one only: the result's meta first, its own keys after it.
var metaKey = []byte(`,"meta":`)

// ContentRange returns the range of target idx's content that begins at
// off and is at most n bytes long, counted in the content's JSON text
// (see [ContentRange]), moved back to whole escapes and UTF-8 sequences;
// a range that would be empty so (n under 6) holds one escape or
// sequence, so that following End always advances. False as for
// [Runner.ResultJSON], and for a negative off or an n under 1. It reads
// the stored result's last bytes (its meta), a few bytes at each end of
// the range, and the range: the chunks it covers, not the result.
// Safe for concurrent use.
func (r *Runner) ContentRange(id string, idx int, off, n int64) (ContentRange, bool) {
	if off < 0 || n < 1 {
		return ContentRange{}, false
	}
	// The bytes read are kept in windows that the next gets are served
	// from: the tail (the meta), then one read of the range with the
	// bytes around its ends that boundary looks at. Each read of the
	// store copies the chunks it touches, so a range costs two or three
	// chunk reads, not one per look.
	var windows []window
	get := func(o, k int64) ([]byte, bool) {
		for _, w := range windows {
			if o >= w.off && o+k <= w.off+int64(len(w.b)) {
				return w.b[o-w.off : o-w.off+k], true
			}
		}
		b, _, ok := r.ResultRange(id, idx, o, k)
		if ok {
			windows = append(windows, window{off: o, b: b})
		}
		return b, ok
	}
	_, size, ok := r.ResultRange(id, idx, 0, 0)
	if !ok || size < contentStart+2 {
		return ContentRange{}, false
	}
	end, meta, ok := contentEnd(get, size)
	if !ok {
		return ContentRange{}, false
	}
	cr := ContentRange{Total: end - contentStart, Meta: meta}
	if off >= cr.Total {
		cr.Offset, cr.End, cr.JSON = cr.Total, cr.Total, []byte{}
		return cr, true
	}
	stop := contentStart + off + min(n, end-contentStart-off) // never off+n: it may pass MaxInt64
	lo, hi := max(contentStart+off-16, contentStart), min(stop+1, end)
	if _, ok := get(lo, hi-lo); !ok {
		return ContentRange{}, false
	}
	start, ok := boundary(get, contentStart+off)
	if !ok {
		return ContentRange{}, false
	}
	if stop < end {
		if stop, ok = boundary(get, stop); !ok {
			return ContentRange{}, false
		}
	}
	if stop <= start { // one escape or sequence, whole
		if stop, ok = unitEnd(get, start); !ok {
			return ContentRange{}, false
		}
	}
	if cr.JSON, ok = get(start, stop-start); !ok || int64(len(cr.JSON)) != stop-start {
		return ContentRange{}, false
	}
	cr.Offset, cr.End = start-contentStart, stop-contentStart
	return cr, true
}

// contentEnd finds where a stored result's content text ends (its closing
// quote) and its meta, from its last bytes: 4 KiB, more if its meta is
// larger.
func contentEnd(get func(off, n int64) ([]byte, bool), size int64) (int64, json.RawMessage, bool) {
	for window := int64(4 << 10); ; window *= 2 {
		from := max(size-window, 0)
		tail, ok := get(from, window)
		if !ok || len(tail) < 2 || tail[len(tail)-1] != '}' {
			return 0, nil, false
		}
		if tail[len(tail)-2] == '"' && (from > 0 || int64(len(tail)) > contentStart+1) && !bytes.HasSuffix(tail, []byte(`}}`)) {
			// No meta: the content's quote, then the result's brace. A
			// meta, an object, would end "}}".
			return size - 2, nil, true
		}
		if i := bytes.Index(tail, metaKey); i >= 0 {
			meta := tail[i+len(metaKey) : len(tail)-1]
			if json.Valid(meta) && from+int64(i) > contentStart {
				return from + int64(i) - 1, bytes.Clone(meta), true
			}
		}
		if from == 0 {
			return 0, nil, false
		}
	}
}

// boundary is the greatest position at or before p (a position in a
// stored result's content text) that splits no escape and no UTF-8
// sequence.
func boundary(get func(off, n int64) ([]byte, bool), p int64) (int64, bool) {
	for back := int64(16); ; back *= 2 {
		from := max(p-back, contentStart)
		w, ok := get(from, p-from+1)
		if !ok || int64(len(w)) < p-from+1 {
			return 0, false
		}
		at := int(p - from) // w[at] is the byte at p
		q, known := escapeAt(w, at, from == contentStart)
		if !known {
			continue // a run of backslashes longer than the window
		}
		if q >= 0 {
			return from + int64(q), true
		}
		for at > 0 && !utf8.RuneStart(w[at]) && at > int(p-from)-utf8.UTFMax {
			at--
		}
		return from + int64(at), true
	}
}

// escapeAt returns the start of the escape that position at of w is
// inside (after its first byte), or -1 if none; not known if a run of
// backslashes reaches w's start and w does not begin the text.
func escapeAt(w []byte, at int, whole bool) (int, bool) {
	found := -1
	for q := max(at-5, 0); q < at; q++ {
		if w[q] != '\\' {
			continue
		}
		run := 0 // backslashes just before q
		for k := q - 1; k >= 0 && w[k] == '\\'; k-- {
			run++
		}
		if run == q && !whole {
			return 0, false
		}
		if run%2 != 0 {
			continue // q is the second byte of an escaped backslash
		}
		l := 2
		if q+1 < len(w) && w[q+1] == 'u' {
			l = 6
		}
		if q+l > at {
			found = q
		}
	}
	return found, true
}

// unitEnd is where the escape or UTF-8 sequence that begins at p ends.
func unitEnd(get func(off, n int64) ([]byte, bool), p int64) (int64, bool) {
	w, ok := get(p, 6)
	if !ok || len(w) == 0 {
		return 0, false
	}
	switch {
	case w[0] == '\\' && len(w) > 1 && w[1] == 'u':
		return p + 6, true
	case w[0] == '\\':
		return p + 2, true
	}
	_, l := utf8.DecodeRune(w)
	return p + int64(l), true
}
