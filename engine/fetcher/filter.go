package fetcher

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/itchyny/gojq"

	"github.com/sift/batch/engine"
)

// maxJQError caps the bytes of a jq error kept in a target's error.
const maxJQError = 300

// MaxGrepInstructions caps the size of a grep expression: the instructions
// of its compiled program (regexp/syntax's, after Simplify). Typical
// expressions compile to 11 to 23; "[A-Z]{1000}x" to 1003. RE2's time is
// linear in the page times this number.
const MaxGrepInstructions = 500

// compileGrep compiles a grep expression as [regexp.Compile] does, and
// refuses one whose program has more than [MaxGrepInstructions]
// instructions.
func compileGrep(expr string) (*regexp.Regexp, error) {
	re, err := syntax.Parse(expr, syntax.Perl) // as regexp.Compile parses it
	if err != nil {
		return nil, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, err
	}
	if n := len(prog.Inst); n > MaxGrepInstructions {
		return nil, fmt.Errorf("the expression compiles to %d instructions, more than the %d allowed; make it shorter or its repeats smaller", n, MaxGrepInstructions)
	}
	return regexp.Compile(expr)
}

// compileJQ parses and compiles a jq program, with the library's defaults:
// no environment ($ENV is empty), no modules, no input.
func compileJQ(src string) (*gojq.Code, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, err
	}
	if m := jqRefused.FindString(q.String()); m != "" {
		return nil, fmt.Errorf("%s is not available here: it recurses in Go once per path element, and a path built by the program can exhaust the stack", m)
	}
	return gojq.Compile(q)
}

// jqRefused are the builtins that take a path as a value (and pick and
// fromstream, which call them on one): gojq walks such a path by Go
// recursion, one frame per element, so a program that builds a path of
// millions of elements ("\u0000" * 4000000 | explode) overflows the
// goroutine's stack. In the filter process that would only end the
// process, but the target would fail with a memory error that misleads:
// a program that names one, even in a string, is refused at submit.
var jqRefused = regexp.MustCompile(`\b(setpath|getpath|delpaths|pick|fromstream)\b`)

// filterRequest is one page for the filters: jq's program, then grep's
// expression ("" for none), the most bytes jq may output, and the page.
type filterRequest struct {
	jq, grep string
	maxOut   int64
	body     []byte
}

// filterResponse is what the filters made of a page: the content kept,
// and jq's outputs and grep's lines (-1 where that filter was not asked
// for); or err, the target's error, when they failed on it.
type filterResponse struct {
	content   string
	jqOutputs int64
	grepLines int64
	err       *engine.TargetError
}

// filterPage runs req's jq program on the JSON page, then keeps the lines
// grep matches. It is what the filter process does with each request.
func filterPage(req filterRequest) filterResponse {
	resp := filterResponse{jqOutputs: -1, grepLines: -1}
	content := string(req.body)
	if req.jq != "" {
		out, n, err := runJQ(req.jq, req.body, req.maxOut)
		if err != nil {
			return filterResponse{err: err}
		}
		content, resp.jqOutputs = out, int64(n)
	}
	if req.grep != "" {
		re, err := compileGrep(req.grep)
		if err != nil { // Check refuses it at submit; a target stored before may still have it
			return filterResponse{err: &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "bad grep expression",
				Hint: fmt.Sprintf("give grep as an RE2 regular expression that compiles to at most %d instructions", MaxGrepInstructions)}}
		}
		var kept int
		content, kept = grepLines(content, re)
		resp.grepLines = int64(kept)
	}
	resp.content = content
	return resp
}

// grepLines keeps the lines of s that re matches (a line's ending, \n or
// \r\n, is not matched), and returns them joined by \n, and their count.
func grepLines(s string, re *regexp.Regexp) (string, int) {
	var b strings.Builder
	n := 0
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if re.MatchString(line) {
			if n > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(line)
			n++
		}
	}
	return b.String(), n
}

