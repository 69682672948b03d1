package fetcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/itchyny/gojq"

	"github.com/sift/batch/engine"
)

// jqTimeout bounds one jq program's run on one page.
const jqTimeout = time.Second

// maxJQError caps the bytes of a jq error kept in a target's error.
const maxJQError = 300

// Honours returns the names of the target options ([engine.Options]) that
// [Fetcher.Fetch] honours, as spelled in JSON: grep and jq. A handler
// should refuse the others (see
// [github.com/sift/batch/engine/httpapi.Options.Honoured]).
func (f *Fetcher) Honours() []string { return []string{"grep", "jq"} }

// Check reports whether Fetch can run t's options: grep must be an RE2
// regular expression, jq a jq program that parses and compiles. Its error
// is the parser's message, for a 422 at submit. Other options are not
// looked at. Safe for concurrent use.
func (f *Fetcher) Check(t engine.Target) error {
	if t.Options.Grep != "" {
		if _, err := regexp.Compile(t.Options.Grep); err != nil {
			return fmt.Errorf("grep: %w", err)
		}
	}
	if t.Options.JQ != "" {
		if _, err := compileJQ(t.Options.JQ); err != nil {
			return fmt.Errorf("jq: %w", err)
		}
	}
	return nil
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
// goroutine's stack, which kills the process: no recover, no supervision
// can contain it. The 1 s bound cannot stop one native call either. A
// program that names one, even in a string, is refused at submit.
var jqRefused = regexp.MustCompile(`\b(setpath|getpath|delpaths|pick|fromstream)\b`)

// applyOptions runs t's jq program on the page, then keeps the lines grep
// matches, and notes what it did in meta.
func (f *Fetcher) applyOptions(ctx context.Context, o engine.Options, body []byte, truncated bool, meta map[string]any) (string, error) {
	content := string(body)
	if o.JQ != "" {
		if truncated {
			return "", &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "page too large for jq",
				Hint: fmt.Sprintf("the page is larger than the %d bytes kept, so its JSON is cut; fetch it without jq", f.o.MaxBody)}
		}
		out, n, err := f.runJQ(ctx, o.JQ, body)
		if err != nil {
			return "", err
		}
		content = out
		meta["jq_outputs"] = n
	}
	if o.Grep != "" {
		re, err := regexp.Compile(o.Grep)
		if err != nil { // Check refuses it at submit; a target stored before may still have it
			return "", &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "bad grep expression", Hint: "give grep as an RE2 regular expression"}
		}
		var kept int
		content, kept = grepLines(content, re)
		meta["grep_lines"] = kept
	}
	return content, nil
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

// runJQ runs program on the JSON page body, for at most jqTimeout and at
// most MaxBody bytes of output: each output value in compact JSON, one a
// line, as jq -c prints them.
func (f *Fetcher) runJQ(ctx context.Context, program string, body []byte) (string, int, error) {
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
	jctx, cancel := context.WithTimeout(ctx, jqTimeout)
	defer cancel()
	var out bytes.Buffer
	n := 0
	next := jqSteps(jctx, code.RunWithContext(jctx, v))
	for {
		x, ok := next()
		if !ok {
			break
		}
		if err, isErr := x.(error); isErr {
			var halt *gojq.HaltError
			if errors.As(err, &halt) && halt.Value() == nil {
				break // halt: the program ends without an error
			}
			if ctx.Err() != nil {
				return "", 0, fmt.Errorf("fetch stopped: %w", context.Cause(ctx))
			}
			if jctx.Err() != nil {
				return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "jq ran out of time",
					Hint: fmt.Sprintf("the program ran longer than %s on this page; make it do less", jqTimeout)}
			}
			return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: cutText("jq: "+err.Error(), maxJQError),
				Hint: "the program failed on this page's JSON; check it against the page"}
		}
		b, err := gojq.Marshal(x)
		if err != nil {
			return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "jq output is not JSON", Hint: "make the program output JSON values"}
		}
		if int64(out.Len()+len(b)+1) > f.o.MaxBody {
			return "", 0, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "jq output too large",
				Hint: fmt.Sprintf("the program's output passed the %d bytes kept; make it output less", f.o.MaxBody)}
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

// errJQTime stands for an output the program did not give within its time.
var errJQTime = errors.New("jq ran out of time")

// jqSteps returns the next output of iter, or errJQTime once ctx is done:
// gojq checks ctx only between its steps, and one native call (a regular
// expression on a long string) can run for seconds. Such a call is left
// to finish on its goroutine, which then ends; its output is dropped.
func jqSteps(ctx context.Context, iter gojq.Iter) func() (any, bool) {
	type step struct {
		x  any
		ok bool
	}
	return func() (any, bool) {
		ch := make(chan step, 1)
		go func() {
			x, ok := iter.Next()
			ch <- step{x, ok}
		}()
		select {
		case s := <-ch:
			return s.x, s.ok
		case <-ctx.Done():
			return errJQTime, true
		}
	}
}
