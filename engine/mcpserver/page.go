package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxPageBytes caps one batch_result page (256 KiB) as its MCP message
// carries it: its content's size as JSON encodes it, each escape counted
// ('<' and a control character are 6 bytes as \u00XX, a quote 2), so
// that a page's message stays near a page whatever its content. The
// page's content bytes are at most that too (fewer for text dense with
// escapes).
const MaxPageBytes = 256 << 10

// errBadAnswer is an answer of the API that is not the JSON expected.
var errBadAnswer = errors.New("bad answer")

// targetPage is one page of one target, as GET /v1/batch/{id}/{idx}
// answers it: its head whole, its result's content as one page.
type targetPage struct {
	Idx          int             `json:"idx"`
	URL          string          `json:"url"`
	Status       string          `json:"status"`
	Error        string          `json:"error,omitempty"`
	Hint         string          `json:"hint,omitempty"`
	Meta         json.RawMessage `json:"meta,omitempty"`
	HasResult    bool            `json:"-"`
	ContentBytes int             `json:"-"`
	Pages        int             `json:"-"`
	Content      string          `json:"-"`
}

// readTargetPage reads a target's JSON from r and keeps page (0-based) of
// its result's content, in pages of at most size bytes cut at UTF-8
// boundaries: it never holds more of the content than that page. It also
// counts the content's bytes and pages. A page past the last is an empty
// Content.
func readTargetPage(r io.Reader, page, size int) (targetPage, error) {
	var t targetPage
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return t, err
	}
	for dec.More() {
		key, err := keyOf(dec)
		if err != nil {
			return t, err
		}
		var dst any
		switch key {
		case "idx":
			dst = &t.Idx
		case "url":
			dst = &t.URL
		case "status":
			dst = &t.Status
		case "error":
			dst = &t.Error
		case "hint":
			dst = &t.Hint
		case "result":
			// The result is the last field the API writes: read it and stop.
			t.HasResult = true
			return t, readResult(dec, r, &t, page, size)
		default:
			dst = new(json.RawMessage)
		}
		if err := dec.Decode(dst); err != nil {
			return t, fmt.Errorf("%w: %v", errBadAnswer, err)
		}
	}
	return t, nil
}

// readResult reads {"content": "…", "meta": {…}}, the content streamed.
func readResult(dec *json.Decoder, r io.Reader, t *targetPage, page, size int) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		key, err := keyOf(dec)
		if err != nil {
			return err
		}
		if key != "content" {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return fmt.Errorf("%w: %v", errBadAnswer, err)
			}
			if key == "meta" {
				t.Meta = raw
			}
			continue
		}
		rest := bufio.NewReaderSize(io.MultiReader(dec.Buffered(), r), 64<<10)
		p := pager{want: page, size: size}
		if err := streamString(rest, &p); err != nil {
			return err
		}
		t.Content, t.ContentBytes, t.Pages = p.buf.String(), p.total, p.page+1
		if p.total == 0 {
			t.Pages = 1
		}
		// What follows the content, ',"meta":{…}}', read as an object of
		// its own.
		var tail struct {
			Meta json.RawMessage `json:"meta"`
		}
		if err := json.NewDecoder(io.MultiReader(strings.NewReader(`{"content":""`), rest)).Decode(&tail); err != nil {
			return fmt.Errorf("%w: %v", errBadAnswer, err)
		}
		if tail.Meta != nil {
			t.Meta = tail.Meta
		}
		return nil
	}
	return nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	if tok != d {
		return fmt.Errorf("%w: want %q", errBadAnswer, d)
	}
	return nil
}

func keyOf(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("%w: %v", errBadAnswer, err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("%w: want a key", errBadAnswer)
	}
	return key, nil
}

// asciiCost is the size of each ASCII character as encoding/json writes
// it in a string (with its HTML escaping, as the MCP message is encoded):
// 1, 2 for \" \\ \n \r \t…, 6 for \u00XX.
var asciiCost = func() (c [utf8.RuneSelf]uint8) {
	for i := range c {
		b, _ := json.Marshal(string(rune(i)))
		c[i] = uint8(len(b) - 2)
	}
	return c
}()