// runJQ runs program on the JSON page body, for at most maxOut bytes of
// output: each output value in compact JSON, one a line, as jq -c prints
// them. Its time and memory are bounded by the process it runs in.
func runJQ(program string, body []byte, maxOut int64) (string, int, *engine.TargetError) {
	code, err := compileJQ(program)
	if err != nil { // Check refuses it at submit; a target stored before may still have it
		return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "bad jq program", Hint: "give jq a program that parses, such as .items[].name"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	err = dec.Decode(&v)
	if err == nil {
		if _, more := dec.Token(); !errors.Is(more, io.EOF) {
			err = errors.New("more than one JSON value")
		}
	}
	if err != nil {
		return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "page is not JSON",
			Hint: "jq runs on JSON pages only; fetch this URL without jq"}
	}
	var out bytes.Buffer
	n := 0
	iter := code.Run(v)
	for {
		x, ok := iter.Next()
		if !ok {
			break
		}
		if err, isErr := x.(error); isErr {
			var halt *gojq.HaltError
			if errors.As(err, &halt) && halt.Value() == nil {
				break // halt: the program ends without an error
			}
			return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: cutText("jq: "+err.Error(), maxJQError),
				Hint: "the program failed on this page's JSON; check it against the page"}
		}
		b, err := gojq.Marshal(x)
		if err != nil {
			return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "jq output is not JSON", Hint: "make the program output JSON values"}
		}
		if int64(out.Len()+len(b)+1) > maxOut {
			return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "jq output too large",
				Hint: fmt.Sprintf("the program's output passed the %d bytes kept; make it output less", maxOut)}
		}
		if n > 0 {
			out.WriteByte('\n')
		}
		out.Write(b)
		n++
	}
	return out.String(), n, nil
}

// cutText returns s cut to at most n bytes at a rune boundary, with "…".
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}

// The frames between the fetcher and a filter process, over the child's
// standard input and output. Every number is big-endian.
//
//	ready:    magic "SFC1"                            (once, when the child starts)
//	request:  magic "SFQ1", len(jq) u32, len(grep) u32, len(body) u32, maxOut u64, jq, grep, body
//	response: magic "SFR1", kind u32, a i64, b i64, len1 u32, len2 u32, text1, text2
//
// A response's kind is respOK (a jq's outputs, b grep's lines, text1 the
// content) or respError (a the status, text1 the message, text2 the hint).
// Anything else from a child is garbage: the child is killed.
const (
	magicReady    = "SFC1"
	magicRequest  = "SFQ1"
	magicResponse = "SFR1"
	requestHeader = 4 + 4 + 4 + 4 + 8
	respHeader    = 4 + 4 + 8 + 8 + 4 + 4
	respOK        = 0
	respError     = 1
	// maxErrText caps a response's message and hint.
	maxErrText = 4 << 10
	// maxRequestText caps a request's program and expression: far more
	// than the API's whole body.
	maxRequestText = 1 << 20
	// maxRequestBody caps a request's page.
	maxRequestBody = 1 << 30
)

// errBadFrame is a frame that breaks the protocol.
var errBadFrame = errors.New("bad frame")

// writeRequest writes req as one request frame.
func writeRequest(w io.Writer, req filterRequest) error {
	head := make([]byte, requestHeader, requestHeader+len(req.jq)+len(req.grep))
	copy(head, magicRequest)
	binary.BigEndian.PutUint32(head[4:], uint32(len(req.jq)))
	binary.BigEndian.PutUint32(head[8:], uint32(len(req.grep)))
	binary.BigEndian.PutUint32(head[12:], uint32(len(req.body)))
	binary.BigEndian.PutUint64(head[16:], uint64(req.maxOut))
	head = append(append(head, req.jq...), req.grep...)
	if _, err := w.Write(head); err != nil {
		return err
	}
	_, err := w.Write(req.body)
	return err
}

