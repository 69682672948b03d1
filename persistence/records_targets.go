package persistence

// The encodings of a job's targets: its specs row and its outcome rows
// (the format is at the top of records.go), and the encoding helpers.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"time"
)

// encodeSpecs encodes the specs (URL and options) of a job's targets, which
// are in idx order; there are at most 0xffff.
func encodeSpecs(targets []TargetRecord) []byte {
	n := 3
	for i := range targets {
		n += 2*binary.MaxVarintLen32 + len(targets[i].URL) + len(targets[i].Options)
	}
	b := make([]byte, 0, n)
	b = append(b, formatVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(len(targets)))
	for i := range targets {
		b = appendString(b, targets[i].URL)
		b = appendBytes(b, targets[i].Options)
	}
	return b
}

// encodeOutcome encodes t's outcome for a write: its result's length is
// len(t.Result), and the result is inline if it is short enough.
func encodeOutcome(t *TargetRecord) []byte {
	return appendOutcome(make([]byte, 0, outcomeSize(t)), t)
}

// outcomeSize is at least the length of t's outcome.
func outcomeSize(t *TargetRecord) int {
	n := outcomeFixedLen + 2*binary.MaxVarintLen32 + len(t.Error) + len(t.Hint)
	if len(t.Result) <= inlineResultMax {
		n += len(t.Result)
	}
	return n
}

const (
	outcomeFixedLen = 2 + 8 + 8 + 8
	// outcomeFixedLen3 is outcomeFixedLen in version 3: no took.
	outcomeFixedLen3 = 2 + 8 + 8
)

func appendOutcome(b []byte, t *TargetRecord) []byte {
	return appendOutcomeOf(b, t, int64(len(t.Result)), t.Result)
}

// appendOutcomeOf appends t's outcome with a result of size bytes, of
// which result is the start (all of it when it is inline).
func appendOutcomeOf(b []byte, t *TargetRecord, size int64, result []byte) []byte {
	b = append(b, formatVersion, statusCode(targetStatusCodes, t.Status))
	b = binary.BigEndian.AppendUint64(b, uint64(t.Stored))
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = binary.BigEndian.AppendUint64(b, uint64(t.Took))
	b = appendString(b, t.Error)
	b = appendString(b, t.Hint)
	if size <= inlineResultMax {
		b = append(b, result[:size]...)
	}
	return b
}

// decodeSpecs decodes a job's target specs into pending TargetRecords, Idx
// 0 to n-1.
func decodeSpecs(b []byte) ([]TargetRecord, error) {
	var ts []TargetRecord
	err := scanSpecs(b, func(n int) { ts = make([]TargetRecord, n) }, func(i int, url, opts []byte) {
		ts[i] = specRecord(i, url, opts)
	})
	if err != nil {
		return nil, err
	}
	return ts, nil
}

// decodeSpecAt decodes target idx of a job's target specs into a pending
// TargetRecord; false if there is no target idx. The whole row is checked,
// but only target idx is copied.
func decodeSpecAt(b []byte, idx int) (TargetRecord, bool, error) {
	var t TargetRecord
	found := false
	err := scanSpecs(b, func(n int) { found = idx >= 0 && idx < n }, func(i int, url, opts []byte) {
		if i == idx {
			t = specRecord(i, url, opts)
		}
	})
	if err != nil {
		return TargetRecord{}, false, err
	}
	return t, found, nil
}

func specRecord(idx int, url, opts []byte) TargetRecord {
	t := TargetRecord{Idx: idx, URL: string(url), Status: TargetPending}
	if len(opts) > 0 {
		t.Options = append([]byte(nil), opts...)
	}
	return t
}

// scanSpecs checks a specs row: it calls count with the number of targets,
// then fn with each target's URL and options, which alias b; or it returns
// an error wrapping [ErrCorrupt], maybe after some calls of fn.
func scanSpecs(b []byte, count func(n int), fn func(i int, url, opts []byte)) error {
	if len(b) < 3 || !knownVersion(b[0]) {
		return fmt.Errorf("target specs: %w", ErrCorrupt)
	}
	n := int(binary.BigEndian.Uint16(b[1:]))
	rest := b[3:]
	if n > len(rest)/2 { // a spec is two bytes at least: refuse a count the row cannot hold before allocating for it
		return fmt.Errorf("target specs: %w", ErrCorrupt)
	}
	count(n)
	for i := range n {
		url, r, ok := readRaw(rest)
		if !ok {
			return fmt.Errorf("target specs: %w", ErrCorrupt)
		}
		opts, r, ok := readRaw(r)
		if !ok {
			return fmt.Errorf("target specs: %w", ErrCorrupt)
		}
		fn(i, url, opts)
		rest = r
	}
	if len(rest) != 0 {
		return fmt.Errorf("target specs: %w", ErrCorrupt)
	}
	return nil
}

