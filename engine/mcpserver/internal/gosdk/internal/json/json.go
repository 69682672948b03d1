// Copyright 2025 The Go MCP SDK Authors. All rights reserved.
// Use of this source code is governed by the license
// that can be found in the LICENSE file.

// Package json provides internal JSON utilities.

package json

import (
	"bytes"
	"fmt"
	"io"

	"github.com/segmentio/encoding/json"
)

// defaultMaxDepth is the maximum JSON nesting depth accepted by [Unmarshal].
// Realistic MCP payloads nest only a handful of levels, so 1000 is far more
// than any legitimate message requires while keeping worst-case parse cost
// bounded.
const defaultMaxDepth = 1000

// errMaxDepthExceeded is returned by [Unmarshal] when the input nests deeper than [defaultMaxDepth].
var errMaxDepthExceeded = fmt.Errorf("json: exceeded maximum nesting depth of %d", defaultMaxDepth)

type Decoder struct {
	dec *json.Decoder
}

func NewDecoder(r io.Reader) *Decoder {
	dec := json.NewDecoder(r)
	dec.DontMatchCaseInsensitiveStructFields()
	return &Decoder{dec: dec}
}

func (d *Decoder) Decode(v any) error {
	return d.dec.Decode(v)
}

func Unmarshal(data []byte, v any) error {
	if err := checkMaxDepth(data, defaultMaxDepth); err != nil {
		return err
	}
	// Patched for siftbatch: what NewDecoder(bytes.NewReader(data)).Decode(v)
	// does, without a Decoder (whose first read allocates a 32 KiB buffer,
	// and a tools/call decodes about 12 times): the first JSON value of data
	// (trailing data ignored), checked whole, then parsed into v with the
	// Decoder's flags. Input with no value, or a first value that does not
	// parse, takes the Decoder so that the error is the Decoder's (io.EOF,
	// io.ErrUnexpectedEOF or its SyntaxError). PATCH.md.
	var first firstValue                                                                           // Patched for siftbatch
	if _, err := json.Parse(data, &first, json.DontMatchCaseInsensitiveStructFields); err != nil { // Patched for siftbatch
		return NewDecoder(bytes.NewReader(data)).Decode(v) // Patched for siftbatch
	} // Patched for siftbatch
	_, err := json.Parse(first, v, json.DontMatchCaseInsensitiveStructFields) // Patched for siftbatch
	return err                                                                // Patched for siftbatch
}

// firstValue is the first JSON value of the bytes parsed into it, not
// copied: segmentio's Parse hands an Unmarshaler the value's bytes once
// they parse (parseValue), as the Decoder's readValue finds them.
type firstValue []byte // Patched for siftbatch

// UnmarshalJSON keeps b. Patched for siftbatch.
func (f *firstValue) UnmarshalJSON(b []byte) error { *f = b; return nil } // Patched for siftbatch

// checkMaxDepth scans data once and reports [errMaxDepthExceeded] if the
// nesting of JSON objects and arrays exceeds maxDepth. It is a lightweight pass which
// tracks '{' and '[' against '}' and ']' while skipping over the contents of strings.
func checkMaxDepth(data []byte, maxDepth int) error {
	var (
		depth    int
		inString bool
		escaped  bool
	)
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}

		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > maxDepth {
				return errMaxDepthExceeded
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
