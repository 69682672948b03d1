package mcpserver_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestSDKJSON_UnmarshalAsUpstream pins what the MCP SDK's
// internal/json.Unmarshal does with what a client sends, through
// jsonrpc.DecodeMessage (the decode of every message serve receives):
// internal/gosdk parses the bytes it is given instead of reading them
// through a Decoder (its PATCH.md), and each answer here is upstream
// v1.8.0's (this test passes on both): the first value is decoded and what
// follows it ignored, no value is io.EOF, a value cut short
// io.ErrUnexpectedEOF, a malformed one the Decoder's syntax error, fields
// match case-sensitively, and nesting deeper than 1000 is refused.
func TestSDKJSON_UnmarshalAsUpstream(t *testing.T) {
	const req = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"batch_status"}}`
	deep := `{"jsonrpc":"2.0","id":1,"method":"m","params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`
	notDeep := `{"jsonrpc":"2.0","id":1,"method":"m","params":` + strings.Repeat("[", 999) + strings.Repeat("]", 999) + `}`
	// Larger than the Decoder's 32 KiB buffer: it read it in steps.
	big := `{"jsonrpc":"2.0","id":1,"method":"m","params":{"text":"` + strings.Repeat("héllo \\\"q\\\" ", 8<<10) + `"}}`
	for _, c := range []struct {
		name, in string
		method   string // a request's method, when it decodes
		params   string // its params, when they matter
		err      string // the error's text, when it does not
		is       error  // the error it wraps, if any
		response bool   // a response with no result (a field's name not matched)
	}{
		{name: "request", in: req, method: "tools/call", params: `{"name":"batch_status"}`},
		{name: "spaces around", in: " \n\t" + req + " \r\n", method: "tools/call"},
		{name: "a second value after", in: req + `{"jsonrpc":"2.0","id":8,"method":"other"}`, method: "tools/call"},
		{name: "garbage after", in: req + `]]} not json`, method: "tools/call"},
		{name: "empty", in: ``, err: "unmarshaling jsonrpc message: EOF", is: io.EOF},
		{name: "only spaces", in: " \n\t ", err: "unmarshaling jsonrpc message: EOF", is: io.EOF},
		{name: "cut short", in: req[:40], err: "unmarshaling jsonrpc message: unexpected EOF", is: io.ErrUnexpectedEOF},
		{name: "cut short then spaces", in: req[:40] + "  ", err: "unmarshaling jsonrpc message: unexpected EOF", is: io.ErrUnexpectedEOF},
		{name: "trailing comma", in: `{"jsonrpc":"2.0","id":1,"method":"m",}`,
			err: `unmarshaling jsonrpc message: json: unexpected trailing comma after object field: }`},
		{name: "bad number then spaces", in: `{"jsonrpc":"2.0","id":1.  `,
			err: `unmarshaling jsonrpc message: json: expected digit but found ' ': 1.  `},
		{name: "not json", in: `tools/call`, err: `unmarshaling jsonrpc message: json: expected 'true' but found invalid token: tools/call`},
		{name: "fields match case-sensitively", in: `{"JSONRPC":"2.0","id":1,"Method":"m"}`, err: `invalid message version tag ""; expected "2.0"`},
		{name: "method case-sensitively", in: `{"jsonrpc":"2.0","id":1,"Method":"m","Result":1}`, response: true},
		{name: "deeper than 1000", in: deep, err: "unmarshaling jsonrpc message: json: exceeded maximum nesting depth of 1000"},
		{name: "1000 deep at most", in: notDeep, method: "m"},
		{name: "larger than 32 KiB", in: big, method: "m", params: big[strings.Index(big, `{"text"`) : len(big)-1]},
		{name: "a wrong type", in: `{"jsonrpc":2,"id":1,"method":"m"}`,
			err: `unmarshaling jsonrpc message: json: cannot unmarshal "2,\"id\":1,\"method\":\"m\"}" into Go struct field jsonrpc2.wireDecode.jsonrpc of type string`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			msg, err := jsonrpc.DecodeMessage(in)
			if c.err != "" || c.is != nil {
				if err == nil || (c.err != "" && err.Error() != c.err) || (c.is != nil && !errors.Is(err, c.is)) {
					t.Fatalf("DecodeMessage(%.60q) = %v, %v; want the error %q (wrapping %v)", c.in, msg, err, c.err, c.is)
				}
				return
			}
			if c.response {
				if r, ok := msg.(*jsonrpc.Response); err != nil || !ok || r.Result != nil || r.Error != nil {
					t.Fatalf("DecodeMessage(%.60q) = %#v, %v; want a response with no result", c.in, msg, err)
				}
				return
			}
			r, ok := msg.(*jsonrpc.Request)
			if err != nil || !ok || r.Method != c.method || (c.params != "" && string(r.Params) != c.params) {
				t.Fatalf("DecodeMessage(%.60q) = %#v, %v; want a request of method %q, params %.60q", c.in, msg, err, c.method, c.params)
			}
			// What it decoded is its own: the input's bytes may be reused.
			for i := range in {
				in[i] = 'x'
			}
			if c.params != "" && string(r.Params) != c.params {
				t.Fatalf("params changed with the input: %.60q", r.Params)
			}
		})
	}
}

// TestSDKJSON_DecodeAllocatesNoDecoderBuffer: decoding a small message
// allocates about the message, not a Decoder's 32 KiB buffer per decode
// (upstream v1.8.0: 65,968 B for this 136-byte message, which it decodes
// twice; internal/gosdk's PATCH.md). A tools/call decodes about 12 times.
// (Not parallel: it counts the process's allocations.)
func TestSDKJSON_DecodeAllocatesNoDecoderBuffer(t *testing.T) {
	msg := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"batch_result","arguments":{"id":"j-0123456789abcdef","idx":0,"page":3}}}`)
	const n = 200
	got := allocsOf(func() {
		for range n {
			if _, err := jsonrpc.DecodeMessage(msg); err != nil {
				t.Fatal(err)
			}
		}
	})
	per := got / n
	t.Logf("DecodeMessage of a %d-byte message: %d bytes allocated per call", len(msg), per)
	if per > 4<<10 {
		t.Errorf("DecodeMessage of a %d-byte message allocated %d bytes a call: a Decoder's buffer (32 KiB) per decode?", len(msg), per)
	}
}
