//go:build linux

package main

// The MCP figures of issue 27 measured on a real serve process: a
// batch_status round trip against GET /v1/batch/{id} on the same job
// (BenchmarkServe_MCPStatusVsGET), and serve's peak RSS while an MCP
// session pages a 16 MiB result (BenchmarkServe_MCPResult16MiBPages).
// docs/PERFORMANCE.md ("MCP") holds the figures.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchMCP connects the official Go SDK's client to p's /mcp as key
// (streamable HTTP; serve runs it stateless), recording the largest
// answer body; the session is closed at b's cleanup.
func benchMCP(b *testing.B, p *serveProcess, key string) (*mcp.ClientSession, *countingKeyTransport) {
	b.Helper()
	rt := &countingKeyTransport{key: key}
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: p.base + "/mcp", HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
	if err != nil {
		b.Fatalf("connect /mcp: %v", err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs, rt
}

// benchMCPCall calls tool and fails the benchmark on any error.
func benchMCPCall(b *testing.B, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError {
		b.Fatalf("%s: %v %+v", tool, err, res)
	}
	return res
}

// BenchmarkServe_MCPStatusVsGET compares, on one done job of 8 targets of
// 1 KiB on a serve process (the built binary, loopback), an MCP
// batch_status call (the official Go SDK's client, streamable HTTP,
// stateless) with GET /v1/batch/{id} (net/http's client, a kept-alive
// connection), alternating in each op: ns/mcp and ns/get are each one's
// mean round trip, mcp/get their ratio.
func BenchmarkServe_MCPStatusVsGET(b *testing.B) {
	site := benchSite(b)
	p := startServeProcess(b)
	id := benchJob(b, p.c, p.base, "alice-secret-key", site.URL, 8, 1024, "mcpstatus")
	cs, _ := benchMCP(b, p, "alice-secret-key")
	status := func() { benchMCPCall(b, cs, "batch_status", map[string]any{"id": id}) }
	get := func() {
		if code, _, err := benchGet(p.c, p.base+"/v1/batch/"+id, "alice-secret-key"); err != nil || code != http.StatusOK {
			b.Fatalf("GET: %d %v", code, err)
		}
	}
	status()
	get()
	var tMCP, tGET time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		status()
		t1 := time.Now()
		get()
		t2 := time.Now()
		tMCP += t1.Sub(t0)
		tGET += t2.Sub(t1)
	}
	b.ReportMetric(float64(tMCP.Nanoseconds())/float64(b.N), "ns/mcp")
	b.ReportMetric(float64(tGET.Nanoseconds())/float64(b.N), "ns/get")
	b.ReportMetric(float64(tMCP)/float64(tGET), "mcp/get")
}

// BenchmarkServe_MCPResult16MiBPages reads a done target's 16 MiB result
// (text/plain, --max-body 16 MiB) from a serve process (the built binary)
// two ways, alternating which comes first from one op to the next: every
// page in turn through an MCP session's batch_result (mcp-), and whole in
// one GET /v1/batch/{id}/0 (get-). Before each read serve's peak RSS
// (VmHWM) is reset to its RSS (/proc/PID/clear_refs); after it, the peak
// over that RSS is read (the mean over the ops: mcp-peak-MiB,
// get-peak-MiB). msg-bytes is the largest MCP message the client read,
// pages the result's pages, mcp-ms and get-ms each read's mean time. Each
// page's call has the API read the stored result whole (its rule for
// GET /v1/batch/{id}/{idx}); the MCP server keeps one page of it.
func BenchmarkServe_MCPResult16MiBPages(b *testing.B) {
	site := benchSite(b)
	p := startServeProcess(b, "--max-body", strconv.Itoa(16<<20))
	id := benchJob(b, p.c, p.base, "alice-secret-key", site.URL, 1, 16<<20, "mcppages")
	cs, rt := benchMCP(b, p, "alice-secret-key")
	pages := 0
	readPages := func() {
		for page := 0; ; page++ {
			res := benchMCPCall(b, cs, "batch_result", map[string]any{"id": id, "idx": 0, "page": page})
			out, _ := res.StructuredContent.(map[string]any)
			if out == nil {
				b.Fatalf("page %d: no structured content", page)
			}
			if _, more := out["next_page"]; !more {
				pages = page + 1
				return
			}
		}
	}
	readWhole := func() {
		code, n, err := benchGet(p.c, fmt.Sprintf("%s/v1/batch/%s/0", p.base, id), "alice-secret-key")
		if err != nil || code != http.StatusOK || n < 16<<20 {
			b.Fatalf("GET target: %d %d %v", code, n, err)
		}
	}
	measure := func(read func()) (peak float64, took time.Duration) {
		rss := resetPeak(b, p.pid)
		t0 := time.Now()
		read()
		took = time.Since(t0)
		return float64(procStatusBytes(b, p.pid, "VmHWM")-rss) / (1 << 20), took
	}
	readPages() // warm: the store's caches, the session
	readWhole()
	rt.maxBody.Store(0)
	var mcpPeak, getPeak float64
	var mcpTook, getTook time.Duration
	b.ResetTimer()
	for i := range b.N {
		kinds := []func(){
			func() { pk, d := measure(readPages); mcpPeak += pk; mcpTook += d },
			func() { pk, d := measure(readWhole); getPeak += pk; getTook += d },
		}
		if i%2 == 1 {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		for _, k := range kinds {
			k()
		}
	}
	n := float64(b.N)
	b.ReportMetric(mcpPeak/n, "mcp-peak-MiB")
	b.ReportMetric(getPeak/n, "get-peak-MiB")
	b.ReportMetric(float64(mcpTook.Milliseconds())/n, "mcp-ms")
	b.ReportMetric(float64(getTook.Milliseconds())/n, "get-ms")
	b.ReportMetric(float64(rt.maxBody.Load()), "msg-bytes")
	b.ReportMetric(float64(pages), "pages")
}
