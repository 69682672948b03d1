package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/apitype"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/httpapi"
)

// rangeContent is a content of about 1.2 MB (stored in chunks) with
// characters JSON escapes and multi-byte runes at every offset.
var rangeContent = strings.Repeat("héllo <wörld> ✓ 😀 \"q\" \\ \n\t\x01\u2028 ", 30_000)

func rangeFetch(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	if strings.HasSuffix(t.URL, "/fail") {
		return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
	}
	return engine.Result{Content: rangeContent, Meta: map[string]any{"status": 200.0}}, nil
}

// jsonText is s's JSON text as the API writes it (no HTML escapes),
// without its quotes: what a range counts.
func jsonText(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return b.String()[1 : b.Len()-2]
}

// TestAPI_TargetRange: GET /v1/batch/{id}/{idx}?offset=&length= answers
// a range of the content, its meta and where it lies; following
// range.end from 0 in ranges of several lengths gives the content back
// whole, each range whole escapes and runes (it decodes alone), at most 5
// bytes longer than asked and never split; a range past the end is empty;
// a failed target has no result (the range asked is no error); bad values
// are 400 naming the parameter. Every answer is checked against the
// OpenAPI document (setup).
func TestAPI_TargetRange(t *testing.T) {
	t.Parallel()
	b := setupWith(t, rangeFetch, httpapi.Options{})
	id := b.submit(t, "alice-key", "https://example.com/big", "https://example.com/fail")
	b.waitTerminal(t, id)
	text := jsonText(rangeContent)
	for _, length := range []int{16, 1000, 256 << 10, httpapi.MaxRangeLength} {
		var got strings.Builder
		var off int64
		for n := 0; ; n++ {
			r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0?offset="+strconv.FormatInt(off, 10)+"&length="+strconv.Itoa(length), "alice-key", nil)
			wantCode(t, r, http.StatusOK)
			var tg apitype.TargetStatus
			if err := json.Unmarshal(r.body, &tg); err != nil || tg.Result == nil || tg.Result.Range == nil {
				t.Fatalf("length %d, offset %d: %v %.300s", length, off, err, r.body)
			}
			rg := tg.Result.Range
			if rg.Offset != off || rg.Total != int64(len(text)) || rg.End < rg.Offset || rg.End-rg.Offset > int64(length) || tg.Result.Meta["status"] != 200.0 {
				t.Fatalf("length %d, offset %d: range %+v, meta %v", length, off, *rg, tg.Result.Meta)
			}
			if want := text[rg.Offset:rg.End]; jsonText(tg.Result.Content) != want {
				t.Fatalf("length %d, offset %d: the range is not the content's text there", length, off)
			}
			got.WriteString(tg.Result.Content)
			if rg.End == rg.Total {
				break
			}
			if rg.End-rg.Offset < int64(length)-5 {
				t.Fatalf("length %d: range %+v shorter than asked by more than an escape", length, *rg)
			}
			off = rg.End
			if length == 16 && n > 40 {
				break // a few hundred bytes of small ranges are enough
			}
		}
		if length != 16 && got.String() != rangeContent {
			t.Fatalf("length %d: the ranges joined are %d bytes, not the content's %d", length, got.Len(), len(rangeContent))
		}
	}
	// An offset inside an escape or a rune moves back to its start.
	at := int64(strings.Index(text, `\u0001`) + 3)
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0?offset="+strconv.FormatInt(at, 10)+"&length=10", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	var tg apitype.TargetStatus
	if err := json.Unmarshal(r.body, &tg); err != nil || tg.Result.Range.Offset != at-3 || !strings.HasPrefix(tg.Result.Content, "\x01") {
		t.Fatalf("offset inside an escape: %v %.300s", err, r.body)
	}
	// Past the end: empty, at the end. Only length: from 0.
	for q, want := range map[string][3]int64{
		"offset=" + strconv.Itoa(len(text)+10): {int64(len(text)), int64(len(text)), 0},
		"length=5":                             {0, 5, 5},
		"offset=0":                             {0, httpapi.DefaultRangeLength, httpapi.DefaultRangeLength},
	} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0?"+q, "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		var tg apitype.TargetStatus
		if err := json.Unmarshal(r.body, &tg); err != nil || tg.Result.Range.Offset != want[0] || tg.Result.Range.End != want[1] || int64(len(jsonText(tg.Result.Content))) != want[2] {
			t.Fatalf("%s: %v %+v", q, err, tg.Result.Range)
		}
	}
	// A failed target: no result, whatever the range.
	r = b.do(t, http.MethodGet, "/v1/batch/"+id+"/1?offset=0&length=10", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if bytes.Contains(r.body, []byte(`"result"`)) || !bytes.Contains(r.body, []byte(`"hint"`)) {
		t.Fatalf("failed target: %s", r.body)
	}
	for q, msg := range map[string]string{
		"offset=-1": "bad offset", "offset=": "bad offset", "offset=01": "bad offset", "offset=1.5": "bad offset",
		"offset=9007199254740993": "bad offset", "offset=99999999999999999999": "bad offset",
		"length=0": "bad length", "length=": "bad length", "length=4194305": "bad length", "length=x": "bad length",
		"offset=0&offset=1": `parameter "offset" given more than once`, "range=0-1": `unknown parameter "range"`,
	} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0?"+q, "alice-key", nil)
		wantError(t, r, http.StatusBadRequest, msg)
	}
	// Another caller's job is 404, as without a range.
	r = b.do(t, http.MethodGet, "/v1/batch/"+id+"/0?offset=0", "bob-key", nil)
	wantError(t, r, http.StatusNotFound, "job not found")
}

