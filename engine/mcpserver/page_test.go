package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPages_QueryAndCount(t *testing.T) {
	for _, tc := range []struct {
		total int64
		size  int
		pages int
	}{{0, 16, 1}, {1, 16, 1}, {11, 16, 1}, {12, 16, 2}, {(MaxPageBytes - 5) * 64, MaxPageBytes, 64}, {(MaxPageBytes-5)*64 + 1, MaxPageBytes, 65}} {
		if got := pagesOf(tc.total, tc.size); got != tc.pages {
			t.Errorf("pagesOf(%d, %d) = %d, want %d", tc.total, tc.size, got, tc.pages)
		}
	}
	if q := pageQuery(3, MaxPageBytes); q != "?offset=786417&length=262139" {
		t.Errorf("pageQuery(3) = %q", q)
	}
}

func TestReadTargetPage_FailedTargetAndBadAnswers(t *testing.T) {
	tp, err := readTargetPage(strings.NewReader(`{"idx":1,"url":"u","status":"failed","error":"e","hint":"h"}`), 16)
	if err != nil || tp.Result != nil || tp.Error != "e" || tp.Hint != "h" || tp.Status != "failed" {
		t.Fatalf("%+v %v", tp, err)
	}
	tp, err = readTargetPage(strings.NewReader(`{"idx":0,"url":"u","status":"done","result":{"content":"a\"b","meta":{"k":1},"range":{"offset":16,"end":20,"total":40}}}`), 16)
	if err != nil || tp.Result == nil || string(tp.Result.Content) != `"a\"b"` || tp.Result.Range.Total != 40 || string(tp.Result.Meta) != `{"k":1}` {
		t.Fatalf("%+v %v", tp, err)
	}
	for _, bad := range []string{
		``, `[]`, `{"idx":1,"result":{"content":"unterminated`, `{"result":{"content":"bad \q escape","range":{}}}`,
		`{"result":{"content":"bad \u12 escape","range":{}}}`, `{"result":{"content" "x"}}`, `{"result":{"content":1}}`,
		`{"result":{"content":"no range"}}`, `{"url":"` + strings.Repeat("x", 2*MaxPageBytes+1<<20) + `"}`,
	} {
		if _, err := readTargetPage(strings.NewReader(bad), 16); err == nil {
			t.Errorf("%.40q: no error", bad)
		}
	}
}

// TestText_LenAndDecode: a page's page_bytes, counted on its JSON
// text without decoding it, is the length json.Unmarshal decodes.
func TestText_LenAndDecode(t *testing.T) {
	texts := []string{
		`""`, `"a"`, `"héllo wörld ✓ 😀"`, `"\"q\" \\ \/ \b\f\n\r\t"`, `"\u00e9\u2028\u0000\u003c"`,
		`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`, `"\ud83d\u0041"`, `"\ud83dx\ude00"`, `"\uD83D\uDE00\u00E9"`,
		"\"\xff\xfeab\xc3\"", "\"\xe2\x9c\"", "\"\xed\xa0\x80\"", "\"ok\xf0\x9f\x98\x80\"",
	}
	for _, text := range texts {
		var want string
		if err := json.Unmarshal([]byte(text), &want); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		body := []byte(text[1 : len(text)-1])
		if !validText(body) {
			t.Errorf("%q: not valid", text)
		}
		if got := textLen(body); got != len(want) {
			t.Errorf("%q: textLen %d, want %d", text, got, len(want))
		}
		if got, err := decodeText(body); err != nil || got != want {
			t.Errorf("%q: decode %q %v, want %q", text, got, err, want)
		}
	}
}