// readRequest reads one request frame; its body reuses buf when it fits.
// io.EOF before the frame's first byte is the end of the requests.
func readRequest(r io.Reader, buf []byte) (filterRequest, []byte, error) {
	var head [requestHeader]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return filterRequest{}, buf, err
	}
	nj, ng, nb := binary.BigEndian.Uint32(head[4:]), binary.BigEndian.Uint32(head[8:]), binary.BigEndian.Uint32(head[12:])
	maxOut := binary.BigEndian.Uint64(head[16:])
	if string(head[:4]) != magicRequest || nj > maxRequestText || ng > maxRequestText || nb > maxRequestBody || maxOut > 1<<40 {
		return filterRequest{}, buf, errBadFrame
	}
	text := make([]byte, nj+ng)
	if _, err := io.ReadFull(r, text); err != nil {
		return filterRequest{}, buf, err
	}
	if cap(buf) < int(nb) {
		buf = make([]byte, nb)
	}
	body := buf[:nb]
	if _, err := io.ReadFull(r, body); err != nil {
		return filterRequest{}, buf, err
	}
	return filterRequest{jq: string(text[:nj]), grep: string(text[nj:]), maxOut: int64(maxOut), body: body}, buf, nil
}

// writeResponse writes resp as one response frame.
func writeResponse(w io.Writer, resp filterResponse) error {
	head := make([]byte, respHeader)
	copy(head, magicResponse)
	var t1, t2 string
	if resp.err != nil {
		binary.BigEndian.PutUint32(head[4:], respError)
		binary.BigEndian.PutUint64(head[8:], uint64(resp.err.Status))
		t1, t2 = cutText(resp.err.Msg, maxErrText), cutText(resp.err.Hint, maxErrText)
	} else {
		binary.BigEndian.PutUint32(head[4:], respOK)
		binary.BigEndian.PutUint64(head[8:], uint64(resp.jqOutputs))
		binary.BigEndian.PutUint64(head[16:], uint64(resp.grepLines))
		t1 = resp.content
	}
	binary.BigEndian.PutUint32(head[24:], uint32(len(t1)))
	binary.BigEndian.PutUint32(head[28:], uint32(len(t2)))
	if _, err := w.Write(head); err != nil {
		return err
	}
	if _, err := io.WriteString(w, t1); err != nil {
		return err
	}
	_, err := io.WriteString(w, t2)
	return err
}

// readResponse reads one response frame to req, checking it: a content
// longer than maxContent, counts for a filter that was not asked for (or
// none for one that was), an error that is not a 4xx or 5xx status, or
// text that is not UTF-8 is errBadFrame.
func readResponse(r io.Reader, req filterRequest, maxContent int64) (filterResponse, error) {
	var head [respHeader]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return filterResponse{}, err
	}
	kind := binary.BigEndian.Uint32(head[4:])
	a, b := int64(binary.BigEndian.Uint64(head[8:])), int64(binary.BigEndian.Uint64(head[16:]))
	n1, n2 := int64(binary.BigEndian.Uint32(head[24:])), int64(binary.BigEndian.Uint32(head[28:]))
	if string(head[:4]) != magicResponse {
		return filterResponse{}, errBadFrame
	}
	switch kind {
	case respOK:
		if n1 > maxContent || n2 != 0 || (req.jq != "") != (a >= 0) || (req.grep != "") != (b >= 0) || a < -1 || b < -1 {
			return filterResponse{}, errBadFrame
		}
	case respError:
		if a < 400 || a > 599 || n1 > maxErrText || n2 > maxErrText {
			return filterResponse{}, errBadFrame
		}
	default:
		return filterResponse{}, errBadFrame
	}
	text := make([]byte, n1+n2)
	if _, err := io.ReadFull(r, text); err != nil {
		return filterResponse{}, err
	}
	if kind == respError {
		if !utf8.Valid(text) {
			return filterResponse{}, errBadFrame
		}
		return filterResponse{err: &engine.TargetError{Status: int(a), Msg: string(text[:n1]), Hint: string(text[n1:])}}, nil
	}
	return filterResponse{content: string(text), jqOutputs: a, grepLines: b}, nil
}
