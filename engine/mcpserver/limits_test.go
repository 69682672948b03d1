package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/mcpserver"
)

// rawCall is one JSON-RPC message (or a batch of them, body as given)
// POSTed to h as key, as a client of the 2025-06-18 revision sends it
// (version "" sends no MCP-Protocol-Version header). w, if not nil, takes
// the answer.
func rawPost(h http.Handler, w http.ResponseWriter, key, version, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if version != "" {
		req.Header.Set("MCP-Protocol-Version", version)
	}
	rec := httptest.NewRecorder()
	if w == nil {
		w = rec
	}
	h.ServeHTTP(w, req)
	return rec
}

// toolCall is the JSON-RPC message of one tools/call.
func toolCall(id int, tool, args string) string {
	return `{"jsonrpc":"2.0","id":` + itoa(id) + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
}

func itoa(n int) string { return strconv.Itoa(n) }

// heldBudget is the API's answer budget, through which the MCP server's
// holds go, counting the bytes each caller holds now.
type heldBudget struct {
	mcpserver.AnswerBudget
	mu   sync.Mutex
	held map[string]int
}

func (b *heldBudget) HoldAnswer(caller string, n int) func() {
	give := b.AnswerBudget.HoldAnswer(caller, n)
	b.mu.Lock()
	b.held[caller] += n
	b.mu.Unlock()
	return func() {
		give()
		b.mu.Lock()
		b.held[caller] -= n
		b.mu.Unlock()
	}
}

func (b *heldBudget) of(caller string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[caller]
}

// TestMCP_BatchRefused: a JSON-RPC batch is refused, 400, before any of
// its calls runs, with or without an MCP-Protocol-Version header (the
// SDK alone takes a batch that comes without one as the 2025-03-26
// revision's, and runs every call in it); one message a POST is served.
func TestMCP_BatchRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	var calls []string
	for i := range 50 {
		calls = append(calls, toolCall(i+1, "batch_list", `{}`))
	}
	batch := "\n [" + strings.Join(calls, ",") + "]"
	for _, version := range []string{"", "2025-03-26", "2025-06-18"} {
		rec := rawPost(b.mcp, nil, "alice-key", version, batch)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "batch") {
			t.Errorf("a batch of 50 calls, version %q: %d %.200s", version, rec.Code, rec.Body)
		}
	}
	if n := strings.Count(b.Logs.String(), "tool call"); n != 0 {
		t.Errorf("%d tool calls logged: a refused batch runs none", n)
	}
	rec := rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(1, "batch_list", `{}`))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"jobs"`) {
		t.Fatalf("one call: %d %.300s", rec.Code, rec.Body)
	}
}

// TestMCP_ToolCallsBoundPerCaller: at most MaxCallsPerCaller tool calls
// of one caller run at once: past it 429 with Retry-After, before the
// call runs; another caller's calls run meanwhile; once the caller's
// calls end, it is served again.
func TestMCP_ToolCallsBoundPerCaller(t *testing.T) {
	t.Parallel()
	b := setupWith(t, engine.Config{}, nil, mcpserver.Options{MaxCallsPerCaller: 2})
	gate := b.f.gate("/gate/limit")
	id, _, err := b.Runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/gate/limit"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(i+1, "batch_wait", `{"id":"`+id+`","seconds":60}`)).Code
		}()
	}
	testkit.WaitFor(t, "alice's two waits running", func() bool { return mcpserver.CallsRunning(b.mcp, "alice") == 2 })
	rec := rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(3, "batch_list", `{}`))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("alice's third call: %d, Retry-After %q: %.200s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := rawPost(b.mcp, nil, "bob-key", "2025-06-18", toolCall(1, "batch_list", `{}`)); rec.Code != http.StatusOK {
		t.Fatalf("bob's call beside alice's: %d %.200s", rec.Code, rec.Body)
	}
	// A message that is not a tool call is not counted.
	if rec := rawPost(b.mcp, nil, "alice-key", "2025-06-18", `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`); rec.Code != http.StatusOK {
		t.Fatalf("alice's tools/list: %d %.200s", rec.Code, rec.Body)
	}
	gate.Open()
	wg.Wait()
	for range 2 {
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("alice's wait: %d", c)
		}
	}
	if rec := rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(4, "batch_list", `{}`)); rec.Code != http.StatusOK {
		t.Fatalf("alice's call once hers ended: %d %.200s", rec.Code, rec.Body)
	}
}

// stuckWriter is a client's socket that takes nothing in: its Write
// blocks until release is closed; entered is closed when one begins.
type stuckWriter struct {
	header           http.Header
	entered, release chan struct{}
	once             sync.Once
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}
func (w *stuckWriter) Flush() {}

// TestMCP_UnreadAnswersCountInTheCallersBudget: an MCP answer being
// written counts in its caller's answer budget, the API's: once a
// caller's unread answers fill it, its tool calls are refused, 429, and
// its API reads too; another caller is served; once the answer is read,
// the caller is served again.
func TestMCP_UnreadAnswersCountInTheCallersBudget(t *testing.T) {
	t.Parallel()
	eb := enginetest.Setup(t, enginetest.OKFetch, engine.Config{})
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(eb.Runner, keys, httpapi.Options{MaxAnswerBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	budget := &heldBudget{AnswerBudget: api, held: map[string]int{}}
	h, err := mcpserver.NewHandler(api, keys, mcpserver.Options{Answers: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.EndWaits(); h.EndWaits() })
	w := &stuckWriter{header: http.Header{}, entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rawPost(h, w, "alice-key", "2025-06-18", toolCall(1, "batch_list", `{}`))
	}()
	testkit.RequireClosed(t, w.entered)
	if held := budget.of("alice"); held < 64 {
		t.Fatalf("alice's unread MCP answer holds %d bytes of her budget, want its size (at least 64)", held)
	}
	rec := rawPost(h, nil, "alice-key", "2025-06-18", toolCall(2, "batch_list", `{}`))
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), "answers unread") {
		t.Fatalf("alice's call with an answer unread: %d %.200s", rec.Code, rec.Body)
	}
	// The budget is the API's: her API reads are refused too.
	req := httptest.NewRequest(http.MethodGet, "/v1/batch", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	rec = httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("alice's API list with an MCP answer unread: %d %.200s", rec.Code, rec.Body)
	}
	if rec := rawPost(h, nil, "bob-key", "2025-06-18", toolCall(1, "batch_list", `{}`)); rec.Code != http.StatusOK {
		t.Fatalf("bob's call: %d %.200s", rec.Code, rec.Body)
	}
	close(w.release)
	testkit.RequireClosed(t, done)
	if held := budget.of("alice"); held != 0 {
		t.Fatalf("alice holds %d bytes once her answer is read", held)
	}
	if rec := rawPost(h, nil, "alice-key", "2025-06-18", toolCall(3, "batch_list", `{}`)); rec.Code != http.StatusOK {
		t.Fatalf("alice's call once her answer was read: %d %.200s", rec.Code, rec.Body)
	}
}
