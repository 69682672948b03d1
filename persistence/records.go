package persistence

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/sift/batch/engine/batchtype"
)

// Job statuses, defined once in package batchtype (see
// [batchtype.JobStatus]). Queued and running jobs are live; the others are
// terminal.
const (
	StatusQueued    = batchtype.StatusQueued
	StatusRunning   = batchtype.StatusRunning
	StatusDone      = batchtype.StatusDone
	StatusPartial   = batchtype.StatusPartial
	StatusFailed    = batchtype.StatusFailed
	StatusCancelled = batchtype.StatusCancelled
)

// Target statuses, defined once in package batchtype (see
// [batchtype.TargetState]). A target in flight is stored pending (it has no
// outcome row yet); only the runner's memory knows it is running.
const (
	TargetPending = batchtype.TargetPending
	TargetRunning = batchtype.TargetRunning
	TargetDone    = batchtype.TargetDone
	TargetFailed  = batchtype.TargetFailed
)

// JobRecord is a stored job.
type JobRecord struct {
	ID            string // 32 hex characters
	Caller        string // Caller.Name
	Key           [32]byte
	Status        string
	Error         string
	TargetsTotal  int
	TargetsDone   int // stored done or failed
	TargetsFailed int
	Created       int64 // unix nanoseconds
	Lease         int64 // unix nanoseconds
	ResultBytes   int64 // bytes of result JSON stored for this job
	// Started is when the job's first target was handed to a worker
	// (unix nanoseconds); 0 while queued, and in rows written before
	// format version 4 (unknown).
	Started int64
	// Ended is when the job became terminal (unix nanoseconds); 0 while
	// live, and in rows written before format version 4 (unknown).
	Ended int64
	// Settled is true once the job is terminal and has no target in flight:
	// from then on it may be swept or evicted.
	Settled bool
}

// TargetRecord is a stored target.
type TargetRecord struct {
	Idx     int
	URL     string
	Options []byte // the target's options, JSON
	Status  string
	// Result is the result, JSON; set once done by the reads that return
	// results ([Store.JobWithTargets], [Store.Targets], [Store.Target]),
	// nil from [Store.TargetStatuses]. A write stores it whole; it may be
	// at most [MaxResultSize] bytes.
	Result []byte
	Error  string
	Hint   string
	Stored int64 // unix nanoseconds when its outcome was stored; 0 while pending
	// Took is how long the fetch of the target took (its last try); 0
	// while pending, and in outcomes written before format version 4
	// (unknown).
	Took time.Duration
	// ResultSize is the stored result's length in bytes, set by every read
	// of a stored outcome, whether or not it returns the result. Writes
	// ignore it: they store len(Result).
	ResultSize int64
}

// MaxResultSize is the largest result (its JSON) the store takes: 32 MiB,
// in either mode. A write of a larger one fails, before anything is
// written, with an error wrapping [ErrTooLarge].
const MaxResultSize = 32 << 20

// Value encodings, format version 4. Integers are big-endian; strings and
// byte slices are a uvarint length then the bytes. Every row the store
// writes starts with the version it was written in; rows of versions 3 and
// 2 are read as well (1 had a row per target spec and no stored time).
//
//	job:     4 | status:1 | settled:1 | total:2 | done:2 | failed:2 | created:8 | lease:8 | resultBytes:8 | key:32 | caller | error | started:8 | ended:8
//	specs:   v | count:2 | count × (url | options)     — target idx i is the i-th
//	outcome: 4 | status:1 | stored:8 | size:8 | took:8 | error | hint | inline
//	chunk:   the result's bytes from chunk × 512 KiB on: 512 KiB, the last chunk the rest (no version byte)
//
// Version 4 added the timings: a job's started and ended times (unix
// nanoseconds, 0 unknown) and an outcome's fetch time (took, nanoseconds).
// A job row of version 2 or 3 ends at error, an outcome of version 3 has
// no took: they read as 0, unknown. Specs rows are the same in versions 2
// to 4 but for the version byte v. An outcome of version 3 or 4 holds the result's length (size) and, for
// a result of at most inlineResultMax (512) bytes, the result itself: the
// rest of the row (inline: exactly size bytes, or nothing). A longer result
// is in its own rows, the chunks (b keys, see keys.go): ceil(size / 512 KiB)
// of them, numbered from 0. So an outcome row stays small whatever its
// result, and a read of statuses never reads a result. A version 2 outcome
// held its result inline whatever its length:
//
//	outcome v2: 2 | status:1 | stored:8 | result | error | hint
//
// A job's specs are one value, however many targets it has: one Badger entry
// to write and to read instead of one per target. On disk a specs value over
// the value threshold goes to the value log; in memory Badger refuses a value
// over its threshold (1 MiB), so there a job's specs are capped at 1 MiB.
// Results are not: a chunk is half of that.
const (
	formatVersion = 4
	// formatVersion3 is the version before the timings (JobRecord.Started,
	// JobRecord.Ended, TargetRecord.Took).
	formatVersion3 = 3
	// formatVersion2 is the version before results moved to chunks.
	formatVersion2 = 2
	// inlineResultMax is the longest result kept in its outcome row: a
	// small result (an error page, a short answer) then costs one Badger
	// entry to write and none more to read, as before chunks. Measured
	// (engine benchmarks, 2 cores): with no result inline, the no-op
	// throughput halved (14 µs a target instead of 7: a chunk transaction
	// each); with 256, a Status of 32 results of ~330 bytes took 20% longer
	// than before chunks; with 512, neither moved. A done target's outcome
	// row stays under 1 KiB, the disk store's value threshold: in the LSM
	// tree, never in the value log.
	inlineResultMax = 512
	// resultChunkSize is the size of a result chunk: a value well under
	// the in-memory store's 1 MiB value cap and its transaction cap.
	resultChunkSize = 512 << 10
)

