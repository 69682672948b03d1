package httpapi

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/sift/batch/engine"
)

// The answers to a poll are written by hand, not through encoding/json: a
// poll writes a job and each of its targets, and encoding/json's reflection
// and an Encode per target were about half of a poll's CPU. What is
// appended here is byte for byte what encoding/json writes for jobHead and
// targetHead with SetEscapeHTML(false) (FuzzAppendJSONString and
// TestAppendJob hold it to that).

// appendJSONString appends s to b as a JSON string, exactly as
// encoding/json does with SetEscapeHTML(false): '"', '\\' and the control
// characters escaped (\b \f \n \r \t by name, the others as \u00XX), each
// byte of invalid UTF-8 as \ufffd, U+2028 and U+2029 as \u2028 and \u2029;
// everything else, "<", ">" and "&" included, as it is.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJobHead appends job's JSON as encoding/json writes a jobHead, but
// open: without its closing "}", for the targets to follow.
func appendJobHead(b []byte, job *engine.Job) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, job.ID)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, job.Status)
	if job.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, job.Error)
	}
	b = append(b, `,"targets_total":`...)
	b = strconv.AppendInt(b, int64(job.TargetsTotal), 10)
	b = append(b, `,"targets_done":`...)
	b = strconv.AppendInt(b, int64(job.TargetsDone), 10)
	b = append(b, `,"targets_failed":`...)
	b = strconv.AppendInt(b, int64(job.TargetsFailed), 10)
	b = append(b, `,"created_at":`...)
	b = strconv.AppendInt(b, job.CreatedAt, 10)
	if job.StartedAt != 0 {
		b = append(b, `,"started_at":`...)
		b = strconv.AppendInt(b, job.StartedAt, 10)
	}
	if job.EndedAt != 0 {
		b = append(b, `,"ended_at":`...)
		b = strconv.AppendInt(b, job.EndedAt, 10)
	}
	if ms := durationMS(job.Duration); ms != 0 {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendInt(b, ms, 10)
	}
	return b
}

// appendTargetHead appends t's JSON, a target of a job of status job, as
// encoding/json writes a targetHead (its hint as hintFor gives it), but
// open: without its closing "}", for a result to follow or not.
func appendTargetHead(b []byte, job string, t *engine.TargetStatus) []byte {
	b = append(b, `{"idx":`...)
	b = strconv.AppendInt(b, int64(t.Idx), 10)
	b = append(b, `,"url":`...)
	b = appendJSONString(b, t.URL)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, t.Status)
	if t.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, t.Error)
	}
	if hint := hintFor(job, t); hint != "" {
		b = append(b, `,"hint":`...)
		b = appendJSONString(b, hint)
	}
	if ms := durationMS(t.Duration); ms != 0 {
		b = append(b, `,"duration_ms":`...)
		b = strconv.AppendInt(b, ms, 10)
	}
	return b
}

// bufs holds the buffers answers are appended in. A buffer that grew past
// maxPooledBuf (a job of thousands of targets) is left to the collector,
// so that the pool holds little.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledBuf = 64 << 10

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	*b = (*b)[:0]
	bufs.Put(b)
}
