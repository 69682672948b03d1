package mcpserver_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/mcpserver"
)

// TestAdv34_ToolCallLimitNotSmuggled: the per-caller bound on tool calls
// holds for every spelling of a tools/call the SDK runs. The bound reads
// the method with encoding/json (case-insensitive keys, whole body must
// parse) while the SDK decodes case-sensitively and only the first JSON
// value, so a call with trailing bytes or a second "Method" key is not
// counted by the bound and still runs.
func TestAdv34_ToolCallLimitNotSmuggled(t *testing.T) {
	t.Parallel()
	b := setupWith(t, engine.Config{}, nil, mcpserver.Options{MaxCallsPerCaller: 2})
	gate := b.f.gate("/gate/adv34")
	id, _, err := b.Runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: "https://example.com/gate/adv34"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(i+1, "batch_wait", `{"id":"`+id+`","seconds":60}`))
		}()
	}
	defer func() { gate.Open(); wg.Wait() }()
	testkit.WaitFor(t, "alice's two waits running", func() bool { return mcpserver.CallsRunning(b.mcp, "alice") == 2 })
	call := toolCall(3, "batch_list", `{}`)
	for name, body := range map[string]string{
		"plain":             call,
		"trailing garbage":  call + ` x`,
		"trailing object":   call + `{}`,
		"second Method key": strings.TrimSuffix(call, "}") + `,"Method":"ping"}`,
		"METHOD ping":       strings.TrimSuffix(call, "}") + `,"METHOD":"notifications/initialized"}`,
	} {
		rec := rawPost(b.mcp, nil, "alice-key", "2025-06-18", body)
		if rec.Code != http.StatusTooManyRequests {
			t.Errorf("%s: alice's third tool call beside her 2 running answered %d, want 429: %.200s", name, rec.Code, rec.Body)
		}
	}
}

// TestAdv34_SmuggledCallAnswerCounted: an MCP answer's bytes count in its
// caller's answer budget however the tool call is spelled. A tools/call
// with bytes after its JSON object runs (the SDK decodes the first JSON
// value) but the bound's check (encoding/json over the whole body) does
// not see a tools/call, so its answer is written uncounted: a caller who
// never reads its answers is still served.
func TestAdv34_SmuggledCallAnswerCounted(t *testing.T) {
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
		rawPost(h, w, "alice-key", "2025-06-18", toolCall(1, "batch_list", `{}`)+" x")
	}()
	testkit.RequireClosed(t, w.entered)
	held := budget.of("alice")
	close(w.release)
	testkit.RequireClosed(t, done)
	if held < 64 {
		t.Fatalf("alice's unread answer to a tools/call followed by \" x\" holds %d bytes of her budget, want its size", held)
	}
}

// TestAdv34_BatchSpellingsRefused (holds): no spelling of a JSON-RPC
// batch runs a call: a batch of 1, of 0, nested, after any JSON
// whitespace, under every MCP-Protocol-Version (absent, old, new,
// garbage).
func TestAdv34_BatchSpellingsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	one := toolCall(1, "batch_list", `{}`)
	for _, body := range []string{"[" + one + "]", "[]", "[[" + one + "]]", "\t\r\n [" + one + "," + one + "]", "[" + one + "] x"} {
		for _, version := range []string{"", "2024-11-05", "2025-03-26", "2025-06-18", "garbage", "2099-01-01"} {
			rec := rawPost(b.mcp, nil, "alice-key", version, body)
			if rec.Code == http.StatusOK || strings.Contains(rec.Body.String(), `"jobs"`) {
				t.Errorf("batch %.40q, version %q: %d %.200s", body, version, rec.Code, rec.Body)
			}
		}
	}
	if n := strings.Count(b.Logs.String(), "tool call"); n != 0 {
		t.Errorf("%d tool calls logged: a refused batch runs none", n)
	}
}

// allocsOf is the bytes the process allocated while fn ran.
func allocsOf(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestAdv34_ResultPageAllocationFlat: issue 34's ranged reads: a page of
// batch_result costs about the page (goal: at most twice it), flat in the
// result's size. A page was read through GET /v1/batch/{id}/{idx}, which
// read the whole stored result (Runner.ResultJSON) to answer one 256 KiB
// page: page 0 of an 8 MiB result allocated 8 MiB more than page 0 of a
// 1 MiB one; now it asks for its range (?offset=&length=). (Not
// parallel: it counts the process's allocations.)
func TestAdv34_ResultPageAllocationFlat(t *testing.T) {
	b := setup(t, engine.Config{})
	pageAlloc := func(size int) uint64 {
		url := "https://example.com/content/adv34-" + itoa(size)
		b.f.contents.Store(url, strings.Repeat("a", size))
		id, _, err := b.Runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: url}})
		if err != nil {
			t.Fatal(err)
		}
		if rec := rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(1, "batch_wait", `{"id":"`+id+`","seconds":60}`)); !strings.Contains(rec.Body.String(), `\"status\":\"done\"`) {
			t.Fatalf("wait: %d %.300s", rec.Code, rec.Body)
		}
		// The least of three reads: what the process's other goroutines
		// allocate meanwhile (the store's, the runner's) only adds to a
		// read's count.
		least := uint64(math.MaxUint64)
		for range 3 {
			var rec *httptest.ResponseRecorder
			n := allocsOf(func() {
				rec = rawPost(b.mcp, nil, "alice-key", "2025-06-18", toolCall(2, "batch_result", `{"id":"`+id+`","idx":0,"page":1}`))
			})
			if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `"isError":true`) {
				t.Fatalf("page 1 of %d bytes: %d %.300s", size, rec.Code, rec.Body)
			}
			least = min(least, n)
		}
		return least
	}
	small, large := pageAlloc(1<<20), pageAlloc(8<<20)
	t.Logf("page 1 of a 1 MiB result: %d bytes allocated; of an 8 MiB result: %d", small, large)
	// The margin is two chunks' copies (1 MiB), not the whole result: a
	// store in memory copies each 512 KiB chunk it reads, once more when
	// the chunk was flushed from Badger's memtable to a table (seen: 540
	// KB more for the 8 MiB result, whose write may flush it); a page that
	// read the whole result would cost 7 MiB more.
	if large > small+4*mcpserver.MaxPageBytes {
		t.Errorf("a page of an 8 MiB result allocates %d bytes, %d more than a page of a 1 MiB one: a page reads the whole result", large, large-small)
	}
}