// outcome is a decoded outcome row; its slices alias the row.
type outcome struct {
	status    string
	stored    int64
	took      time.Duration // the fetch's time; 0 before version 4
	size      int64         // the result's length
	msg, hint []byte        // the error and the hint
	inline    []byte        // the result when it is in the row; nil when chunked or empty
	chunked   bool          // the result is in chunk rows
}

// parseOutcome decodes an outcome row of version 3 or 2 without copying.
func parseOutcome(b []byte) (outcome, error) {
	var o outcome
	if len(b) < 2+8 || !knownVersion(b[0]) || b[1] == 0 || int(b[1]) >= len(targetStatusCodes) {
		return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
	}
	o.status, o.stored = targetStatusCodes[b[1]], int64(binary.BigEndian.Uint64(b[2:10]))
	var rest []byte
	var ok bool
	if b[0] == formatVersion2 {
		if o.inline, rest, ok = readRaw(b[10:]); !ok {
			return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
		o.size = int64(len(o.inline))
	} else {
		fixed := outcomeFixedLen
		if b[0] == formatVersion3 {
			fixed = outcomeFixedLen3
		}
		if len(b) < fixed {
			return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
		size := binary.BigEndian.Uint64(b[10:18])
		if size > MaxResultSize {
			return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
		if b[0] == formatVersion {
			took := binary.BigEndian.Uint64(b[18:26])
			if took > math.MaxInt64 {
				return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
			}
			o.took = time.Duration(took)
		}
		o.size, rest = int64(size), b[fixed:]
	}
	if o.msg, rest, ok = readRaw(rest); !ok {
		return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
	}
	if o.hint, rest, ok = readRaw(rest); !ok {
		return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
	}
	if b[0] == formatVersion2 {
		if len(rest) != 0 {
			return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
	} else if o.size <= inlineResultMax {
		if int64(len(rest)) != o.size {
			return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
		o.inline = rest
	} else {
		if len(rest) != 0 {
			return o, fmt.Errorf("target outcome: %w", ErrCorrupt)
		}
		o.chunked = true
	}
	if len(o.inline) == 0 {
		o.inline = nil
	}
	return o, nil
}

// fill sets t's outcome fields from o, and t.Result to a copy of an
// inline result when withResult (a chunked result is read apart).
func (o *outcome) fill(t *TargetRecord, withResult bool) {
	t.Status, t.Stored, t.ResultSize, t.Took = o.status, o.stored, o.size, o.took
	t.Error, t.Hint = string(o.msg), string(o.hint)
	t.Result = nil
	if withResult && o.inline != nil {
		t.Result = bytes.Clone(o.inline)
	}
}

// decodeOutcome decodes a target outcome into t, with its result if it is
// inline; a chunked result is left for readResult.
func decodeOutcome(t *TargetRecord, b []byte) error {
	o, err := parseOutcome(b)
	if err != nil {
		return err
	}
	o.fill(t, true)
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// readLen reads a length: a uvarint in its shortest form (a longer one
// would decode two different rows to the same record) that fits in b.
func readLen(b []byte) (n uint64, w int, ok bool) {
	n, w = binary.Uvarint(b)
	if w <= 0 || (w > 1 && b[w-1] == 0) || n > uint64(len(b)-w) {
		return 0, 0, false
	}
	return n, w, true
}

// readRaw reads a length and that many bytes, which alias b.
func readRaw(b []byte) ([]byte, []byte, bool) {
	n, w, ok := readLen(b)
	if !ok {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

func readString(b []byte) (string, []byte, bool) {
	n, w, ok := readLen(b)
	if !ok {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

// parseID decodes a job id: 32 lowercase hex characters.
func parseID(s string) ([idLen]byte, bool) {
	var id [idLen]byte
	if len(s) != 2*idLen {
		return id, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return id, false // ids are lowercase: "ABC…" is not a second name for "abc…"
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, false
	}
	return id, true
}