// knownVersion reports whether a row's version byte is one the store reads.
func knownVersion(v byte) bool {
	return v == formatVersion || v == formatVersion3 || v == formatVersion2
}

// chunkCount is how many chunks a result of size bytes is stored in: none
// when it is inline.
func chunkCount(size int64) int {
	if size <= inlineResultMax {
		return 0
	}
	return int((size + resultChunkSize - 1) / resultChunkSize)
}

// The status words' codes in a stored row: a word's index here. The
// order is the format's (rows on disk hold these bytes): never reorder,
// only append.
var jobStatusCodes = []string{"", StatusQueued, StatusRunning, StatusDone, StatusPartial, StatusFailed, StatusCancelled}
var targetStatusCodes = []string{"", TargetPending, TargetRunning, TargetDone, TargetFailed}

func statusCode(codes []string, s string) byte {
	for i, c := range codes {
		if c == s && i > 0 {
			return byte(i)
		}
	}
	return 0
}

func encodeJob(j *JobRecord) []byte {
	return appendJob(make([]byte, 0, jobSize(j)), j)
}

// jobSize is at least the length of j's row.
func jobSize(j *JobRecord) int {
	return jobFixedLen + 2*binary.MaxVarintLen32 + len(j.Caller) + len(j.Error) + jobTimesLen
}

func appendJob(b []byte, j *JobRecord) []byte {
	b = append(b, formatVersion, statusCode(jobStatusCodes, j.Status))
	if j.Settled {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(j.TargetsTotal))
	b = binary.BigEndian.AppendUint16(b, uint16(j.TargetsDone))
	b = binary.BigEndian.AppendUint16(b, uint16(j.TargetsFailed))
	b = binary.BigEndian.AppendUint64(b, uint64(j.Created))
	b = binary.BigEndian.AppendUint64(b, uint64(j.Lease))
	b = binary.BigEndian.AppendUint64(b, uint64(j.ResultBytes))
	b = append(b, j.Key[:]...)
	b = appendString(b, j.Caller)
	b = appendString(b, j.Error)
	b = binary.BigEndian.AppendUint64(b, uint64(j.Started))
	return binary.BigEndian.AppendUint64(b, uint64(j.Ended))
}

const (
	jobFixedLen = 3 + 6 + 24 + 32
	// jobTimesLen is the length of a version 4 job row's tail: started
	// and ended.
	jobTimesLen = 16
)

func decodeJob(id [idLen]byte, b []byte) (JobRecord, error) {
	var j JobRecord
	if len(b) < jobFixedLen || !knownVersion(b[0]) {
		return j, fmt.Errorf("job row: %w", ErrCorrupt)
	}
	if int(b[1]) == 0 || int(b[1]) >= len(jobStatusCodes) || b[2] > 1 {
		return j, fmt.Errorf("job row: %w", ErrCorrupt)
	}
	j.ID = hex.EncodeToString(id[:])
	j.Status = jobStatusCodes[b[1]]
	j.Settled = b[2] == 1
	j.TargetsTotal = int(binary.BigEndian.Uint16(b[3:]))
	j.TargetsDone = int(binary.BigEndian.Uint16(b[5:]))
	j.TargetsFailed = int(binary.BigEndian.Uint16(b[7:]))
	j.Created = int64(binary.BigEndian.Uint64(b[9:]))
	j.Lease = int64(binary.BigEndian.Uint64(b[17:]))
	j.ResultBytes = int64(binary.BigEndian.Uint64(b[25:]))
	copy(j.Key[:], b[33:65])
	rest := b[jobFixedLen:]
	var ok bool
	if j.Caller, rest, ok = readString(rest); !ok {
		return j, fmt.Errorf("job row: %w", ErrCorrupt)
	}
	if j.Error, rest, ok = readString(rest); !ok {
		return j, fmt.Errorf("job row: %w", ErrCorrupt)
	}
	if b[0] == formatVersion {
		if len(rest) != jobTimesLen {
			return j, fmt.Errorf("job row: %w", ErrCorrupt)
		}
		j.Started = int64(binary.BigEndian.Uint64(rest))
		j.Ended = int64(binary.BigEndian.Uint64(rest[8:]))
		rest = rest[jobTimesLen:]
	}
	if len(rest) != 0 {
		return j, fmt.Errorf("job row: %w", ErrCorrupt)
	}
	return j, nil
}

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
