package mcpserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/mcpserver"
)

// TestMCP_StdioBoundsCalls: over stdio, the one local caller is bounded
// as one caller is over HTTP: with MaxCallsPerCaller (3) batch_wait calls
// in flight, the next tool call is answered at once with a 429 tool
// error, a JSON-RPC batch is refused (its calls never run), and once the
// calls in flight are answered a call runs again.
func TestMCP_StdioBoundsCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	id, _, err := b.Runner.Submit(context.Background(), &engine.Caller{Name: "alice"}, "", []engine.Target{{URL: b.url("/gate/stdio")}})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- mcpserver.ServeStdio(t.Context(), b.srv.URL, "alice-key", nil, inR, nopWriteCloser{&out}, mcpserver.Options{MaxCallsPerCaller: 3})
	}()
	send := func(m string) {
		t.Helper()
		if _, err := io.WriteString(inW, m+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	answered := func(id int) bool { return bytes.Contains(out.Bytes(), []byte(fmt.Sprintf(`"id":%d,`, id))) }
	wait := func(n int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"batch_wait","arguments":{"id":"%s","seconds":60}}}`, n, id)
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	testkit.WaitFor(t, "the answer to initialize", func() bool { return answered(0) })
	for n := 1; n <= 3; n++ {
		send(wait(n))
	}
	// The three are counted as they are read, before the fourth: their
	// job is held, so none is answered meanwhile.
	send(wait(4))
	testkit.WaitFor(t, "the fourth call answered", func() bool { return answered(4) })
	got := out.Bytes()
	line := got[bytes.Index(got, []byte(`"id":4,`)):]
	line = line[:bytes.IndexByte(line, '\n')]
	if !bytes.Contains(line, []byte(`"isError":true`)) || !bytes.Contains(line, []byte("429 too many tool calls")) || !bytes.Contains(line, []byte("retry after 5 seconds")) {
		t.Fatalf("the call past the bound: %s", line)
	}
	for n := 1; n <= 3; n++ {
		if answered(n) {
			t.Fatalf("call %d answered while its job runs", n)
		}
	}
	send(`[` + wait(5) + `]`)
	testkit.WaitFor(t, "the batch refused", func() bool { return bytes.Contains(out.Bytes(), []byte("JSON-RPC batches are refused")) })
	b.f.gate("/gate/stdio").Open()
	testkit.WaitFor(t, "the three calls answered", func() bool { return answered(1) && answered(2) && answered(3) })
	send(wait(6))
	testkit.WaitFor(t, "a call after them answered", func() bool { return answered(6) })
	got = out.Bytes()
	line = got[bytes.Index(got, []byte(`"id":6,`)):]
	line = line[:bytes.IndexByte(line, '\n')]
	if bytes.Contains(line, []byte("too many tool calls")) || !bytes.Contains(line, []byte(`\"status\":\"done\"`)) {
		t.Fatalf("the call after the bound freed: %s", line)
	}
	if answered(5) {
		t.Fatalf("a call of the refused batch ran: %s", out.Bytes())
	}
	inW.Close()
	if err := testkit.Recv(t, done); err != nil {
		t.Fatal(err)
	}
}
