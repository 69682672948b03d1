package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/testkit"
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
// official Go SDK's client: over streamable HTTP at /mcp, and through the
// siftbatch mcp command over stdio, each tool as an agent uses it; another
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
	alice := connectHTTP("alice-key")
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
	close(release)
	mcpCall(t, alice, "batch_wait", map[string]any{"id": held["id"]})

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
	stdio := connectStdio("alice-key")
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
	for name, bob := range map[string]*mcp.ClientSession{"http": connectHTTP("bob-key"), "stdio": connectStdio("bob-key")} {
		if res, _, text := mcpCall(t, bob, "batch_status", map[string]any{"id": id}); !res.IsError || !strings.Contains(text, "404 job not found") {
			t.Errorf("%s: bob's status of alice's job: %q", name, text)
		}
		if _, list, _ := mcpCall(t, bob, "batch_list", nil); len(list["jobs"].([]any)) != 0 {
			t.Errorf("%s: bob lists %v", name, list)
		}
	}
}
