package fetcher

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/itchyny/gojq"

	"github.com/sift/batch/engine"
)

// maxJQError caps the bytes of a jq error kept in a target's error.
const maxJQError = 300

// The bounds of the programs a caller sends, checked at submit
// ([Fetcher.Check]) in the serving process, and again in the filter
// process. Parsing and compiling run in the serving process, so each
// bound keeps the cost of one check to a few MiB and a few ms, whatever
// the program (BenchmarkCheckWorst).
const (
	// MaxGrepInstructions caps the size of a grep expression: the
	// instructions of its compiled program (regexp/syntax's, after
	// Simplify). Typical expressions compile to 11 to 23; "[A-Z]{1000}x"
	// to 1003. RE2's time is linear in the page times this number.
	MaxGrepInstructions = 500
	// MaxGrepLen caps a grep expression's length in bytes, checked before
	// it is parsed: parsing Unicode classes such as (?i)[\pL\pN] costs
	// about 5 KiB of memory per byte.
	MaxGrepLen = 512
	// MaxJQLen caps a jq program's length in bytes, checked before it is
	// parsed: parsing costs up to about 400 bytes of memory per byte.
	MaxJQLen = 4 << 10
	// MaxJQDepth caps how deep a parsed jq program nests, checked before it
	// is printed and compiled, which recurse once per level: each bracket,
	// parenthesis or interpolation adds two or three levels; each pipe,
	// comma, operator, "as" binding and suffix (.a, [], ?) one.
	MaxJQDepth = 512
	// MaxJQAltBindings caps, for each destructuring with ?// alternatives
	// in a jq program, its alternatives times its variables, checked
	// before it is compiled: gojq's compiler emits two instructions for
	// every variable of the destructuring in every alternative, so 400
	// variables and 500 alternatives (4 KiB, 4 levels deep) cost 30 MiB and
	// 70 ms to compile. Typical programs stay under 100.
	MaxJQAltBindings = 4096
)

// grepSizeGuess is how large a grep expression's program may look, from
// its parse tree, before it is simplified and compiled to be counted
// exactly: repeats are expanded by Simplify, so "a{1000}" written 500
// times would cost 140 MiB to count.
const grepSizeGuess = 4 * MaxGrepInstructions

// compileGrep compiles a grep expression as [regexp.Compile] does, and
// refuses one longer than [MaxGrepLen] bytes or whose program has more
// than [MaxGrepInstructions] instructions.
func compileGrep(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxGrepLen {
		return nil, fmt.Errorf("the expression is %d bytes, more than the %d allowed; make it shorter", len(expr), MaxGrepLen)
	}
	re, err := syntax.Parse(expr, syntax.Perl) // as regexp.Compile parses it
	if err != nil {
		return nil, err
	}
	if n := grepSize(re, grepSizeGuess); n > grepSizeGuess {
		return nil, fmt.Errorf("the expression compiles to over %d instructions, more than the %d allowed; make it shorter or its repeats smaller", grepSizeGuess, MaxGrepInstructions)
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

// grepSize guesses, without expanding it, the instructions re compiles to:
// about one per rune, class, anchor and operator, a repeat's body as many
// times as its most. Past limit it returns limit+1. The parser bounds the
// tree's height (1000), and so this recursion.
func grepSize(re *syntax.Regexp, limit int) int {
	n := 0
	switch re.Op {
	case syntax.OpEmptyMatch:
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpCapture:
		n = 2 + grepSize(re.Sub[0], limit)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = 1 + grepSize(re.Sub[0], limit)
	case syntax.OpRepeat:
		most := re.Max
		if most < 0 {
			most = re.Min + 1 // x{n,}: n copies and a star
		}
		n = most * grepSize(re.Sub[0], limit) // each factor is at most 1000, or limit+1
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			if n += grepSize(sub, limit); n > limit {
				break
			}
		}
	default: // a class, an anchor, any character
		n = 1
	}
	return min(n, limit+1)
}

// compileJQ parses and compiles a jq program, with the library's defaults:
// no environment ($ENV is empty), no modules, no input. A program longer
// than [MaxJQLen] bytes is refused before it is parsed (gojq's parser
// keeps its own stack: it costs memory in proportion to the program, and
// no recursion), one deeper than [MaxJQDepth] before it is printed or
// compiled.
func compileJQ(src string) (*gojq.Code, error) {
	if len(src) > MaxJQLen {
		return nil, fmt.Errorf("the program is %d bytes, more than the %d allowed; make it shorter", len(src), MaxJQLen)
	}
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, err
	}
	depth, bindings := jqShape(q, MaxJQDepth)
	if depth > MaxJQDepth {
		return nil, fmt.Errorf("the program nests more than %d levels deep (each bracket adds two or three; each pipe, comma, operator and suffix one); make it flatter", MaxJQDepth)
	}
	if bindings > MaxJQAltBindings {
		return nil, fmt.Errorf("a destructuring's ?// alternatives times its variables pass %d; use fewer of either", MaxJQAltBindings)
	}
	if m := jqRefused.FindString(q.String()); m != "" {
		return nil, fmt.Errorf("%s is not available here: it recurses in Go once per path element, and a path built by the program can exhaust the stack", m)
	}
	return gojq.Compile(q)
}

