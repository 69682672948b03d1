package mcpserver

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// pipeAnswer writes parts to a new answerPipe from its own goroutine, each
// kept if its index is in kept, then closes it with werr; the error of the
// first write that failed comes on the channel.
func pipeAnswer(parts [][]byte, kept map[int]bool, werr error) (*answerPipe, <-chan error) {
	p := newAnswerPipe()
	done := make(chan error, 1)
	go func() {
		var err error
		for i, s := range parts {
			if _, err = p.write(s, kept[i]); err != nil {
				break
			}
		}
		p.closeWrite(werr)
		done <- err
	}()
	return p, done
}

// bytesOf is each string's bytes.
func bytesOf(parts ...string) [][]byte {
	b := make([][]byte, len(parts))
	for i, s := range parts {
		b[i] = []byte(s)
	}
	return b
}

// TestAnswerPipe_KeptContentIsThePage: a page's content written kept
// reaches the tool as the API's own bytes (no copy), the rest of the
// answer parsed around it; kept bytes anywhere else, or several, or not a
// JSON string's text, are parsed in place, as if copied.
func TestAnswerPipe_KeptContentIsThePage(t *testing.T) {
	head, tail := `{"idx":0,"url":"u","status":"done","result":{"content":"`, `","meta":{"k":1},"range":{"offset":0,"end":9,"total":9}}}`+"\n"
	content := `a\"b<c>\n`
	for name, tc := range map[string]struct {
		parts [][]byte
		kept  map[int]bool
		alias bool // the page's text is the kept write's bytes
	}{
		"kept content":            {bytesOf(head, content, tail), map[int]bool{1: true}, true},
		"copied content":          {bytesOf(head, content, tail), nil, false},
		"kept in two":             {bytesOf(head, content[:3], content[3:], tail), map[int]bool{1: true, 2: true}, false},
		"kept head":               {bytesOf(head, content, tail), map[int]bool{0: true}, false},
		"kept content and tail":   {bytesOf(head+content, tail), map[int]bool{1: true}, false},
		"kept url":                {bytesOf(`{"idx":0,"url":"`, `u`, head[len(`{"idx":0,"url":"u`):]+content+tail), map[int]bool{1: true}, false},
		"kept, cut inside escape": {bytesOf(head+`a\`, `"b<c>\n`, tail), map[int]bool{1: true}, false},
	} {
		p, done := pipeAnswer(tc.parts, tc.kept, nil)
		tp, err := readTargetPage(p, 16)
		if err != nil || <-done != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tp.Result == nil || string(tp.text) != content || tp.Result.Range.Total != 9 || string(tp.Result.Meta) != `{"k":1}` {
			t.Fatalf("%s: %+v, text %q", name, tp, tp.text)
		}
		if tc.alias && &tp.text[0] != &tc.parts[1][0] {
			t.Errorf("%s: the page's text is a copy", name)
		}
	}
}

// TestAnswerPipe_AsIOPipe: Read reads kept and copied writes alike; the
// writer's error ends the reads; a reader's Close fails the writes; an
// answer over the bound is refused.
func TestAnswerPipe_AsIOPipe(t *testing.T) {
	p, done := pipeAnswer(bytesOf("ab", "cd", "ef"), map[int]bool{1: true}, io.ErrUnexpectedEOF)
	b, err := io.ReadAll(p)
	if string(b) != "abcdef" || !errors.Is(err, io.ErrUnexpectedEOF) || <-done != nil {
		t.Fatalf("%q %v", b, err)
	}
	p, done = pipeAnswer(bytesOf("ab", "cd"), nil, nil)
	buf := make([]byte, 1)
	if n, err := p.Read(buf); n != 1 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	_ = p.Close()
	if err := <-done; !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("a write after the reader's Close: %v", err)
	}
	p, done = pipeAnswer(bytesOf(`{"url":"`, strings.Repeat("x", maxPageAnswer), `"}`), map[int]bool{1: true}, nil)
	if _, err := readTargetPage(p, 16); !errors.Is(err, errTooLong) {
		t.Fatalf("an answer over the bound: %v", err)
	}
	_ = p.Close()
	if err := <-done; !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("the rest of an answer refused: %v", err)
	}
}
