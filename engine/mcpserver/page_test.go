package mcpserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// refPages cuts s as the pager must: pages whose JSON encoding (as
// json.Marshal writes the string, its quotes aside) is at most size bytes,
// each ending where adding the next rune would pass size.
func refPages(s string, size int) []string {
	var pages []string
	cur, curCost := "", 0
	for _, r := range s {
		rs := string(r)
		b, _ := json.Marshal(rs)
		cost := len(b) - 2
		if len(cur) > 0 && curCost+cost > size {
			pages = append(pages, cur)
			cur, curCost = "", 0
		}
		cur += rs
		curCost += cost
	}
	if cur != "" || len(pages) == 0 {
		pages = append(pages, cur)
	}
	return pages
}

// TestReadTargetPage_CutsAtRuneBoundaries reads every page of contents
// dense with escapes, as the API may write them (HTML-escaped or not):
// each page is cut between runes where its JSON encoding would pass the
// size, as refPages cuts it.
func TestReadTargetPage_CutsAtRuneBoundaries(t *testing.T) {
	contents := []string{
		"",
		"plain ascii text",
		strings.Repeat("é✓😀", 50),
		"quotes \" and \\ backslashes \n\t\r\b\f and \u0001 control \u2028 separators",
		strings.Repeat("a\"b\\c😀", 40) + "<tag>&amp;",
		"surrogates 😀 𝄞 and an invalid byte \xff here",
		strings.Repeat("<\x01>&\x7f", 30) + "é",
	}
	for n := range 2 * len(contents) {
		content := contents[n/2]
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(n%2 == 0) // raw '<', '>' and '&' in the stream, or \u003c…
		if err := enc.Encode(map[string]any{"content": content, "meta": map[string]any{"type": "text/plain"}}); err != nil {
			t.Fatal(err)
		}
		raw := bytes.TrimSpace(buf.Bytes())
		want := strings.ToValidUTF8(content, "\uFFFD")
		for _, size := range []int{1, 3, 4, 7, 64} {
			pages := refPages(want, size)
			for page := range len(pages) + 1 {
				doc := `{"idx":3,"url":"https://a.example/x","status":"done","result":` + string(raw) + "}\n"
				tp, err := readTargetPage(strings.NewReader(doc), page, size)
				if err != nil {
					t.Fatalf("%q size %d page %d: %v", content, size, page, err)
				}
				wantPage := ""
				if page < len(pages) {
					wantPage = pages[page]
				}
				if tp.Content != wantPage || tp.Pages != len(pages) || tp.ContentBytes != len(want) || !utf8.ValidString(tp.Content) {
					t.Fatalf("%q size %d page %d: got %q (%d pages, %d bytes), want %q (%d pages, %d bytes)",
						content, size, page, tp.Content, tp.Pages, tp.ContentBytes, wantPage, len(pages), len(want))
				}
				if tp.Idx != 3 || tp.Status != "done" || !tp.HasResult || string(tp.Meta) != `{"type":"text/plain"}` {
					t.Fatalf("head %+v", tp)
				}
			}
		}
	}
}

func TestReadTargetPage_FailedTargetAndBadAnswers(t *testing.T) {
	tp, err := readTargetPage(strings.NewReader(`{"idx":1,"url":"u","status":"failed","error":"e","hint":"h"}`), 0, 8)
	if err != nil || tp.HasResult || tp.Error != "e" || tp.Hint != "h" || tp.Status != "failed" {
		t.Fatalf("%+v %v", tp, err)
	}
	for _, bad := range []string{
		``, `[]`, `{"idx":1,"result":{"content":"unterminated`, `{"result":{"content":"bad \q escape"}}`,
		`{"result":{"content":"bad \u12 escape"}}`, `{"result":{"content" "x"}}`, `{"result":{"content":1}}`,
	} {
		if _, err := readTargetPage(strings.NewReader(bad), 0, 8); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// BenchmarkReadTargetPage_16MiB reads one page from a 16 MiB target answer
// (as GET /v1/batch/{id}/{idx} writes it): B/op is what the MCP server
// allocates to keep that page, the page itself and its read buffers,
// never the whole result.
func BenchmarkReadTargetPage_16MiB(b *testing.B) {
	content := strings.Repeat("héllo wörld ✓ 😀 — ", 40) + "\"quoted\"\n"
	content = strings.Repeat(content, 16<<20/len(content))
	raw, err := json.Marshal(map[string]any{"content": content, "meta": map[string]any{"type": "text/plain"}})
	if err != nil {
		b.Fatal(err)
	}
	doc := `{"idx":0,"url":"https://a.example/x","status":"done","result":` + string(raw) + "}\n"
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tp, err := readTargetPage(strings.NewReader(doc), i%64, MaxPageBytes)
		if err != nil || len(tp.Content) > MaxPageBytes {
			b.Fatal(err, len(tp.Content))
		}
	}
}
