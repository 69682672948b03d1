package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/mcpserver"
)

// TestAdv37_JobTextEscapesNoHTML: the text content of batch_status,
// batch_wait, batch_list and batch_submit (the JSON a model reads) writes
// a URL's "<", ">" and "&" as they are, as the README says of every MCP
// message; today the job's text holds "\u003cb\u003e" (only batch_result
// is checked by TestMCP_NoAnswerEscapesHTML, and its checkUnescaped drops
// every "\\u003c" before it looks, which is how an escape inside a JSON
// text reads on the wire).
func TestAdv37_JobTextEscapesNoHTML(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	u := b.url("/content/x?q=<b>&c=1")
	b.f.contents.Store(u, "page")
	cs, _ := b.connect(t, "alice-key")
	var sub mcpserver.Submitted
	res := call(t, cs, "batch_submit", map[string]any{"targets": []any{map[string]any{"url": u}}}, &sub)
	texts := map[string]string{"batch_submit": textOf(res)}
	texts["batch_wait"] = textOf(call(t, cs, "batch_wait", map[string]any{"id": sub.ID}, nil))
	texts["batch_status"] = textOf(call(t, cs, "batch_status", map[string]any{"id": sub.ID}, nil))
	texts["batch_list"] = textOf(call(t, cs, "batch_list", map[string]any{}, nil))
	for tool, text := range texts {
		for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if strings.Contains(text, esc) {
				t.Errorf("%s: its text escapes HTML (%s): %s", tool, esc, text)
			}
		}
	}
	if !strings.Contains(texts["batch_status"], `q=<b>&c=1`) {
		t.Errorf("batch_status: the URL is not in its text as it is: %s", texts["batch_status"])
	}
}