// jsonCost is the size of one rune's UTF-8 bytes b (or one byte of
// invalid UTF-8) as encoding/json writes it in a string.
func jsonCost(b []byte) int {
	if len(b) == 1 && b[0] < utf8.RuneSelf {
		return int(asciiCost[b[0]])
	}
	r, n := utf8.DecodeRune(b)
	if r == utf8.RuneError && n <= 1 || r == '\u2028' || r == '\u2029' {
		return 6 // \ufffd, \u2028, \u2029
	}
	return len(b)
}

// notPlain marks the bytes that stop a plain span: the ASCII characters
// JSON escapes, and 0xE2, the lead byte of U+2028 and U+2029.
var notPlain = func() (t [256]bool) {
	for i := range utf8.RuneSelf {
		t[i] = asciiCost[i] != 1
	}
	t[0xE2] = true
	return t
}()

// plainPrefix is the length of b's longest prefix of whole runes that
// JSON writes as they are (a byte each). b ends with a whole rune.
func plainPrefix(b []byte) int {
	i := 0
	for i < len(b) {
		c := b[i]
		if !notPlain[c] {
			i++
			continue
		}
		if c != 0xE2 || i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
			break
		}
		i++
	}
	if utf8.Valid(b[:i]) {
		return i
	}
	return plainRunes(b) // invalid UTF-8 (not from the API): rune by rune
}