// discard is a ResponseWriter that keeps nothing but the status and the
// bytes' count: a benchmark's allocations are the handler's own.
type discard struct {
	h    http.Header
	code int
	n    int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(code int)        { d.code = code }
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// BenchmarkAPI_TargetRange reads a 256 KiB range in the middle of a
// stored result of 1, 16 and 31 MiB (persistence.MaxResultSize is 32 MiB:
// a larger result is not stored) on a disk store, through the API's handler: B/op
// over page-bytes is the allocation per page, which must be flat in the
// result's size (issue 34: at most 2× the page). whole/ is GET
// /v1/batch/{id}/{idx} without a range, beside it.
func BenchmarkAPI_TargetRange(b *testing.B) {
	for _, mib := range []int{1, 16, 31} {
		// A unit is 21 bytes of JSON text: the stored result is mib MiB.
		content := strings.Repeat("héllo wörld \"q\"\n", mib<<20/21)
		fetch := func(context.Context, *engine.Caller, engine.Target) (engine.Result, error) {
			return engine.Result{Content: content, Meta: map[string]any{"status": 200}}, nil
		}
		eb := enginetest.SetupOn(b, enginetest.OpenStore(b, b.TempDir()), fetch, engine.Config{})
		keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
		if err != nil {
			b.Fatal(err)
		}
		api, err := httpapi.New(eb.Runner, keys, httpapi.Options{})
		if err != nil {
			b.Fatal(err)
		}
		id := eb.Submit(b, "alice", []engine.Target{{URL: "https://example.com/big"}})
		if _, err := eb.Runner.Wait(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		get := func(b *testing.B, q string) int {
			req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"/0"+q, nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			w := &discard{h: http.Header{}}
			api.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("%s: %d", q, w.code)
			}
			return w.n
		}
		mid := strconv.Itoa(mib << 19)
		for _, bc := range []struct{ name, q string }{{"range", "?offset=" + mid + "&length=262144"}, {"whole", ""}} {
			b.Run(bc.name+"/size="+strconv.Itoa(mib)+"MiB", func(b *testing.B) {
				n := get(b, bc.q)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					get(b, bc.q)
				}
				b.ReportMetric(float64(n), "answer-bytes")
			})
		}
	}
}

// keptRecorder is a ResponseRecorder that is an httpx.KeptWriter: it
// records the bytes given it to keep.
type keptRecorder struct {
	*httptest.ResponseRecorder
	kept [][]byte
}

func (k *keptRecorder) WriteKept(p []byte) (int, error) {
	k.kept = append(k.kept, p)
	return k.Write(p)
}

// TestAPI_TargetRangeKept: a range is handed to a writer that can keep
// bytes (MCP's in-process transport) by WriteKept, its bytes alone,
// through the API's own writers (the status recorder, the read's turn);
// the answer is the same as any writer's. So are the pieces of a whole
// result larger than one.
func TestAPI_TargetRangeKept(t *testing.T) {
	t.Parallel()
	b := setupWith(t, rangeFetch, httpapi.Options{})
	id := b.submit(t, "alice-key", "https://example.com/big")
	b.waitTerminal(t, id)
	get := func(w http.ResponseWriter, q string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"/0"+q, nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		b.api.ServeHTTP(w, req)
	}
	q := "?offset=1000&length=70000"
	plain, kept := httptest.NewRecorder(), &keptRecorder{ResponseRecorder: httptest.NewRecorder()}
	get(plain, q)
	get(kept, q)
	if plain.Code != http.StatusOK || kept.Code != http.StatusOK || plain.Body.String() != kept.Body.String() {
		t.Fatalf("kept %d, plain %d: the answers differ", kept.Code, plain.Code)
	}
	var tg apitype.TargetStatus
	if err := json.Unmarshal(plain.Body.Bytes(), &tg); err != nil || tg.Result == nil || tg.Result.Range == nil {
		t.Fatalf("%v %.200s", err, plain.Body)
	}
	if len(kept.kept) != 1 || string(kept.kept[0]) != jsonText(rangeContent)[tg.Result.Range.Offset:tg.Result.Range.End] {
		t.Fatalf("kept %d writes, want the range's text once", len(kept.kept))
	}
	// A whole result larger than a piece (512 KiB) is read and sent piece
	// by piece, each piece the answer's alone: kept too, the same answer.
	wholePlain, whole := httptest.NewRecorder(), &keptRecorder{ResponseRecorder: httptest.NewRecorder()}
	get(wholePlain, "")
	get(whole, "")
	if whole.Code != http.StatusOK || wholePlain.Code != http.StatusOK || whole.Body.String() != wholePlain.Body.String() {
		t.Fatalf("a whole result: kept %d, plain %d: the answers differ", whole.Code, wholePlain.Code)
	}
	if pieces := (len(jsonText(rangeContent)) + (512<<10 - 1)) / (512 << 10); len(whole.kept) < pieces {
		t.Fatalf("a whole result of %d bytes of text: %d writes kept, want its %d pieces", len(jsonText(rangeContent)), len(whole.kept), pieces)
	}
}
