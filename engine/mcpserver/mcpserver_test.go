package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/mcpserver"
)

// TestMain checks that no test leaves a goroutine behind: every server,
// runner and MCP session a test starts is stopped by its end.
func TestMain(m *testing.M) { enginetest.Main(m) }

const testKeys = "alice alice-key\nbob bob-key\n"

// jsonTextLen is the length of s's JSON text as the store and the API
// write it (without HTML escapes): what a page of batch_result counts.
func jsonTextLen(s string) int {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return b.Len() - 3 // the quotes and the newline
}

// bigContent is a 16 MiB result with multi-byte runes and characters JSON
// escapes, so that page cuts fall inside runes unless they are careful.
var bigContent = func() string {
	var b strings.Builder
	unit := strings.Repeat("héllo wörld ✓ 😀 — ", 40) + "\"quoted\"\n\t<tag> & \\\n"
	for b.Len() < 16<<20 {
		b.WriteString(unit)
	}
	return b.String()
}()

// fetches is the fake fetch of the tests: a URL's path says what it does.
// /big/… answers bigContent, /gate/N waits for gate N, anything else
// answers its URL.
type fetches struct {
	mu    sync.Mutex
	gates map[string]*testkit.Gate
	// contents are the contents of URLs a test set (/content/…).
	contents sync.Map
}

func (f *fetches) gate(name string) *testkit.Gate {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gates == nil {
		f.gates = map[string]*testkit.Gate{}
	}
	g, ok := f.gates[name]
	if !ok {
		g = testkit.NewGate()
		f.gates[name] = g
	}
	return g
}

func (f *fetches) fetch(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
	if v, ok := f.contents.Load(t.URL); ok {
		return engine.Result{Content: v.(string)}, nil
	}
	switch {
	case strings.Contains(t.URL, "/big/"):
		return engine.Result{Content: bigContent, Meta: map[string]any{"type": "text/plain"}}, nil
	case strings.Contains(t.URL, "/gate/"):
		if err := f.gate(t.URL[strings.Index(t.URL, "/gate/"):]).Wait(ctx); err != nil {
			return engine.Result{}, err
		}
	case strings.Contains(t.URL, "/fail/"):
		return engine.Result{}, &engine.TargetError{Status: 502, Msg: "upstream failed", Hint: "try again later"}
	}
	return enginetest.OKFetch(ctx, c, t)
}

// bundle is a test's server: the runner, the API at /v1/ and the MCP
// server at /mcp, on a real HTTP server.
type bundle struct {
	*enginetest.Bundle
	f   *fetches
	srv *httptest.Server
	mcp *mcpserver.Handler
}

func setup(t testing.TB, cfg engine.Config) *bundle {
	t.Helper()
	return setupWrapped(t, cfg, nil)
}

// setupWrapped is setup with the API wrapped by wrap (if not nil), at
// /v1/ and where /mcp calls it.
func setupWrapped(t testing.TB, cfg engine.Config, wrap func(http.Handler) http.Handler) *bundle {
	t.Helper()
	return setupWith(t, cfg, wrap, mcpserver.Options{PollEvery: 20 * time.Millisecond})
}

// setupWith is setupWrapped with the MCP server's options o (Log: the
// bundle's).
func setupWith(t testing.TB, cfg engine.Config, wrap func(http.Handler) http.Handler, o mcpserver.Options) *bundle {
	t.Helper()
	f := &fetches{}
	eb := enginetest.Setup(t, f.fetch, cfg)
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(eb.Runner, keys, httpapi.Options{Honoured: []string{"grep"}, TargetsPerJob: cfg.TargetsPerJob})
	if err != nil {
		t.Fatal(err)
	}
	var inner http.Handler = api
	if wrap != nil {
		inner = wrap(api)
	}
	o.Log = eb.Log
	h, err := mcpserver.NewHandler(inner, keys, o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", inner)
	mux.Handle("/mcp", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { api.EndWaits(); h.EndWaits(); srv.Close() })
	return &bundle{Bundle: eb, f: f, srv: srv, mcp: h}
}

// bearer adds a Bearer key to each request, and counts the bytes of the
// answers.
type bearer struct {
	key      string
	maxBody  atomic.Int64 // the largest answer body read, in bytes
	progress testkit.Signal[*mcp.ProgressNotificationParams]
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countBody{ReadCloser: resp.Body, max: &b.maxBody}
	}
	return resp, err
}

type countBody struct {
	io.ReadCloser
	n   int64
	max *atomic.Int64
}

func (c *countBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	for {
		m := c.max.Load()
		if c.n <= m || c.max.CompareAndSwap(m, c.n) {
			break
		}
	}
	return n, err
}

// connect opens an MCP session to the bundle's /mcp with key.
func (b *bundle) connect(t testing.TB, key string) (*mcp.ClientSession, *bearer) {
	t.Helper()
	rt := &bearer{key: key}
	rt.progress.Init(t)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			rt.progress.Signal(r.Params)
		},
	})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: b.srv.URL + "/mcp", HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, rt
}

