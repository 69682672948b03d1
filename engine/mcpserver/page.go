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
}

// jsonString is a JSON string's text as it was read, its quotes and
// escapes and all: a page's content, kept as the API wrote it so that
// the answer can carry it as it is (see splice), neither decoded nor
// copied. It aliases the bytes json.Unmarshal read (readTargetPage's
// buffer, which it keeps).
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

// body is s between its quotes: the string's JSON text.
func (s jsonString) body() []byte {
	if len(s) < 2 {
		return nil
	}
	return s[1 : len(s)-1]
}

// decode is the string s is the JSON text of.
func (s jsonString) decode() (string, error) {
	var v string
	err := json.Unmarshal(s, &v)
	return v, err
}

// decodedLen is the length in bytes of the string s is the JSON text of,
// as encoding/json decodes it (an invalid UTF-8 byte or a lone surrogate
// escape becomes U+FFFD, 3 bytes), counted without decoding it. s's
// syntax has been checked (json.Unmarshal).
func (s jsonString) decodedLen() int {
	b := s.body()
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

// readTargetPage reads a target's JSON answer from r, of a page of at
// most size bytes, holding its bytes once (a buffer of the page's size, grown only for
// a larger meta) and the page's text once.
func readTargetPage(r io.Reader, size int) (targetPage, error) {
	var t targetPage
	var buf bytes.Buffer
	buf.Grow(size + 8<<10)
	// A page's answer is its head, the page and its meta: the API's
	// bounds (a URL of 8 KiB, a meta of a few) keep it far below this.
	const maxAnswer = 2*MaxPageBytes + 1<<20
	if n, err := buf.ReadFrom(io.LimitReader(r, maxAnswer+1)); err != nil {
		return t, fmt.Errorf("%w: %v", errBadAnswer, err)
	} else if n > maxAnswer {
		return t, fmt.Errorf("%w: over %d bytes", errBadAnswer, maxAnswer)
	}
	if err := json.Unmarshal(buf.Bytes(), &t); err != nil {
		return t, fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	if t.Result != nil && t.Result.Range == nil {
		return t, fmt.Errorf("%w: a result without its range", errBadAnswer)
	}
	return t, nil
}
