package mcpserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestUnescaper_UnescapesHTMLOnly writes JSON through an unescaper cut at
// every byte, and with a flush at every byte: the three HTML escapes
// become their characters (unless a flush cut them: then they stay
// escapes), every other escape stays as it is, and the JSON decodes to the
// same value.
func TestUnescaper_UnescapesHTMLOnly(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`"\u003ch1\u003e \u0026"`, `"<h1> &"`},
		{`"\u003Ch1\u003E"`, `"<h1>"`},
		{`"\\u003c"`, `"\\u003c"`},
		{`"\\\u003c"`, `"\\<"`},
		{`"\u2028\u00e9\"\n\\"`, `"\u2028\u00e9\"\n\\"`},
		{`{"a":"\u0026","b":["\u003c"],"c":1}`, `{"a":"&","b":["<"],"c":1}`},
		{`"\u003"`, `"\u003"`}, // not JSON: passes as it is
		{`plain`, `plain`},
	}
	for _, tt := range tests {
		for cut := 0; cut <= len(tt.in); cut++ {
			var out bytes.Buffer
			u := &unescaper{w: &out}
			if n, err := u.Write([]byte(tt.in[:cut])); err != nil || n != cut {
				t.Fatalf("write: %d %v", n, err)
			}
			if _, err := u.Write([]byte(tt.in[cut:])); err != nil {
				t.Fatal(err)
			}
			if err := u.flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("%s cut at %d: %s, want %s", tt.in, cut, out.String(), tt.want)
			}
			// A flush at the cut: what it held is written as it was.
			var flushed bytes.Buffer
			u = &unescaper{w: &flushed}
			_, _ = u.Write([]byte(tt.in[:cut]))
			_ = u.flush()
			_, _ = u.Write([]byte(tt.in[cut:]))
			_ = u.flush()
			if json.Valid([]byte(tt.in)) {
				var a, b any
				if err := json.Unmarshal([]byte(tt.in), &a); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(flushed.Bytes(), &b); err != nil || !reflect.DeepEqual(a, b) {
					t.Errorf("%s flushed at %d: %s decodes to %v (%v), want %v", tt.in, cut, flushed.String(), b, err, a)
				}
			}
		}
	}
}
