package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Over stdio (ServeStdio) the one caller is the local agent: its tool
// calls are bounded as one caller's are over HTTP. A JSON-RPC batch is
// refused (the SDK would hold every answer of a batch until its last),
// and at most Options.MaxCallsPerCaller tool calls are in flight, from
// their request read to their answer written to stdout: a call past it is
// answered at once with a tool error (429, retry after 5 seconds), so an
// agent that stops reading stdout stops being served, and the answers
// held are at most that many (each at most a page, a job or a list).

// batchRefusal is the answer to a batch read over stdio.
var batchRefusal = func() []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{
		"code": jsonrpc.CodeInvalidRequest, "message": "JSON-RPC batches are refused",
		"data": map[string]string{"hint": "send one JSON-RPC message at a time (the 2025-06-18 revision of MCP removed batches)"},
	}})
	return append(b, '\n')
}()

// lockedWriter serialises the writes to stdout of the SDK and of
// noBatches. Each Write is one whole message.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

// noBatches reads stdin's JSON values one at a time and passes each on,
// a line each, but a batch (a JSON array), which it answers itself with
// batchRefusal. It reads in the caller's Read: no goroutine of its own.
type noBatches struct {
	in  io.ReadCloser
	dec *json.Decoder
	out io.Writer
	buf []byte
	err error
}

func newNoBatches(in io.ReadCloser, out io.Writer) *noBatches {
	return &noBatches{in: in, dec: json.NewDecoder(in), out: out}
}

func (n *noBatches) Read(p []byte) (int, error) {
	for len(n.buf) == 0 {
		if n.err != nil {
			return 0, n.err
		}
		var raw json.RawMessage
		if err := n.dec.Decode(&raw); err != nil {
			n.err = err
			continue
		}
		if bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("[")) {
			if _, err := n.out.Write(batchRefusal); err != nil {
				n.err = err
			}
			continue
		}
		n.buf = append(append(n.buf[:0], raw...), '\n')
	}
	k := copy(p, n.buf)
	n.buf = n.buf[k:]
	return k, nil
}

func (n *noBatches) Close() error { return n.in.Close() }

// boundedTransport is a transport whose connection has at most max tool
// calls in flight (see above).
type boundedTransport struct {
	mcp.Transport
	max int
}

func (t boundedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Connection: c, max: t.max, inFlight: map[jsonrpc.ID]int{}}, nil
}

// boundedConn counts the tool calls read and not yet answered.
type boundedConn struct {
	mcp.Connection
	max      int
	mu       sync.Mutex
	n        int
	inFlight map[jsonrpc.ID]int
}

// tooManyCalls is the tool error of a call past the bound.
func tooManyCalls(max int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"isError": true, "content": []map[string]string{{"type": "text",
		"text": "429 too many tool calls: at most " + strconv.Itoa(max) + " of your tool calls run at once, " +
			"their answers read; read their answers, then call again (retry after " + strconv.Itoa(int(retryAfter.Seconds())) + " seconds)"}}})
	return b
}

// Read passes every message on but a tool call past the bound, which it
// answers itself.
func (c *boundedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return nil, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || req.Method != "tools/call" || !req.ID.IsValid() {
			return msg, nil
		}
		c.mu.Lock()
		if c.n < c.max {
			c.n++
			c.inFlight[req.ID]++
			c.mu.Unlock()
			return msg, nil
		}
		c.mu.Unlock()
		if err := c.Connection.Write(ctx, &jsonrpc.Response{ID: req.ID, Result: tooManyCalls(c.max)}); err != nil {
			return nil, err
		}
	}
}

// Write writes msg; a tool call's answer leaves the bound once written.
func (c *boundedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if k := c.inFlight[resp.ID]; k > 0 {
			c.n--
			if k == 1 {
				delete(c.inFlight, resp.ID)
			} else {
				c.inFlight[resp.ID] = k - 1
			}
		}
		c.mu.Unlock()
	}
	return err
}