// plainRunes is plainPrefix, decoding b rune by rune.
func plainRunes(b []byte) int {
	i := 0
	for i < len(b) {
		if c := b[i]; c < utf8.RuneSelf {
			if asciiCost[c] != 1 {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 || r == '\u2028' || r == '\u2029' {
			return i
		}
		i += n
	}
	return i
}

// pager keeps page want of a text fed one rune at a time, in pages that
// never split a rune and whose JSON encoding ([jsonCost]) is at most size
// bytes (a rune larger than a page alone on one).
type pager struct {
	want, size int
	page, cur  int // the page being filled, and its JSON-encoded bytes so far
	total      int // the text's bytes
	buf        strings.Builder
}

// add adds one rune's UTF-8 bytes (or one byte of invalid UTF-8).
func (p *pager) add(b []byte) {
	cost := jsonCost(b)
	if p.cur > 0 && p.cur+cost > p.size {
		p.page++
		p.cur = 0
	}
	p.take(b, cost)
}

// addRun adds whole runes of unescaped text, as add would one by one: its
// spans JSON writes as they are go to addPlain whole.
func (p *pager) addRun(b []byte) {
	for len(b) > 0 {
		if n := plainPrefix(b); n > 0 {
			p.addPlain(b[:n])
			b = b[n:]
			continue
		}
		_, n := utf8.DecodeRune(b)
		p.add(b[:n])
		b = b[n:]
	}
}

// addPlain adds whole runes that JSON writes as they are, as add would
// one by one.
func (p *pager) addPlain(b []byte) {
	for len(b) > 0 {
		room := max(p.size-p.cur, 0) // a rune larger than a page may have overfilled it
		if len(b) <= room {
			p.take(b, len(b))
			return
		}
		// The last rune boundary that fits.
		k := room
		for k > 0 && !utf8.RuneStart(b[k]) {
			k--
		}
		switch {
		case k > 0:
			p.take(b[:k], k)
			b = b[k:]
		case p.cur > 0: // the page is full: the next begins
			p.page++
			p.cur = 0
		default: // a rune larger than a page: alone on it
			_, n := utf8.DecodeRune(b)
			p.take(b[:n], n)
			b = b[n:]
		}
	}
}

// take adds b, of JSON-encoded size cost, to the page being filled.
func (p *pager) take(b []byte, cost int) {
	p.cur += cost
	p.total += len(b)
	if p.page == p.want {
		if p.buf.Cap() == 0 {
			p.buf.Grow(p.size) // once: no copies while the page fills
		}
		p.buf.Write(b)
	}
}

// streamString reads ws ':' ws then a JSON string from r, feeding its
// decoded text to p one rune at a time; r is left just past the string.
func streamString(r *bufio.Reader, p *pager) error {
	bad := func(what string) error { return fmt.Errorf("%w: content: %s", errBadAnswer, what) }
	c, err := skipSpace(r)
	if err != nil || c != ':' {
		return bad("want ':'")
	}
	if c, err = skipSpace(r); err != nil || c != '"' {
		return bad("want a string")
	}
	var rb [utf8.UTFMax]byte
	for {
		// A run of plain text, up to the next quote or escape, goes to the
		// pager whole: most of a long content is such runs.
		if r.Buffered() == 0 {
			if _, err := r.Peek(1); err != nil {
				return bad("unterminated string")
			}
		}
		buf, _ := r.Peek(r.Buffered())
		// Searched with IndexByte (vectorised) in a window, so that text
		// dense with escapes does not rescan the whole buffer each time.
		run := buf[:min(len(buf), 4096)]
		if i := bytes.IndexByte(run, '"'); i >= 0 {
			run = run[:i]
		}
		if i := bytes.IndexByte(run, '\\'); i >= 0 {
			run = run[:i]
		}
		run = wholeRunes(run)
		if len(run) > 0 {
			p.addRun(run)
			_, _ = r.Discard(len(run))
			continue
		}
		c, err := r.ReadByte()
		if err != nil {
			return bad("unterminated string")
		}
		switch {
		case c == '"':
			return nil
		case c == '\\':
			e, err := r.ReadByte()
			if err != nil {
				return bad("unterminated escape")
			}
			var ch rune
			switch e {
			case '"', '\\', '/':
				ch = rune(e)
			case 'b':
				ch = '\b'
			case 'f':
				ch = '\f'
			case 'n':
				ch = '\n'
			case 'r':
				ch = '\r'
			case 't':
				ch = '\t'
			case 'u':
				if ch, err = readHex4(r); err != nil {
					return bad("bad \\u escape")
				}
				if utf16.IsSurrogate(ch) {
					ch = lowSurrogate(r, ch)
				}
			default:
				return bad("bad escape")
			}
			p.add(rb[:utf8.EncodeRune(rb[:], ch)])
		default:
			// A rune split by the end of the buffer: byte by byte. Its lead
			// byte says how long it is.
			rb[0] = c
			n := 1
			for ; n < utf8.UTFMax && !utf8.FullRune(rb[:n]); n++ {
				nc, err := r.ReadByte()
				if err != nil {
					return bad("unterminated string")
				}
				if nc&0xC0 != 0x80 { // not a continuation byte: a rune ends here
					_ = r.UnreadByte()
					break
				}
				rb[n] = nc
			}
			p.add(rb[:n])
		}
	}
}

// wholeRunes is b without a rune its end splits.
func wholeRunes(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if !utf8.FullRune(b[i:]) {
			return b[:i]
		}
		break
	}
	return b
}

// lowSurrogate completes a surrogate pair whose high half is hi, if the
// next escape is its low half; else hi stands for U+FFFD, as encoding/json
// reads it.
func lowSurrogate(r *bufio.Reader, hi rune) rune {
	if next, err := r.Peek(6); err == nil && next[0] == '\\' && next[1] == 'u' {
		lo, err := parseHex4(next[2:])
		if err == nil {
			if ch := utf16.DecodeRune(hi, lo); ch != utf8.RuneError {
				_, _ = r.Discard(6)
				return ch
			}
		}
	}
	return utf8.RuneError
}

func readHex4(r *bufio.Reader) (rune, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	return parseHex4(h[:])
}

func parseHex4(h []byte) (rune, error) {
	var v rune
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, errBadAnswer
		}
	}
	return v, nil
}

func skipSpace(r *bufio.Reader) (byte, error) {
	for {
		c, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, nil
		}
	}
}
