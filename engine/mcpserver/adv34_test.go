package mcpserver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
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
