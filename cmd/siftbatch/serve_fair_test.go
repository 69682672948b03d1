package main

// Issue 34's attacks 1 and 2 on a real serve process, scaled down for the
// test tier; their full sizes are BenchmarkServe_MCPBatchRSS and
// BenchmarkServe_Bystander (bench_fair_test.go).

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// mcpPost POSTs body to serve's /mcp as key, as an MCP client does
// (version "" sends no MCP-Protocol-Version header), and returns the
// status and the body (its first 4 MiB).
func mcpPost(t testing.TB, c *http.Client, base, key, version, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if version != "" {
		req.Header.Set("MCP-Protocol-Version", version)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, string(b)
}

// mcpBatch is a JSON-RPC batch of n batch_result calls of target 0 of
// job id.
func mcpBatch(n int, id string) string {
	calls := make([]string, n)
	for i := range calls {
		calls[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"batch_result","arguments":{"id":%q,"idx":0}}}`, i+1, id)
	}
	return "[" + strings.Join(calls, ",") + "]"
}

// TestServe_MCPBatchRefused (issue 34, attack 1): one POST to /mcp of
// many tool calls, a JSON-RPC batch, is refused (400) before any call
// runs, whatever MCP-Protocol-Version says (the SDK alone took a batch
// without the header as the 2025-03-26 revision's, ran every call and
// held every answer: 1,000 batch_result calls on a 4 MB result grew serve
// by 625–761 MiB). One call a POST is served.
func TestServe_MCPBatchRefused(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	site := benchSite(t)
	p := startServeProcess(t)
	id := benchJob(t, p.c, p.base, "alice-secret-key", site.URL, 1, 1<<20, "mcpbatch")
	batch := mcpBatch(100, id)
	for _, version := range []string{"", "2025-03-26", "2025-06-18"} {
		code, body := mcpPost(t, p.c, p.base, "alice-secret-key", version, batch)
		if code != http.StatusBadRequest || !strings.Contains(body, "batch") {
			t.Errorf("a batch of 100 batch_result calls, MCP-Protocol-Version %q: %d %.300s", version, code, body)
		}
	}
	code, body := mcpPost(t, p.c, p.base, "alice-secret-key", "2025-06-18",
		fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"batch_result","arguments":{"id":%q,"idx":0}}}`, id))
	if code != http.StatusOK || !strings.Contains(body, `"pages":`) || strings.Contains(body, `"isError":true`) {
		t.Fatalf("one batch_result call: %d %.300s … %.300s", code, body, body[max(len(body)-300, 0):])
	}
}

// TestServe_ReadsFairByCaller (issue 34, attack 2): while alice floods
// reads of her 1 MiB result from 24 clients at once, bob's reads of his
// own small job are all served, and alice's reads past her queue's bound
// (--max-queued-reads 2) are answered 429 "reads queued" with
// Retry-After. (Before, reads took one first-come first-served queue
// with no share per caller and no 429: bob's read waited behind every
// one of alice's.)
func TestServe_ReadsFairByCaller(t *testing.T) {
	testkit.Long(t)
	t.Parallel()
	const flooders = 24
	site := benchSite(t)
	p := startServeProcess(t, "--max-queued-reads", "2")
	big := benchJob(t, p.c, p.base, "alice-secret-key", site.URL, 1, 1<<20, "flood")
	small := benchJob(t, p.c, p.base, "bob-long-secret-key", site.URL, 1, 256, "bystander")

	flood := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: flooders}, Timeout: testkit.Deadline}
	defer flood.CloseIdleConnections()
	var (
		stop             atomic.Bool
		served, refused  atomic.Int64
		other            sync.Map // other answers: status → body
		wg               sync.WaitGroup
		refusedWithRetry atomic.Bool
	)
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				req, _ := http.NewRequest(http.MethodGet, p.base+"/v1/batch/"+big+"/0", nil)
				req.Header.Set("Authorization", "Bearer alice-secret-key")
				resp, err := flood.Do(req)
				if err != nil {
					other.Store(0, err.Error())
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK:
					served.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(b), "reads queued"):
					refused.Add(1)
					if resp.Header.Get("Retry-After") != "" {
						refusedWithRetry.Store(true)
					}
				default:
					other.Store(resp.StatusCode, string(b))
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	testkit.WaitFor(t, "alice's reads past her queue answered 429 reads queued", func() bool { return refused.Load() > 0 })
	for i := range 10 {
		if code, n, err := benchGet(p.c, p.base+"/v1/batch/"+small, "bob-long-secret-key"); err != nil || code != http.StatusOK || n == 0 {
			t.Fatalf("bob's read %d beside alice's flood: %d, %d bytes, %v", i, code, n, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if !refusedWithRetry.Load() {
		t.Error("alice's 429 reads queued came without Retry-After")
	}
	if served.Load() == 0 {
		t.Error("none of alice's reads was served: her share is one read in turn, not none")
	}
	other.Range(func(k, v any) bool {
		t.Errorf("alice's flood got %v: %.200s", k, v)
		return true
	})
	t.Logf("alice: %d served, %d refused (reads queued)", served.Load(), refused.Load())
}