// call calls a tool and decodes its structured output into out (if not
// nil); it returns the result.
func call(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if out != nil && !res.IsError {
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: decode %s: %v", tool, raw, err)
		}
	}
	return res
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// requireToolError checks that res is a tool error whose text holds each
// of want.
func requireToolError(t *testing.T, res *mcp.CallToolResult, want ...string) string {
	t.Helper()
	text := textOf(res)
	if !res.IsError {
		t.Fatalf("want a tool error, got %s", text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("tool error %q lacks %q", text, w)
		}
	}
	return text
}

func (b *bundle) url(path string) string { return "http://example.test" + path }

func TestMCP_ListsSixToolsWithSchemas(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 80 {
			t.Errorf("%s: description too short to act on: %q", tool.Name, tool.Description)
		}
		schema, err := json.Marshal(tool.InputSchema)
		if err != nil || !strings.Contains(string(schema), `"type":"object"`) {
			t.Errorf("%s: input schema %s", tool.Name, schema)
		}
	}
	slices.Sort(names)
	want := []string{"batch_cancel", "batch_list", "batch_result", "batch_status", "batch_submit", "batch_wait"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func TestMCP_EveryToolOverStreamableHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	exerciseTools(t, cs, b.url, b.f)
}

// exerciseTools calls every tool once as an agent would, and checks each
// answer.
func exerciseTools(t *testing.T, cs *mcp.ClientSession, url func(string) string, f *fetches) {
	t.Helper()
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": url("/a")},
		map[string]any{"url": url("/fail/b")},
	}}, &sub)
	if sub.ID == "" || sub.Reused {
		t.Fatalf("submit: %+v", sub)
	}
	var again mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": url("/a")},
		map[string]any{"url": url("/fail/b")},
	}}, &again)
	if again.ID != sub.ID || !again.Reused {
		t.Fatalf("resubmit: %+v, want the same job reused", again)
	}

	var job mcpserver.Job
	call(t, cs, "batch_wait", map[string]any{"id": sub.ID, "seconds": 30}, &job)
	if job.Status != "partial" || job.TargetsDone != 2 || job.TargetsFailed != 1 || len(job.Targets) != 2 {
		t.Fatalf("wait: %+v", job)
	}
	var st mcpserver.Job
	call(t, cs, "batch_status", map[string]any{"id": sub.ID}, &st)
	if st.ID != sub.ID || st.Status != "partial" || st.Targets[1].Error != "upstream failed" || st.Targets[1].Hint != "try again later" {
		t.Fatalf("status: %+v", st)
	}

	var page mcpserver.ResultPage
	res := call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0}, &page)
	if got, want := textOf(res), enginetest.Content(url("/a")); got != want {
		t.Fatalf("result text %q, want %q", got, want)
	}
	if page.Pages != 1 || page.NextPage != nil || page.ContentBytes != len(textOf(res)) || page.Status != "done" {
		t.Fatalf("result: %+v", page)
	}
	var failed mcpserver.ResultPage
	res = call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 1}, &failed)
	if failed.Status != "failed" || failed.Error != "upstream failed" || failed.Pages != 0 || !strings.Contains(textOf(res), "try again later") {
		t.Fatalf("failed result: %+v %q", failed, textOf(res))
	}
	requireToolError(t, call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 5}, nil), "404", "target not found", "0 to 1")

	var list mcpserver.JobList
	call(t, cs, "batch_list", map[string]any{"limit": 5}, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != sub.ID {
		t.Fatalf("list: %+v", list)
	}
	requireToolError(t, call(t, cs, "batch_list", map[string]any{"status": "nope"}, nil), "400")

	requireToolError(t, call(t, cs, "batch_cancel", map[string]any{"id": sub.ID}, nil), "409")
	var live mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": url("/gate/cancel")}}}, &live)
	var c mcpserver.Cancelled
	call(t, cs, "batch_cancel", map[string]any{"id": live.ID}, &c)
	if !c.Cancelled {
		t.Fatalf("cancel: %+v", c)
	}
	f.gate("/gate/cancel").Open()
	call(t, cs, "batch_wait", map[string]any{"id": live.ID}, &job)
	if job.Status != "cancelled" {
		t.Fatalf("cancelled job: %+v", job)
	}

	// Bad input: the API's error names the option (an option the fetch
	// does not honour is 422); the schema refuses a missing id before the
	// tool runs.
	requireToolError(t, call(t, cs, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": url("/a"), "options": map[string]any{"summarize": true}}}}, nil), "summarize")
	requireToolError(t, call(t, cs, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": url("/a"), "options": map[string]any{"mode": "summary"}}}}, nil), "422", "mode")
	requireToolError(t, call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": "ftp://x"}}}, nil), "422")
	requireToolError(t, call(t, cs, "batch_wait", map[string]any{"id": sub.ID, "seconds": 61}, nil), "seconds from 1 to 60")
	if res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_status", Arguments: map[string]any{}}); err == nil && !res.IsError {
		t.Fatalf("status without id: %s", textOf(res))
	}
}

func TestMCP_KeysAreIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	alice, _ := b.connect(t, "alice-key")
	bob, _ := b.connect(t, "bob-key")
	var sub mcpserver.Submitted
	call(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/iso")}}}, &sub)

	missing := requireToolError(t, call(t, bob, "batch_status", map[string]any{"id": "no-such-job"}, nil), "404")
	for _, tool := range []string{"batch_status", "batch_wait", "batch_cancel"} {
		got := requireToolError(t, call(t, bob, tool, map[string]any{"id": sub.ID}, nil), "404")
		if got != missing {
			t.Errorf("%s of another's job: %q, want exactly a missing job's %q", tool, got, missing)
		}
	}
	requireToolError(t, call(t, bob, "batch_result", map[string]any{"id": sub.ID, "idx": 0}, nil), "404", "job not found")
	var list mcpserver.JobList
	call(t, bob, "batch_list", nil, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("bob lists %+v", list.Jobs)
	}
	b.f.gate("/gate/iso").Open()
	var job mcpserver.Job
	call(t, alice, "batch_wait", map[string]any{"id": sub.ID}, &job)
	if job.Status != "done" {
		t.Fatalf("alice's job: %+v", job)
	}
}

func TestMCP_LogsCarryNoURLOrKey(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	secretURL := b.url("/secret-path?token=s3cret")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": secretURL}}}, &sub)
	call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, nil)
	requireToolError(t, call(t, cs, "batch_status", map[string]any{"id": secretURL}, nil), "404")
	logs := b.Logs.String()
	if !strings.Contains(logs, "tool=batch_wait job_id="+sub.ID) || !strings.Contains(logs, "tool=batch_status job_id=(malformed) code=404") {
		t.Fatalf("the tool calls are not logged with their job ids and codes:\n%s", logs)
	}
	testkit.RequireNoneOf(t, logs, "alice-key", "secret-path", "s3cret", "example.test")
}

func TestMCP_UnknownKeyIs401(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	for _, auth := range []string{"", "Bearer wrong-key", "Basic YWxpY2U6YWxpY2Uta2V5"} {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" || !strings.Contains(string(body), "Bearer KEY") {
			t.Errorf("%q: %d %s", auth, resp.StatusCode, body)
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	if cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: b.srv.URL + "/mcp", HTTPClient: &http.Client{Transport: &bearer{key: "wrong"}}, MaxRetries: -1}, nil); err == nil {
		_ = cs.Close()
		t.Fatal("a session with an unknown key connected")
	}
}

// TestMCP_ServesAProxysHostHeader: a request that reaches a loopback
// address under another Host (a proxy on the same machine) is served: the
// key, not the address, decides.
func TestMCP_ServesAProxysHostHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"proxy","version":"1"}}}`))
	req.Host = "batch.example.com"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"siftbatch"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestMCP_WaitSendsProgressAsTargetsLand(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{Workers: 1})
	cs, rt := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{
		map[string]any{"url": b.url("/gate/p0")}, map[string]any{"url": b.url("/gate/p1")}, map[string]any{"url": b.url("/gate/p2")},
	}}, &sub)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID, "seconds": 60}}
		p.SetProgressToken("wait-1")
		res, err := cs.CallTool(context.Background(), p)
		done <- answer{res, err}
	}()
	// The first notification tells where the job stands (nothing stored);
	// then one for each target that lands, in order, while the call waits.
	if p := rt.progress.Wait(t); p.Progress != 0 || p.Total != 3 || p.ProgressToken != "wait-1" {
		t.Fatalf("first progress %+v", p)
	}
	for i := range 3 {
		b.f.gate("/gate/p" + strconv.Itoa(i)).Open()
		p := rt.progress.Wait(t)
		if p.Progress != float64(i+1) || p.Total != 3 || !strings.Contains(p.Message, fmt.Sprintf("%d of 3 targets stored", i+1)) {
			t.Fatalf("progress after target %d: %+v", i, p)
		}
	}
	a := testkit.Recv(t, done)
	if a.err != nil || a.res.IsError {
		t.Fatalf("wait: %v %s", a.err, textOf(a.res))
	}
	var job mcpserver.Job
	raw, _ := json.Marshal(a.res.StructuredContent)
	_ = json.Unmarshal(raw, &job)
	if job.Status != "done" || job.TargetsDone != 3 {
		t.Fatalf("wait answered %+v", job)
	}
}

// TestMCP_ResultOf16MiBReadInPages reads every page of a 16 MiB result.
// Each page's call has the API read the stored result whole (its own
// rule), so under the race detector the 65 calls take tens of seconds:
// a long test.
func TestMCP_EndWaitsAnswersAPendingWait(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, rt := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/end")}}}, &sub)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID, "seconds": 60}}
		p.SetProgressToken("end")
		res, err := cs.CallTool(context.Background(), p)
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	rt.progress.Wait(t) // the wait has begun
	b.mcp.EndWaits()
	res := testkit.Recv(t, done)
	var job mcpserver.Job
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &job); err != nil || res.IsError || job.Status == "done" {
		t.Fatalf("wait after EndWaits: %s %+v", textOf(res), job)
	}
	b.f.gate("/gate/end").Open()
}

func TestMCP_ResultOf16MiBReadInPages(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, rt := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/big/1")}}}, &sub)
	var job mcpserver.Job
	call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, &job)
	if job.Status != "done" {
		t.Fatalf("job %+v", job)
	}
	rt.maxBody.Store(0)
	var got strings.Builder
	pages := 0
	for page := 0; ; page++ {
		var p mcpserver.ResultPage
		res := call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": page}, &p)
		text := textOf(res)
		if res.IsError || len(text) > mcpserver.MaxPageBytes || !utf8.ValidString(text) || p.PageBytes != len(text) {
			t.Fatalf("page %d: error %v, %d bytes, valid UTF-8 %v, %+v", page, res.IsError, len(text), utf8.ValidString(text), p)
		}
		if p.ContentBytes != jsonTextLen(bigContent) || p.Page != page || p.Meta["type"] != "text/plain" {
			t.Fatalf("page %d: %+v", page, p)
		}
		got.WriteString(text)
		pages++
		if p.NextPage == nil {
			if pages != p.Pages {
				t.Fatalf("read %d pages, the answer says %d", pages, p.Pages)
			}
			break
		}
		// A page before the last is full: as JSON encodes it, within two
		// escapes' moves (5 bytes each, pageStep) of the bound.
		if n := jsonTextLen(text); *p.NextPage != page+1 || n < mcpserver.MaxPageBytes-10 || n > mcpserver.MaxPageBytes {
			t.Fatalf("page %d: next %d, %d bytes, %d as JSON: a page before the last is full", page, *p.NextPage, len(text), jsonTextLen(text))
		}
	}
	if got.String() != bigContent {
		t.Fatalf("the pages joined are %d bytes, not the result's %d", got.Len(), len(bigContent))
	}
	// One message carries one page: the largest answer the client read is
	// a page and its JSON envelope (escapes double some bytes at most).
	if m := rt.maxBody.Load(); m > 2*mcpserver.MaxPageBytes+4096 {
		t.Fatalf("the largest MCP message was %d bytes", m)
	}
	t.Logf("16 MiB result: %d pages; largest MCP message %d bytes", pages, rt.maxBody.Load())
	requireToolError(t, call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": pages}, nil), "page not found")
}

func TestMCP_TooManyJobsIsToolErrorWithRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{JobsPerCaller: 1})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/busy")}}}, &sub)
	requireToolError(t, call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/other")}}}, nil),
		"429", "retry after 5 seconds")
	b.f.gate("/gate/busy").Open()
	var job mcpserver.Job
	call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, &job)
}

func TestMCP_EveryToolOverStdio(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cin, sout := io.Pipe()
	sin, cout := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- mcpserver.ServeStdio(ctx, b.srv.URL, "alice-key", nil, sin, sout, mcpserver.Options{PollEvery: 20 * time.Millisecond})
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: cin, Writer: cout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exerciseTools(t, cs, b.url, b.f)
	_ = cs.Close()
	cancel()
	if err := testkit.Recv(t, served); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
}

func TestMCP_ServeStdioRefusesBadServerOrKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, key, want string }{
		{"http://127.0.0.1:1", "", "no API key"},
		{"ftp://x", "k", "http(s) URL"},
		{"127.0.0.1:8080", "k", "http(s) URL"},
	} {
		err := mcpserver.ServeStdio(context.Background(), tc.url, tc.key, nil, io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard}, mcpserver.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: %v, want %q", tc.url, tc.key, err, tc.want)
		}
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestMCP_NodeClient runs a client in another language, a Node script on
// the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// testdata/node's package-lock.json, installed with npm ci), against /mcp:
// it lists the tools, submits a job and reads its status. Tier node: make
// test/node.
func TestMCP_NodeClient(t *testing.T) {
	testkit.RequireTier(t, "node")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("tier node needs node (>= 18) and npm: apt-get install -y nodejs npm")
	}
	dir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = dir
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	b := setup(t, engine.Config{})
	cmd := exec.Command(node, "client.mjs", b.srv.URL+"/mcp", "alice-key", b.url("/node"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, out)
	}
	var got struct {
		Tools  []string `json:"tools"`
		ID     string   `json:"id"`
		Status string   `json:"status"`
		Total  int      `json:"targets_total"`
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("node client's last line: %v\n%s", err, out)
	}
	slices.Sort(got.Tools)
	if len(got.Tools) != 6 || got.Tools[0] != "batch_cancel" || got.ID == "" || got.Total != 1 {
		t.Fatalf("node client saw %+v", got)
	}
	j, ok := b.Runner.Job(got.ID)
	if !ok || j.Caller != "alice" {
		t.Fatalf("the node client's job %s: %+v %v", got.ID, j, ok)
	}
}

// TestMCP_ResultPagesAtTheirEdges reads, over a real /mcp, results whose
// size or runes fall on a page's edge: an empty result, one of exactly a
// page, one a byte past it, a 4-byte rune straddling the edge, characters
// JSON escapes (\u0001, six bytes each as a page counts them), and a rune
// just before an escape at the edge. Every page is at most 256 KiB of
// valid UTF-8, the pages joined
// are the result, next_page is absent on the last page only, and the page
// past the last is a tool error.
func TestMCP_ResultPagesAtTheirEdges(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	const P = mcpserver.MaxPageBytes
	const S = P - 5 // the step between two pages' offsets: a page's start may move back 5 bytes
	for _, tc := range []struct {
		name    string
		content string
		pages   int
	}{
		{"empty", "", 1},
		{"one byte", "x", 1},
		{"exactly a page", strings.Repeat("a", S), 1},
		{"a byte past a page", strings.Repeat("a", S+1), 2},
		{"an emoji across the edge", strings.Repeat("a", S-1) + "😀b", 2},
		{"an emoji ending the page", strings.Repeat("a", S-4) + "😀", 1},
		// A control character is 6 bytes as JSON (\u0001): a page holds
		// S/6 of them. A '<' is one (no JSON siftbatch writes escapes HTML).
		{"escaped characters filling a page", strings.Repeat("\x01", S/6), 1},
		{"escaped characters past a page", strings.Repeat("\x01", S/6+1), 2},
		{"escaped characters of many pages", strings.Repeat("\x01", P+1), (6*(P+1) + S - 1) / S},
		{"an escape across the edge", strings.Repeat("a", S-2) + "\x01" + "b", 2},
		{"quotes across the edge", strings.Repeat("a", S-1) + `""`, 2},
		{"HTML characters are a byte", strings.Repeat("<", S), 1},
		{"a rune then an escape at the edge", strings.Repeat("a", S-3) + "é\n" + "tail", 2},
		{"two-byte runes only", strings.Repeat("é", S/2+1), 2},
		{"U+2028 across the edge", strings.Repeat("a", S-1) + "\u2028", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := b.url("/content/" + strings.ReplaceAll(tc.name, " ", "-"))
			b.f.contents.Store(u, tc.content)
			var sub mcpserver.Submitted
			call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": u}}}, &sub)
			var job mcpserver.Job
			call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, &job)
			if job.Status != "done" {
				t.Fatalf("job %+v", job)
			}
			var got strings.Builder
			for page := 0; ; page++ {
				var p mcpserver.ResultPage
				res := call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": page}, &p)
				text := textOf(res)
				if res.IsError || len(text) > P || !utf8.ValidString(text) || p.PageBytes != len(text) || p.Pages != tc.pages || p.ContentBytes != jsonTextLen(tc.content) {
					t.Fatalf("page %d: error %v %q…, %d bytes, valid %v, %+v; want %d pages", page, res.IsError, text[:min(len(text), 80)], len(text), utf8.ValidString(text), p, tc.pages)
				}
				got.WriteString(text)
				if p.NextPage == nil {
					if page != tc.pages-1 {
						t.Fatalf("page %d has no next_page; want %d pages", page, tc.pages)
					}
					break
				}
				if page >= tc.pages {
					t.Fatalf("next_page %d past %d pages", *p.NextPage, tc.pages)
				}
			}
			if got.String() != tc.content {
				t.Fatalf("the pages joined are %d bytes, not the content's %d", got.Len(), len(tc.content))
			}
			requireToolError(t, call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": tc.pages}, nil), "page not found")
		})
	}
}

// TestMCP_HostileArguments calls the tools with arguments an agent gets
// wrong: negative, huge, of the wrong type, unicode, a path in an id. Each
// is an error (a tool error or the protocol's), never a success nor a
// crash, and the session still works after.
func TestMCP_HostileArguments(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/a")}}}, &sub)
	var job mcpserver.Job
	call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, &job)
	huge := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"batch_result", map[string]any{"id": sub.ID, "idx": -1}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": -1}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": 1 << 40}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": 1 << 40}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": 1e300}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": 0.5}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": "0"}},
		{"batch_result", map[string]any{"id": sub.ID, "idx": nil}},
		{"batch_result", map[string]any{"id": 7, "idx": 0}},
		{"batch_status", map[string]any{"id": "ジョブ\u0000\u202e"}},
		{"batch_status", map[string]any{"id": huge}},
		{"batch_status", map[string]any{"id": ".."}},
		{"batch_status", map[string]any{"id": "../openapi.json"}},
		{"batch_status", map[string]any{"id": sub.ID + "/0"}},
		{"batch_status", map[string]any{"id": sub.ID + "?results=1"}},
		{"batch_status", map[string]any{"id": []any{sub.ID}}},
		{"batch_wait", map[string]any{"id": sub.ID, "seconds": -1}},
		{"batch_wait", map[string]any{"id": sub.ID, "seconds": 1 << 40}},
		{"batch_wait", map[string]any{"id": sub.ID, "seconds": "60"}},
		{"batch_list", map[string]any{"limit": -5}},
		{"batch_list", map[string]any{"limit": 1 << 40}},
		{"batch_list", map[string]any{"cursor": "\xff not a cursor"}},
		{"batch_list", map[string]any{"status": huge}},
		{"batch_cancel", map[string]any{"id": ".."}},
		{"batch_cancel", map[string]any{"id": "../batch/" + sub.ID}},
		{"batch_submit", map[string]any{"targets": []any{}}},
		{"batch_submit", map[string]any{"targets": "https://a.example"}},
		{"batch_submit", map[string]any{"targets": []any{map[string]any{"url": "https://" + huge + ".example"}}}},
		{"batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/a")}}, "idempotency_key": 7}},
	} {
		name := tc.tool + " " + fmt.Sprint(tc.args)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err == nil && !res.IsError {
			raw, _ := json.Marshal(res.StructuredContent)
			t.Errorf("%.120s: a success: %.300s", name, raw)
		}
	}
	// The session still works.
	var st mcpserver.Job
	call(t, cs, "batch_status", map[string]any{"id": sub.ID}, &st)
	if st.Status != "done" {
		t.Fatalf("status after: %+v", st)
	}
}

// TestMCP_RefusedIdempotencyKeyIsTheAPIsError submits with an
// idempotency_key the API refuses (256 bytes, a tab, a control
// character): the tool error is the API's 400 with its hint, as every
// other refused input is, not "unavailable; try again", which an agent
// would retry for ever.
func TestMCP_RefusedIdempotencyKeyIsTheAPIsError(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	for _, key := range []string{strings.Repeat("k", 256), "a\tb", "bell\a"} {
		text := requireToolError(t, call(t, cs, "batch_submit", map[string]any{
			"targets": []any{map[string]any{"url": b.url("/a")}}, "idempotency_key": key}, nil), "400")
		if strings.Contains(text, "unavailable") || !strings.Contains(strings.ToLower(text), "idempotency") {
			t.Fatalf("key %.20q: tool error %q; want the API's 400 naming the idempotency key", key, text)
		}
	}
	// 255 bytes is a key.
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/a")}}, "idempotency_key": strings.Repeat("k", 255)}, &sub)
	if sub.ID == "" {
		t.Fatal("a 255-byte key refused")
	}
}

// TestMCP_IdempotencyKeysAreTheCallers submits the same idempotency_key
// from two keys over /mcp: each gets a job of its own (never the other's,
// never a 422 for the other's targets), and neither can read the other's.
func TestMCP_IdempotencyKeysAreTheCallers(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	alice, _ := b.connect(t, "alice-key")
	bob, _ := b.connect(t, "bob-key")
	var a, bb, a2 mcpserver.Submitted
	call(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/idem-a")}}, "idempotency_key": "shared"}, &a)
	call(t, bob, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/idem-b")}}, "idempotency_key": "shared"}, &bb)
	if a.ID == "" || bb.ID == "" || a.ID == bb.ID || bb.Reused {
		t.Fatalf("alice %+v, bob %+v: want two fresh jobs", a, bb)
	}
	call(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/idem-a")}}, "idempotency_key": "shared"}, &a2)
	if a2.ID != a.ID || !a2.Reused {
		t.Fatalf("alice again %+v; want %s reused", a2, a.ID)
	}
	requireToolError(t, call(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/idem-b")}}, "idempotency_key": "shared"}, nil), "422")
	requireToolError(t, call(t, bob, "batch_status", map[string]any{"id": a.ID}, nil), "404")
	requireToolError(t, call(t, bob, "batch_result", map[string]any{"id": a.ID, "idx": 0}, nil), "404")
	requireToolError(t, call(t, bob, "batch_cancel", map[string]any{"id": a.ID}, nil), "404")
	// Cancelled, alice's job frees the key for other targets.
	var c mcpserver.Cancelled
	call(t, alice, "batch_cancel", map[string]any{"id": a.ID}, &c)
	b.f.gate("/gate/idem-a").Open()
	var job mcpserver.Job
	call(t, alice, "batch_wait", map[string]any{"id": a.ID}, &job)
	var fresh mcpserver.Submitted
	call(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/idem-b")}}, "idempotency_key": "shared"}, &fresh)
	if fresh.ID == a.ID || fresh.ID == bb.ID || fresh.Reused {
		t.Fatalf("after the cancel: %+v; want a fresh job", fresh)
	}
}

// TestMCP_DotIDsAreNotFound asks for jobs whose ids are path segments:
// "." and "./" + a real id. No job has such an id: each is a 404 tool
// error, as an id no job has, never another resource's answer (the list,
// at /v1/batch/, read as an empty job).
func TestMCP_DotIDsAreNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/a")}}}, &sub)
	for _, id := range []string{".", "./" + sub.ID, sub.ID + "/."} {
		res := call(t, cs, "batch_status", map[string]any{"id": id}, nil)
		raw, _ := json.Marshal(res.StructuredContent)
		if !res.IsError {
			t.Errorf("batch_status of id %q: a success: %s", id, raw)
			continue
		}
		requireToolError(t, res, "404")
	}
}

// TestMCP_WaitEndsWhenItsClientGoes starts a batch_wait of a job that
// does not end, then the client gives up (its context ends, its HTTP
// request with it). The tool call ends with it: it does not poll the API
// for the rest of its 60 s, for a client that is gone.
func TestMCP_WaitEndsWhenItsClientGoes(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	b := setupWrapped(t, engine.Config{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("wait") {
				polls.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/gone")}}}, &sub)
	defer b.f.gate("/gate/gone").Open()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID, "seconds": 60}})
		done <- err
	}()
	testkit.WaitFor(t, "the wait polls", func() bool { return polls.Load() >= 2 })
	cancel()
	if err := testkit.Recv(t, done); err == nil {
		t.Fatal("the cancelled call answered")
	}
	at := polls.Load()
	ended := "tool=batch_wait job_id=" + sub.ID
	testkit.WaitFor(t, "the wait ends, or polls on", func() bool {
		return strings.Contains(b.Logs.String(), ended) || polls.Load() >= at+100
	})
	if n := polls.Load() - at; !strings.Contains(b.Logs.String(), ended) {
		t.Fatalf("the client went, and the tool call polled the API %d more times, and goes on", n)
	}
}

// TestMCP_CrowdKeepsKeysApart runs 12 MCP clients at once, half with
// alice's key and half with bob's, each submitting, waiting for and
// reading its own job: each sees its own job's content, and each key's
// list holds its own jobs only.
func TestMCP_CrowdKeepsKeysApart(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{JobsPerCaller: 16, JobsTotal: 64})
	keys := [2]string{"alice-key", "bob-key"}
	mine := [2]sync.Map{}
	var wg sync.WaitGroup
	for i := range 12 {
		cs, _ := b.connect(t, keys[i%2])
		wg.Go(func() {
			u := b.url("/crowd/" + strconv.Itoa(i))
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_submit",
				Arguments: map[string]any{"targets": []any{map[string]any{"url": u}}}})
			if err != nil || res.IsError {
				t.Errorf("client %d submit: %v %s", i, err, textOf(res))
				return
			}
			raw, _ := json.Marshal(res.StructuredContent)
			var sub mcpserver.Submitted
			_ = json.Unmarshal(raw, &sub)
			mine[i%2].Store(sub.ID, true)
			if res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID}}); err != nil || res.IsError {
				t.Errorf("client %d wait: %v %s", i, err, textOf(res))
				return
			}
			res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_result", Arguments: map[string]any{"id": sub.ID, "idx": 0}})
			if err != nil || res.IsError || textOf(res) != enginetest.Content(u) {
				t.Errorf("client %d result: %v %q", i, err, textOf(res))
			}
		})
	}
	wg.Wait()
	for k, key := range keys {
		cs, _ := b.connect(t, key)
		var list mcpserver.JobList
		call(t, cs, "batch_list", map[string]any{"limit": 100}, &list)
		if len(list.Jobs) != 6 {
			t.Fatalf("%s lists %d jobs, want its 6", key, len(list.Jobs))
		}
		for _, j := range list.Jobs {
			if _, ok := mine[k].Load(j.ID); !ok {
				t.Fatalf("%s lists job %s, not its own", key, j.ID)
			}
		}
	}
}

// TestMCP_LogsCarryNoKeyGivenAsID: an agent that passes its API key (or
// another secret shaped like a word) as a job id gets a 404, and the log
// line of the call does not hold it: only an id of the API's own shape is
// logged.
func TestMCP_LogsCarryNoKeyGivenAsID(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	cs, _ := b.connect(t, "alice-key")
	for _, tool := range []string{"batch_status", "batch_wait", "batch_cancel"} {
		requireToolError(t, call(t, cs, tool, map[string]any{"id": "alice-key"}, nil), "404")
		requireToolError(t, call(t, cs, tool, map[string]any{"id": "sk_live_51HxQ2eK9s3cret"}, nil), "404")
	}
	requireToolError(t, call(t, cs, "batch_result", map[string]any{"id": "alice-key", "idx": 0}, nil), "404")
	testkit.RequireNoneOf(t, b.Logs.String(), "alice-key", "sk_live_51HxQ2eK9s3cret")
}

// TestMCP_WaitIsBoundedUnderAShortMaxWait: a server whose MCP Options
// MaxWait is under a second (to keep within an API whose ?wait= cap is
// that short) still bounds batch_wait: a wait without seconds answers with
// the job still running, it does not wait until the job ends.
func TestMCP_WaitIsBoundedUnderAShortMaxWait(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	b := setupWith(t, engine.Config{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("wait") {
				polls.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}, mcpserver.Options{MaxWait: 500 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/short")}}}, &sub)
	defer b.f.gate("/gate/short").Open()
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	// 500 ms in polls of 20 ms is about 25 polls; 200 polls is a wait
	// that does not end.
	var res *mcp.CallToolResult
	testkit.WaitFor(t, "the wait answers, or polls on", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return polls.Load() >= 200
		}
	})
	if res == nil {
		b.f.gate("/gate/short").Open()
		res = testkit.Recv(t, done)
		t.Fatalf("batch_wait went on past its 500 ms bound (%d polls) until the job ended: %s", polls.Load(), textOf(res))
	}
	var job mcpserver.Job
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &job); err != nil || res.IsError || job.Status == "done" {
		t.Fatalf("wait: %s %+v", textOf(res), job)
	}
	// seconds 1 is the bound, 500 ms; 2 is past it, and the error says so.
	if res = call(t, cs, "batch_wait", map[string]any{"id": sub.ID, "seconds": 1}, &job); res.IsError || job.Status == "done" {
		t.Fatalf("wait of seconds 1: %s %+v", textOf(res), job)
	}
	if text := requireToolError(t, call(t, cs, "batch_wait", map[string]any{"id": sub.ID, "seconds": 2}, nil), "400"); !strings.Contains(text, "from 1 to 1") {
		t.Fatalf("seconds 2: %q; want the range 1 to 1", text)
	}
}

// TestMCP_ServeStdioRefusesWhatItsClientRefuses: a server URL with user
// info, a query or a fragment, or a key with a space or a control
// character, cannot make a single API call (the Go client refuses them):
// ServeStdio refuses them at once with a clear error, rather than serve
// tools each of which answers "401 unauthorized".
func TestMCP_ServeStdioRefusesWhatItsClientRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, key string }{
		{"http://user:pw@127.0.0.1:1", "k"},
		{"http://127.0.0.1:1/?x=1", "k"},
		{"http://127.0.0.1:1/#frag", "k"},
		{"http://127.0.0.1:1", "alice key"},
		{"http://127.0.0.1:1", "key\n"},
	} {
		err := mcpserver.ServeStdio(context.Background(), tc.url, tc.key, nil, io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard}, mcpserver.Options{})
		if err == nil {
			t.Errorf("server %q key %q: served", tc.url, tc.key)
		}
	}
}

// TestMCP_EndWaitsAnswersLaterWaitsAtOnce: once EndWaits has been called
// (the server is stopping), a batch_wait that starts after answers with
// the job as it stands, without polling for its seconds.
func TestMCP_EndWaitsAnswersLaterWaitsAtOnce(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	b := setupWrapped(t, engine.Config{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("wait") {
				polls.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/later")}}}, &sub)
	defer b.f.gate("/gate/later").Open()
	b.mcp.EndWaits()
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID, "seconds": 60}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
		}
		done <- res
	}()
	var res *mcp.CallToolResult
	testkit.WaitFor(t, "the wait answers, or polls on", func() bool {
		select {
		case res = <-done:
			return true
		default:
			return polls.Load() >= 100
		}
	})
	if res == nil {
		b.f.gate("/gate/later").Open()
		res = testkit.Recv(t, done)
		t.Fatalf("a wait after EndWaits polled %d times: %s", polls.Load(), textOf(res))
	}
	var job mcpserver.Job
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &job); err != nil || res.IsError || job.ID != sub.ID || job.Status == "done" {
		t.Fatalf("wait after EndWaits: %s %+v", textOf(res), job)
	}
}

// TestMCP_ResultMessageBoundedWhateverTheContent reads pages of results
// made of the characters JSON escapes the most (control characters and
// '<', six bytes each as \u00XX): each MCP message is still at most about
// a page (the bound TestMCP_ResultOf16MiBReadInPages holds a 16 MiB
// result of mixed text to: twice a page and its envelope), not six times
// one.
func TestMCP_ResultMessageBoundedWhateverTheContent(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	for _, tc := range []struct{ name, unit string }{{"control", "\x01"}, {"angle", "<"}} {
		cs, rt := b.connect(t, "alice-key")
		u := b.url("/content/escapes-" + tc.name)
		b.f.contents.Store(u, strings.Repeat(tc.unit, 1<<20))
		var sub mcpserver.Submitted
		call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": u}}}, &sub)
		call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, nil)
		rt.maxBody.Store(0)
		var p mcpserver.ResultPage
		res := call(t, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0}, &p)
		if res.IsError || p.PageBytes > mcpserver.MaxPageBytes {
			t.Fatalf("%s: %s %+v", tc.name, textOf(res)[:min(80, len(textOf(res)))], p)
		}
		if m := rt.maxBody.Load(); m > 2*mcpserver.MaxPageBytes+4096 {
			t.Errorf("%s: a page of %d bytes came in an MCP message of %d bytes", tc.name, p.PageBytes, m)
		}
	}
}

// TestMCP_StdioWaitEndsWhenItsClientCancels: over stdio (a session that
// lasts), a client that cancels its batch_wait (notifications/cancelled)
// ends the tool call: it stops polling the API.
func TestMCP_StdioWaitEndsWhenItsClientCancels(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	b := setupWrapped(t, engine.Config{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("wait") {
				polls.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	defer b.f.gate("/gate/stdio-gone").Open()
	cin, sout := io.Pipe()
	sin, cout := io.Pipe()
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- mcpserver.ServeStdio(sctx, b.srv.URL, "alice-key", nil, sin, sout,
			mcpserver.Options{PollEvery: 20 * time.Millisecond, Log: b.Log})
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.IOTransport{Reader: cin, Writer: cout}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sub mcpserver.Submitted
	call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": b.url("/gate/stdio-gone")}}}, &sub)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": sub.ID, "seconds": 60}})
		done <- err
	}()
	testkit.WaitFor(t, "the wait polls", func() bool { return polls.Load() >= 2 })
	cancel()
	if err := testkit.Recv(t, done); err == nil {
		t.Fatal("the cancelled call answered")
	}
	at := polls.Load()
	ended := "tool=batch_wait job_id=" + sub.ID
	testkit.WaitFor(t, "the wait ends, or polls on", func() bool {
		return strings.Contains(b.Logs.String(), ended) || polls.Load() >= at+100
	})
	if n := polls.Load() - at; !strings.Contains(b.Logs.String(), ended) {
		t.Fatalf("the client cancelled, and the tool call polled the API %d more times, and goes on", n)
	}
	_ = cs.Close()
	stop()
	if err := testkit.Recv(t, served); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
}
