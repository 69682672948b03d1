package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/mcpserver"
)

// keyTransport adds a Bearer key to each request.
type keyTransport string

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// mcpCall calls a tool and returns its result, its structured output
// decoded and its text.
func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (*mcp.CallToolResult, map[string]any, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	var out map[string]any
	if !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &out)
	}
	return res, out, text.String()
}

// TestMCP_ServeAndStdioCommand drives a real serve process with the
// official Go SDK's client: over streamable HTTP at /mcp (every tool), and
// through the siftbatch mcp command over stdio, each tool as an agent uses
// it (batch_submit and batch_wait: TestMCP_StdioWaitSendsProgress); another
// key sees none of the job, and a caller at its cap of live jobs gets 429
// as a tool error that says when to retry.
func TestMCP_ServeAndStdioCommand(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	release := make(chan struct{})
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	t.Cleanup(site.Close)
	p := startServeProcess(t, "--jobs-per-caller", "1")

	connectHTTP := func(key string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: p.base + "/mcp", HTTPClient: &http.Client{Transport: keyTransport(key)}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect /mcp: %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	alice := connectHTTP("alice-secret-key")
	tools, err := alice.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 6 {
		t.Fatalf("tools: %v %v", tools, err)
	}
	_, sub, _ := mcpCall(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": site.URL + "/a"}}})
	id, _ := sub["id"].(string)
	if id == "" {
		t.Fatalf("submit: %v", sub)
	}
	if _, job, _ := mcpCall(t, alice, "batch_wait", map[string]any{"id": id, "seconds": 30}); job["status"] != "done" {
		t.Fatalf("wait: %v", job)
	}
	if _, _, text := mcpCall(t, alice, "batch_result", map[string]any{"id": id, "idx": 0}); text != "page /a" {
		t.Fatalf("result %q", text)
	}

	// The caller's cap of live jobs (1): a second submit is 429.
	_, held, _ := mcpCall(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": site.URL + "/hold"}}})
	res, _, text := mcpCall(t, alice, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": site.URL + "/b"}}})
	if !res.IsError || !strings.Contains(text, "429") || !strings.Contains(text, "retry after 5 seconds") {
		t.Fatalf("submit at the cap: %v %q", res.IsError, text)
	}
	// The other tools over HTTP too: status, list, cancel of the held job.
	if _, job, _ := mcpCall(t, alice, "batch_status", map[string]any{"id": id}); job["status"] != "done" || job["targets_done"] != 1.0 {
		t.Fatalf("status over HTTP: %v", job)
	}
	if _, list, _ := mcpCall(t, alice, "batch_list", nil); len(list["jobs"].([]any)) != 2 {
		t.Fatalf("list over HTTP: %v", list)
	}
	if _, c, text := mcpCall(t, alice, "batch_cancel", map[string]any{"id": held["id"]}); c["cancelled"] != true {
		t.Fatalf("cancel over HTTP: %v %q", c, text)
	}
	close(release)
	if _, job, _ := mcpCall(t, alice, "batch_wait", map[string]any{"id": held["id"]}); job["status"] != "cancelled" {
		t.Fatalf("wait of the cancelled job: %v", job)
	}

	// The stdio command, with a key file that holds the key alone.
	dir := t.TempDir()
	connectStdio := func(key string) *mcp.ClientSession {
		keyFile := filepath.Join(dir, key)
		if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(clitest.Binary(t), "mcp", "--server", p.base, "--key-file", keyFile)
		cmd.Stderr = os.Stderr
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect siftbatch mcp: %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	stdio := connectStdio("alice-secret-key")
	if _, job, _ := mcpCall(t, stdio, "batch_status", map[string]any{"id": id}); job["status"] != "done" || job["targets_done"] != 1.0 {
		t.Fatalf("status over stdio: %v", job)
	}
	if _, _, text := mcpCall(t, stdio, "batch_result", map[string]any{"id": id, "idx": 0}); text != "page /a" {
		t.Fatalf("result over stdio %q", text)
	}
	if _, list, _ := mcpCall(t, stdio, "batch_list", nil); len(list["jobs"].([]any)) != 2 {
		t.Fatalf("list over stdio: %v", list)
	}
	if res, _, text := mcpCall(t, stdio, "batch_cancel", map[string]any{"id": id}); !res.IsError || !strings.Contains(text, "409") {
		t.Fatalf("cancel of an ended job: %q", text)
	}

	// Another key, either way, sees none of alice's job.
	for name, bob := range map[string]*mcp.ClientSession{"http": connectHTTP("bob-long-secret-key"), "stdio": connectStdio("bob-long-secret-key")} {
		if res, _, text := mcpCall(t, bob, "batch_status", map[string]any{"id": id}); !res.IsError || !strings.Contains(text, "404 job not found") {
			t.Errorf("%s: bob's status of alice's job: %q", name, text)
		}
		if _, list, _ := mcpCall(t, bob, "batch_list", nil); len(list["jobs"].([]any)) != 0 {
			t.Errorf("%s: bob lists %v", name, list)
		}
	}
}

// countingKeyTransport adds a Bearer key to each request and records the
// largest answer body read, in bytes (an MCP message, in stateless
// streamable HTTP).
type countingKeyTransport struct {
	key     string
	maxBody atomic.Int64
}

func (k *countingKeyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, max: &k.maxBody}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n   int64
	max *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	for m := c.max.Load(); c.n > m && !c.max.CompareAndSwap(m, c.n); m = c.max.Load() {
	}
	return n, err
}

// mcpBigContent is a result of nearly 16 MiB (serve's largest --max-body)
// of multi-byte runes and characters JSON escapes, so that a page cut
// that is not careful splits a rune.
var mcpBigContent = func() string {
	unit := strings.Repeat("héllo wörld ✓ 😀 — ", 40) + "\"quoted\"\n\t<tag> & \\\n"
	return strings.Repeat(unit, (16<<20)/len(unit))
}()

// TestMCP_ServeProcessPages16MiBResult reads a result of nearly 16 MiB
// from a real serve process through /mcp (the official Go SDK's client,
// streamable HTTP) with batch_result: every page at most MaxPageBytes,
// valid UTF-8, every page before the last full to within a rune, the
// pages joined the stored content, and no MCP message much larger than a
// page.
func TestMCP_ServeProcessPages16MiBResult(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, mcpBigContent)
	}))
	t.Cleanup(site.Close)
	p := startServeProcess(t, "--max-body", strconv.Itoa(16<<20))
	rt := &countingKeyTransport{key: "alice-secret-key"}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: p.base + "/mcp", HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect /mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	_, sub, _ := mcpCall(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": site.URL + "/big"}}})
	id, _ := sub["id"].(string)
	if _, job, text := mcpCall(t, cs, "batch_wait", map[string]any{"id": id, "seconds": 60}); job["status"] != "done" {
		t.Fatalf("wait: %v %s", job, text)
	}
	rt.maxBody.Store(0)
	var got strings.Builder
	pages := 0
	for page := 0; ; page++ {
		res, out, text := mcpCall(t, cs, "batch_result", map[string]any{"id": id, "idx": 0, "page": page})
		if res.IsError || len(text) > mcpserver.MaxPageBytes || !utf8.ValidString(text) || out["page_bytes"] != float64(len(text)) {
			t.Fatalf("page %d: error %v, %d bytes, valid UTF-8 %v, %v", page, res.IsError, len(text), utf8.ValidString(text), out["page_bytes"])
		}
		if out["content_bytes"] != float64(len(jsonText(mcpBigContent))) || out["page"] != float64(page) {
			t.Fatalf("page %d: content_bytes %v page %v", page, out["content_bytes"], out["page"])
		}
		got.WriteString(text)
		pages++
		next, more := out["next_page"]
		if !more {
			if out["pages"] != float64(pages) {
				t.Fatalf("read %d pages, the answer says %v", pages, out["pages"])
			}
			break
		}
		// A page before the last is full: as the API writes it in JSON (a
		// page is a range of the content's JSON text), within two moves of
		// an escape (5 bytes each) of the bound.
		if n := len(jsonText(text)); next != float64(page+1) || n < mcpserver.MaxPageBytes-10 || n > mcpserver.MaxPageBytes {
			t.Fatalf("page %d: next %v, %d bytes, %d as JSON: a page before the last is full", page, next, len(text), n)
		}
	}
	if got.String() != mcpBigContent {
		t.Fatalf("the pages joined are %d bytes, not the result's %d", got.Len(), len(mcpBigContent))
	}
	if m := rt.maxBody.Load(); m > 2*mcpserver.MaxPageBytes+4096 {
		t.Fatalf("the largest MCP message was %d bytes", m)
	}
	t.Logf("%d-byte result: %d pages; largest MCP message %d bytes", len(mcpBigContent), pages, rt.maxBody.Load())
}

// TestMCP_StdioWaitSendsProgress: batch_wait through the siftbatch mcp
// command (stdio) against a real serve process sends a progress
// notification where the job stands, then one as each target lands, with
// the client's progress token, before it answers the job done.
func TestMCP_StdioWaitSendsProgress(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	var gates [3]chan struct{}
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/gate/"))
		if err == nil && i >= 0 && i < len(gates) {
			select {
			case <-gates[i]:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	t.Cleanup(site.Close)
	t.Cleanup(func() {
		for _, g := range gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	})
	p := startServeProcess(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("alice-secret-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var progress testkit.Signal[*mcp.ProgressNotificationParams]
	progress.Init(t)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress.Signal(r.Params) },
	})
	cmd := exec.Command(clitest.Binary(t), "mcp", "--server", p.base, "--key-file", keyFile)
	cmd.Stderr = os.Stderr
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect siftbatch mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })

	var targets []any
	for i := range gates {
		targets = append(targets, map[string]any{"url": fmt.Sprintf("%s/gate/%d", site.URL, i)})
	}
	_, sub, _ := mcpCall(t, cs, "batch_submit", map[string]any{"targets": targets})
	id, _ := sub["id"].(string)
	if id == "" {
		t.Fatalf("submit: %v", sub)
	}
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "batch_wait", Arguments: map[string]any{"id": id, "seconds": 60}}
		params.SetProgressToken("stdio-wait")
		res, err := cs.CallTool(context.Background(), params)
		done <- answer{res, err}
	}()
	if n := progress.Wait(t); n.Progress != 0 || n.Total != 3 || n.ProgressToken != "stdio-wait" {
		t.Fatalf("first progress %+v", n)
	}
	for i := range gates {
		close(gates[i])
		n := progress.Wait(t)
		if n.Progress != float64(i+1) || n.Total != 3 || n.ProgressToken != "stdio-wait" ||
			!strings.Contains(n.Message, fmt.Sprintf("%d of 3 targets stored", i+1)) {
			t.Fatalf("progress after target %d: %+v", i, n)
		}
	}
	a := testkit.Recv(t, done)
	if a.err != nil || a.res.IsError {
		t.Fatalf("wait: %v %+v", a.err, a.res)
	}
	raw, _ := json.Marshal(a.res.StructuredContent)
	var job struct {
		Status      string `json:"status"`
		TargetsDone int    `json:"targets_done"`
	}
	if err := json.Unmarshal(raw, &job); err != nil || job.Status != "done" || job.TargetsDone != 3 {
		t.Fatalf("wait answered %s (%v)", raw, err)
	}
}

// jsonText is s's JSON text as the API writes it (no HTML escapes),
// without its quotes: what a page of batch_result counts.
func jsonText(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return b.String()[1 : b.Len()-2]
}
