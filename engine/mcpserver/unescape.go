package mcpserver

import (
	"io"
	"net/http"
)

// The MCP SDK encodes a tool's structured output and its JSON-RPC
// messages with json.Marshal, which escapes "<", ">" and "&" (as \u003c,
// \u003e, \u0026). (A tool's text content is the server's own, written
// without those escapes by textJSON: an escape inside a text is a
// JSON string's content, which the unescaper below must leave alone.)
// No JSON siftbatch writes escapes HTML (a page's "<h1>" stays "<h1>", as
// the API writes it), so every message the server writes goes through an
// unescaper, which turns those three escapes back into their characters.
// Both spellings mean the same JSON string; only the HTML ones change.

// unescaper is an io.Writer that writes JSON to w with \u003c, \u003e and
// \u0026 (either case of hex) as "<", ">" and "&". It reads the JSON's
// escapes from left to right, so an escaped backslash followed by
// "u003c" ("\\u003c", the text `\u003c`) is left as it is. An escape cut
// between two writes is held until its end comes (at most 5 bytes); a
// Flush writes what it holds as it is. Not safe for concurrent use: one
// writer per stream.
type unescaper struct {
	w    io.Writer
	pend [6]byte // an escape begun: `\`, then `u` and up to 3 hex digits
	n    int     // bytes in pend
	pass int     // bytes of an escape flushed as it was, still to pass as they are
	out  []byte  // the buffer of each Write
}

// Write writes p to w, unescaped; it reports len(p) once w took it all.
func (u *unescaper) Write(p []byte) (int, error) {
	out := u.out[:0]
	for _, c := range p {
		switch {
		case u.pass > 0:
			out = append(out, c)
			u.pass--
		case u.n == 0:
			if c == '\\' {
				u.pend[0], u.n = c, 1
				continue
			}
			out = append(out, c)
		case u.n == 1:
			if c == 'u' {
				u.pend[1], u.n = c, 2
				continue
			}
			out = append(out, '\\', c) // \\, \", \n…: two bytes, whole
			u.n = 0
		default:
			u.pend[u.n] = c
			if u.n++; u.n == len(u.pend) {
				out = appendUnescaped(out, u.pend)
				u.n = 0
			}
		}
	}
	if cap(out) <= 64<<10 {
		u.out = out
	}
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := u.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// appendUnescaped appends the escape e to b: its character if it is one
// of the three, else e as it is.
func appendUnescaped(b []byte, e [6]byte) []byte {
	if e[2] == '0' && e[3] == '0' {
		switch {
		case e[4] == '3' && (e[5] == 'c' || e[5] == 'C'):
			return append(b, '<')
		case e[4] == '3' && (e[5] == 'e' || e[5] == 'E'):
			return append(b, '>')
		case e[4] == '2' && e[5] == '6':
			return append(b, '&')
		}
	}
	return append(b, e[:]...)
}

// flush writes the escape held, if any, as it is: the rest of it, in
// later writes, passes as it is too.
func (u *unescaper) flush() error {
	if u.n == 0 {
		return nil
	}
	held := u.n
	u.pass, u.n = 1, 0 // `\` alone: its next byte
	if held > 1 {
		u.pass = len(u.pend) - held
	}
	_, err := u.w.Write(u.pend[:held])
	return err
}

// unescapeHTML has next's answers written through an unescaper.
func unescapeHTML(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&unescapeWriter{ResponseWriter: w, u: unescaper{w: w}}, r)
	})
}

// unescapeWriter is an http.ResponseWriter whose body goes through an
// unescaper. It drops a Content-Length (the body may shrink).
type unescapeWriter struct {
	http.ResponseWriter
	u unescaper
}

func (w *unescapeWriter) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *unescapeWriter) Write(p []byte) (int, error) {
	w.Header().Del("Content-Length")
	return w.u.Write(p)
}

// Flush writes what is held and flushes the answer (Server-Sent Events
// are flushed after each).
func (w *unescapeWriter) Flush() {
	_ = w.u.flush()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the ResponseWriter underneath, for http.ResponseController.
func (w *unescapeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// unescapeCloser is stdio's writer: an unescaper over out, which Close
// flushes, then closes.
type unescapeCloser struct {
	u   unescaper
	out io.WriteCloser
}

func (c *unescapeCloser) Write(p []byte) (int, error) { return c.u.Write(p) }

func (c *unescapeCloser) Close() error {
	err := c.u.flush()
	if cerr := c.out.Close(); err == nil {
		err = cerr
	}
	return err
}
