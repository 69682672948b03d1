package mcpserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/mcpserver"
)

// getAPI is the body of GET path on the bundle's API with key, which must
// answer 200.
func (b *bundle) getAPI(t *testing.T, path, key string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, body, err)
	}
	return body
}

// fields decodes a JSON object into its fields.
func fields(t *testing.T, what string, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v: %s", what, err, b)
	}
	return m
}

// sameFields reports each field of want and got (JSON objects, and the
// objects in their arrays, recursively) that one lacks or that differs.
func sameFields(t *testing.T, what string, want, got map[string]any) {
	t.Helper()
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok && !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		w, inWant := want[k]
		g, inGot := got[k]
		switch {
		case !inWant:
			t.Errorf("%s: field %q = %v, which GET does not answer", what, k, g)
		case !inGot:
			t.Errorf("%s: field %q missing (GET answers %v)", what, k, w)
		default:
			wl, wok := w.([]any)
			gl, gok := g.([]any)
			if wok && gok && len(wl) == len(gl) {
				for i := range wl {
					wm, _ := wl[i].(map[string]any)
					gm, _ := gl[i].(map[string]any)
					sameFields(t, what+"."+k+"["+string(rune('0'+i))+"]", wm, gm)
				}
				continue
			}
			if !reflect.DeepEqual(w, g) {
				t.Errorf("%s: field %q = %v, GET answers %v", what, k, g, w)
			}
		}
	}
}

// TestMCP_StatusAndWaitAnswerTheJobAsGET holds batch_status and
// batch_wait to GET /v1/batch/{id}'s shape, field by field, on one job
// that has every field: started and ended, targets done, failed, fetched
// after the cancel (its duration known) and never run (its hint).
func TestMCP_StatusAndWaitAnswerTheJobAsGET(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": b.url("/a")},
		map[string]any{"url": b.url("/fail/b")},
		map[string]any{"url": b.url("/gate/shape")},
		map[string]any{"url": b.url("/c")},
	}}, &sub)
	g := b.f.gate("/gate/shape")
	testkit.Recv(t, g.Entered())
	b.Clock.Advance(1500 * time.Millisecond) // the fetch in flight takes 1.5 s
	if !b.Runner.Cancel(sub.ID) {
		t.Fatal("cancel: false")
	}
	g.Open()
	testkit.WaitFor(t, "the target in flight at the cancel stored", func() bool {
		j, ok := b.Runner.Job(sub.ID)
		return ok && j.TargetsDone == 3
	})

	get := fields(t, "GET", b.getAPI(t, "/v1/batch/"+sub.ID, "alice-key"))
	for _, k := range []string{"started_at", "ended_at", "created_at", "targets_failed"} {
		if _, ok := get[k]; !ok {
			t.Fatalf("GET lacks %q: the job does not exercise every field: %v", k, get)
		}
	}
	ts := get["targets"].([]any)
	if d, _ := ts[2].(map[string]any)["duration_ms"].(float64); d != 1500 {
		t.Fatalf("GET target 2 duration_ms %v, want 1500", ts[2])
	}
	if h, _ := ts[3].(map[string]any)["hint"].(string); ts[3].(map[string]any)["status"] != "pending" || !strings.HasPrefix(h, "not run: the job was cancelled") {
		t.Fatalf("GET target 3 %v, want pending with a hint that it will not run", ts[3])
	}
	for _, tool := range []string{"batch_status", "batch_wait"} {
		res := call(t, cs, tool, map[string]any{"id": sub.ID}, nil)
		if res.IsError {
			t.Fatalf("%s: %s", tool, textOf(res))
		}
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		sameFields(t, tool, get, fields(t, tool, raw))
	}

	// A list's jobs are the list's, as GET /v1/batch answers them.
	var list map[string]any
	res := call(t, cs, "batch_list", map[string]any{}, &list)
	if res.IsError {
		t.Fatal(textOf(res))
	}
	apiList := fields(t, "GET list", b.getAPI(t, "/v1/batch", "alice-key"))
	sameFields(t, "batch_list", apiList, list)
}

// TestMCP_NoAnswerEscapesHTML checks that no MCP message escapes HTML
// ("<" stays "<", not "\u003c"), over streamable HTTP and over stdio, in
// a page's text (the call's content) and in its structured output, while
// a backslash before "u003c" in the content stays as it is.
func TestMCP_NoAnswerEscapesHTML(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	const page = `<h1>Tom & Jerry</h1> \u003c stays`
	u := b.url("/content/html?a=1&b=2") // "&" in the structured output's url
	b.f.contents.Store(u, page)
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": u}}}, &sub)
	call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, nil)

	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"batch_result","arguments":{"id":"` + sub.ID + `","idx":0}}}`
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer alice-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /mcp: %d %v", resp.StatusCode, err)
	}
	checkUnescaped(t, "streamable HTTP", raw)
	// What the client decodes is the page, exactly.
	res := call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0}, nil)
	if got := textOf(res); got != page {
		t.Fatalf("page %q, want %q", got, page)
	}

	// Over stdio: the same call, its answer as written.
	inR, inW := io.Pipe()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- mcpserver.ServeStdio(t.Context(), b.srv.URL, "alice-key", nil, inR, nopWriteCloser{&out}, mcpserver.Options{})
	}()
	for _, m := range []string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		body,
	} {
		if _, err := io.WriteString(inW, m+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "the stdio answer to the call", func() bool { return bytes.Contains(out.Bytes(), []byte(`"id":1`)) })
	inW.Close()
	if err := testkit.Recv(t, done); err != nil {
		t.Fatal(err)
	}
	checkUnescaped(t, "stdio", out.Bytes())
}

// checkUnescaped checks that an answer holds the page's HTML as it is.
func checkUnescaped(t *testing.T, what string, raw []byte) {
	t.Helper()
	for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
		if bytes.Contains(bytes.ReplaceAll(raw, []byte(`\\u003c`), nil), []byte(esc)) {
			t.Errorf("%s: the answer escapes HTML (%s): %s", what, esc, raw)
		}
	}
	for _, want := range []string{`<h1>Tom & Jerry</h1> \\u003c stays`, `?a=1&b=2"`} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("%s: the answer lacks %s as it is: %s", what, want, raw)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	buf testkit.SyncBuffer
}

func (s *syncBuffer) Write(p []byte) (int, error) { return s.buf.Write(p) }
func (s *syncBuffer) Bytes() []byte               { return []byte(s.buf.String()) }