// jqShape returns how deep the parsed program q nests, or limit+1 once it
// is deeper than limit: every pointer to a node of gojq's syntax tree is a
// level, and the i-th suffix of a term (.a.b.c), or the i-th part of an
// interpolated string, i more, as gojq's compiler recurses along them.
// And the largest alternatives-times-variables of its destructurings with
// ?// (see [MaxJQAltBindings]). It walks the tree by reflection, so that a
// node of any type counts; it stops at limit, so that its own recursion is
// bounded.
func jqShape(q *gojq.Query, limit int) (depth, bindings int) {
	deepest := 0
	var walk func(v reflect.Value, depth int)
	walk = func(v reflect.Value, depth int) {
		if deepest > limit {
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				return
			}
			if v.Elem().Kind() == reflect.Struct {
				depth++
				deepest = max(deepest, depth)
			}
			walk(v.Elem(), depth)
		case reflect.Struct:
			for i := range v.NumField() {
				field, fv := v.Type().Field(i), v.Field(i)
				if !field.IsExported() {
					continue
				}
				if fv.Kind() != reflect.Slice {
					walk(fv, depth)
					continue
				}
				if ps, ok := fv.Interface().([]*gojq.Pattern); ok && len(ps) > 1 {
					bindings = max(bindings, len(ps)*patternNames(ps))
				}
				chain := field.Name == "SuffixList" || field.Name == "Queries"
				for j := range fv.Len() {
					if chain {
						walk(fv.Index(j), depth+j)
					} else {
						walk(fv.Index(j), depth)
					}
				}
			}
		}
	}
	walk(reflect.ValueOf(q), 0)
	return min(deepest, limit+1), bindings
}

// patternNames counts the variables that patterns bind (an upper bound of
// the distinct ones gojq's compiler pushes for each alternative). Its
// recursion is bounded by the depth walk that calls it, which has not
// passed its limit.
func patternNames(ps []*gojq.Pattern) int {
	n := 0
	for _, p := range ps {
		if p == nil {
			continue
		}
		if p.Name != "" {
			n++
		}
		n += patternNames(p.Array)
		for _, o := range p.Object {
			if o == nil {
				continue
			}
			if strings.HasPrefix(o.Key, "$") {
				n++ // {$name}: binds $name
			}
			if o.Val != nil {
				n += patternNames([]*gojq.Pattern{o.Val})
			}
		}
	}
	return n
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
//	ack:      "A"                                     (the request read, before its filters run)
//	response: magic "SFR1", kind u32, a i64, b i64, len1 u32, len2 u32, text1, text2
//
// A child that ends before its ack never saw the page: the fetcher gives
// the page to another; one that ends after it died running the filters.
// A response's kind is respOK (a jq's outputs, b grep's lines, text1 the
// content) or respError (a the status, text1 the message, text2 the hint).
// Anything else from a child is garbage: the child is killed.
const (
	magicReady    = "SFC1"
	ackRequest    = 'A'
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
