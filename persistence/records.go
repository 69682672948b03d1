package persistence

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
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
	// Trace is the W3C trace context of the job's span (its trace id, its
	// span id, its flags), so that every span of its targets joins the
	// job's trace wherever and whenever they run; zero when the runner
	// traced nothing (no tracer, or the span was not recorded), and in
	// rows written before it existed.
	Trace TraceContext
}

// TraceContext is a span's W3C trace context (a traceparent's fields), as
// a job row keeps it. The zero value is none.
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// IsZero reports whether t is none.
func (t TraceContext) IsZero() bool { return t == TraceContext{} }

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
//	job:     4 | status:1 | settled:1 | total:2 | done:2 | failed:2 | created:8 | lease:8 | resultBytes:8 | key:32 | caller | error | started:8 | ended:8 [| trace:25]
//	specs:   v | count:2 | count × (url | options)     — target idx i is the i-th
//	outcome: 4 | status:1 | stored:8 | size:8 | took:8 | error | hint | inline
//	chunk:   the result's bytes from chunk × 512 KiB on: 512 KiB, the last chunk the rest (no version byte)
//
// Version 4 added the timings: a job's started and ended times (unix
// nanoseconds, 0 unknown) and an outcome's fetch time (took, nanoseconds).
// A version 4 job row may end with its trace context (trace id:16 | span
// id:8 | flags:1, see [TraceContext]); a row without it (written before
// it existed, or by a runner that traced nothing) reads as none.
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
	return jobFixedLen + 2*binary.MaxVarintLen32 + len(j.Caller) + len(j.Error) + jobTimesLen + jobTraceLen
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
	b = binary.BigEndian.AppendUint64(b, uint64(j.Ended))
	if !j.Trace.IsZero() {
		b = append(b, j.Trace.TraceID[:]...)
		b = append(b, j.Trace.SpanID[:]...)
		b = append(b, j.Trace.Flags)
	}
	return b
}

const (
	jobFixedLen = 3 + 6 + 24 + 32
	// jobTimesLen is the length of a version 4 job row's tail: started
	// and ended.
	jobTimesLen = 16
	// jobTraceLen is the length of a version 4 job row's optional trace
	// context.
	jobTraceLen = 16 + 8 + 1
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
		if len(rest) != jobTimesLen && len(rest) != jobTimesLen+jobTraceLen {
			return j, fmt.Errorf("job row: %w", ErrCorrupt)
		}
		j.Started = int64(binary.BigEndian.Uint64(rest))
		j.Ended = int64(binary.BigEndian.Uint64(rest[8:]))
		rest = rest[jobTimesLen:]
		if len(rest) == jobTraceLen {
			copy(j.Trace.TraceID[:], rest)
			copy(j.Trace.SpanID[:], rest[16:])
			j.Trace.Flags = rest[24]
			rest = rest[jobTraceLen:]
		}
	}
	if len(rest) != 0 {
		return j, fmt.Errorf("job row: %w", ErrCorrupt)
	}
	return j, nil
}
