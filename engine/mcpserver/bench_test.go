package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/mcpserver"
)

// BenchmarkMCP_StatusVsGET compares, on the same finished job of 8
// targets, an MCP batch_status call (streamable HTTP on loopback, the
// official Go SDK's client) with GET /v1/batch/{id} (net/http's client),
// alternating in each iteration: ns/mcp and ns/get are each one's mean
// round trip, and mcp/get their ratio.
func BenchmarkMCP_StatusVsGET(b *testing.B) {
	bb := setup(b, engine.Config{})
	cs, _ := bb.connect(b, "alice-key")
	var sub mcpserver.Submitted
	targets := []any{}
	for i := range 8 {
		targets = append(targets, map[string]any{"url": bb.url("/t/" + string(rune('a'+i)))})
	}
	call(b, cs, "batch_submit", map[string]any{"targets": targets}, &sub)
	var job mcpserver.Job
	call(b, cs, "batch_wait", map[string]any{"id": sub.ID}, &job)
	if job.Status != "done" {
		b.Fatalf("job %+v", job)
	}
	hc := &http.Client{}
	get := func() {
		req, _ := http.NewRequest(http.MethodGet, bb.srv.URL+"/v1/batch/"+sub.ID, nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("GET: %v %v", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	status := func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "batch_status", Arguments: map[string]any{"id": sub.ID}})
		if err != nil || res.IsError {
			b.Fatalf("batch_status: %v %v", res, err)
		}
	}
	get()
	status()
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
	hc.CloseIdleConnections()
}

// BenchmarkMCP_Result16MiBPage reads the pages of a 16 MiB result in turn
// through batch_result. msg-bytes is the largest MCP message (HTTP answer
// body) the client read, page-bytes the largest page; B/op counts every
// allocation of a page's call in the process: the API's read of the
// page's range (a store in memory copies each chunk it reads), the
// server's answer, and the SDK client's decoding of it (serve's own share
// is BenchmarkMCP_ResultPage's).
func BenchmarkMCP_Result16MiBPage(b *testing.B) {
	bb := setup(b, engine.Config{})
	cs, rt := bb.connect(b, "alice-key")
	var sub mcpserver.Submitted
	call(b, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": bb.url("/big/1")}}}, &sub)
	var job mcpserver.Job
	call(b, cs, "batch_wait", map[string]any{"id": sub.ID}, &job)
	var first mcpserver.ResultPage
	call(b, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0}, &first)
	rt.maxBody.Store(0)
	maxPage := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		var p mcpserver.ResultPage
		call(b, cs, "batch_result", map[string]any{"id": sub.ID, "idx": 0, "page": i % first.Pages}, &p)
		maxPage = max(maxPage, p.PageBytes)
	}
	b.ReportMetric(float64(rt.maxBody.Load()), "msg-bytes")
	b.ReportMetric(float64(maxPage), "page-bytes")
	b.ReportMetric(float64(first.Pages), "pages")
}
