package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sift/batch/engine/apitype"
)

// MaxPageBytes caps one batch_result page (256 KiB) as its MCP message
// carries it: its content's JSON text, as the store holds it and the API
// writes it, each escape counted ('"' 2 bytes, a control character 6 as
// \u00XX; '<' one, since no JSON siftbatch writes escapes HTML), so that
// a page's message stays near a page whatever its content. The page's
// content bytes are at most that too (fewer for text dense with escapes).
const MaxPageBytes = 256 << 10

// minPageBytes is the smallest page: a page holds at least one escape
// (6 bytes) whole past the 5 bytes its start may move back (pageStep).
const minPageBytes = 16

// errBadAnswer is an answer of the API that is not the JSON expected.
var errBadAnswer = errors.New("bad answer")

// targetPage is one page of one target, as GET
// /v1/batch/{id}/{idx}?offset=&length= answers it: its head, and the page
// of its result's content with where it lies in the content's JSON text.
type targetPage struct {
	Idx    int    `json:"idx"`
	URL    string `json:"url"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	Hint   string `json:"hint,omitempty"`
	Result *struct {
		Content jsonString      `json:"content"`
		Meta    json.RawMessage `json:"meta,omitempty"`
		Range   *apitype.Range  `json:"range,omitempty"`
	} `json:"result,omitempty"`
	// text is the page's content as JSON text, between its quotes (nil
	// without a result): Result.Content's, or the API's bytes kept as it
	// wrote them (readPieces).
	text []byte
}

// jsonString is a JSON string as it was read, its quotes and escapes and
// all: a page's content, kept as the API wrote it so that the answer can
// carry it as it is (see splice), neither decoded nor copied. It aliases
// the bytes json.Unmarshal read (readTargetPage's buffer, which it
// keeps).
type jsonString []byte

// UnmarshalJSON keeps b, a JSON string (json.Unmarshal has checked its
// syntax), without copying it.
func (s *jsonString) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' {
		return errors.New("content: not a JSON string")
	}
	*s = b
	return nil
}

// hex4 is the value of the 4 hex digits b begins with (checked).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// decodeText is the string whose JSON text (between its quotes) is text.
func decodeText(text []byte) (string, error) {
	q := make([]byte, 0, len(text)+2)
	q = append(append(append(q, '"'), text...), '"')
	var v string
	err := json.Unmarshal(q, &v)
	return v, err
}

// validText reports whether text is a JSON string's text (between its
// quotes): no control character, no quote but escaped, whole escapes.
func validText(text []byte) bool {
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c < 0x20 || c == '"':
			return false
		case c == '\\':
			if i+1 >= len(text) {
				return false
			}
			switch text[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+6 > len(text) {
					return false
				}
				for _, h := range text[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				i += 5
			default:
				return false
			}
		}
	}
	return true
}

// textLen is the length in bytes of the string whose JSON text (between
// its quotes, checked: validText) is b, as encoding/json decodes it (an
// invalid UTF-8 byte or a lone surrogate escape becomes U+FFFD, 3 bytes),
// counted without decoding it.
func textLen(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r := hex4(b[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if rr := utf16.DecodeRune(r, hex4(b[i+2:])); rr != unicode.ReplacementChar {
						n += utf8.RuneLen(rr)
						i += 6
						continue
					}
				}
				r = unicode.ReplacementChar
			}
			n += utf8.RuneLen(r)
		case c == '\\':
			n++ // \" \\ \/ \b \f \n \r \t
			i += 2
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			i += size
			if r == utf8.RuneError && size == 1 {
				n += 3 // an invalid byte decodes as U+FFFD
				continue
			}
			n += size
		}
	}
	return n
}

// pageStep is the distance between two pages' offsets, for pages of at
// most size bytes: the API moves a range's start back by up to 5 bytes
// (into an escape, \u00XX, or a UTF-8 sequence it would split), so a
// range asked at a step of size-5 and that long is at most size bytes.
func pageStep(size int) int64 { return int64(size - 5) }

// pageQuery is the query of page (from 0) of a content in pages of at
// most size bytes of its JSON text: the range of pageStep(size) bytes that
// begins at page×pageStep(size). The API moves a range's ends back to
// whole escapes and characters, so that each page ends where the next
// begins.
func pageQuery(page, size int) string {
	step := pageStep(size)
	return "?offset=" + strconv.FormatInt(int64(page)*step, 10) + "&length=" + strconv.FormatInt(step, 10)
}

// pagesOf is how many pages of at most size bytes a content of total
// bytes of JSON text has: one at least (an empty content is one empty
// page).
func pagesOf(total int64, size int) int {
	step := pageStep(size)
	return max(1, int((total+step-1)/step))
}

// maxAnswer caps a page's answer: its head, the page and its meta (the
// API's bounds, a URL of 8 KiB and a meta of a few, keep it far below).
const maxPageAnswer = 2*MaxPageBytes + 1<<20

// errTooLong is an answer over maxPageAnswer bytes.
var errTooLong = fmt.Errorf("%w: over %d bytes", errBadAnswer, maxPageAnswer)

// readTargetPage reads a target's JSON answer from r, of a page of at
// most size bytes. From the in-process API (an answerPipe) the page's
// content is the API's own bytes, kept (readPieces), and only the rest is
// copied; from another reader the answer is read into a buffer of the
// page's size (grown only for a larger meta), which the page's text
// aliases.
func readTargetPage(r io.Reader, size int) (targetPage, error) {
	var (
		buf  []byte
		kept []keptPiece
		err  error
	)
	if p, ok := r.(*answerPipe); ok {
		buf, kept, err = p.readPieces(make([]byte, 0, 1<<10), maxPageAnswer)
	} else {
		var b bytes.Buffer
		b.Grow(size + 8<<10)
		var n int64
		if n, err = b.ReadFrom(io.LimitReader(r, maxPageAnswer+1)); err == nil && n > maxPageAnswer {
			err = errTooLong
		}
		buf = b.Bytes()
	}
	switch {
	case errors.Is(err, errTooLong):
		return targetPage{}, err
	case err != nil:
		return targetPage{}, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	return parseTargetPage(buf, kept)
}

// parseTargetPage parses the answer buf, with kept pieces of it where
// they lie (readPieces). One kept piece between the quotes of the
// result's content is the page's text, as the API writes it: buf, an
// empty content in its place, is the rest of the answer. Otherwise the
// pieces are copied in place, and buf parsed whole.
func parseTargetPage(buf []byte, kept []keptPiece) (targetPage, error) {
	var t targetPage
	if len(kept) > 0 && !(len(kept) == 1 && validText(kept[0].b)) {
		buf, kept = inlined(buf, kept), nil
	}
	if err := json.Unmarshal(buf, &t); err != nil {
		return t, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	if t.Result == nil {
		if len(kept) > 0 {
			return t, fmt.Errorf("%w: bytes outside a result's content", errBadAnswer)
		}
		return t, nil
	}
	if t.Result.Range == nil {
		return t, fmt.Errorf("%w: a result without its range", errBadAnswer)
	}
	c := t.Result.Content
	switch {
	case len(kept) == 0:
		t.text = c[1 : len(c)-1]
	case len(c) == 2 && kept[0].at > 0 && &c[0] == &buf[kept[0].at-1]:
		t.text = kept[0].b
	default:
		return parseTargetPage(inlined(buf, kept), nil) // not where the content is: parsed whole
	}
	return t, nil
}

// inlined is buf with the kept pieces copied in where they lie.
func inlined(buf []byte, kept []keptPiece) []byte {
	n := len(buf)
	for _, k := range kept {
		n += len(k.b)
	}
	whole := make([]byte, 0, n)
	prev := 0
	for _, k := range kept {
		whole = append(append(whole, buf[prev:k.at]...), k.b...)
		prev = k.at
	}
	return append(whole, buf[prev:]...)
}
