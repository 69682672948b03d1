package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
)

// encodingJSON is what encoding/json writes for v with SetEscapeHTML(false),
// as the answers were written before they were appended by hand, without
// Encode's trailing newline.
func encodingJSON(t testing.TB, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// jsonStringSeeds are strings that take each branch of appendJSONString,
// and its neighbours.
var jsonStringSeeds = []string{
	"", "a", "https://example.com/a?b=c&d=<e>#f", `"`, `\`, `\"`, "/", "'",
	"\x00", "\x01\x02\x03\x04\x05\x06\x07", "\b\f\n\r\t", "\x0b\x0e\x0f\x10\x1f", "\x1f\x20", "\x7f",
	"<script>&amp;</script>", "héllo", "日本語", "😀", "\u2027\u2028\u2029\u202a", "a\u2028b\u2029c",
	"\xff", "\xfe\xff", "a\xffb", "\xc3", "\xc3(", "\xe2\x80", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x82",
	"\xf0\x9f\x98", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\xc0\x80", "\xf4\x90\x80\x80", "\xef\xbf\xbd",
	"\x80", "\xbf", "x\xe2\x80\xa8\xff\x00\"", "retry later: 503", "fetch stopped: shutdown",
	strings.Repeat("a", 300) + "\n" + strings.Repeat("é", 100),
}

// FuzzAppendJSONString: appendJSONString writes every string byte for
// byte as encoding/json does with SetEscapeHTML(false), after whatever is
// already in the buffer.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := encodingJSON(t, s)
		if got := string(appendJSONString(nil, s)); got != want {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
		if got := string(appendJSONString([]byte("x,"), s)); got != "x,"+want {
			t.Fatalf("appendJSONString(x, %q) = %s, want x,%s", s, got, want)
		}
	})
}

// TestAppendJobHead: a job head and a target head, appended by hand, are
// what encoding/json writes for jobHead and targetHead: every field, each
// optional one absent and present, each status, numbers at their limits.
func TestAppendJobHead(t *testing.T) {
	t.Run("job", func(t *testing.T) {
		for _, tc := range []engine.Job{
			{},
			{ID: "0123456789abcdef0123456789abcdef", Status: engine.StatusQueued, TargetsTotal: 32, CreatedAt: 1700000000},
			{ID: "x", Status: engine.StatusFailed, Error: "shutdown", TargetsTotal: 65535, TargetsDone: 65535, TargetsFailed: 1, CreatedAt: -1},
			{ID: "a\"b", Status: engine.StatusPartial, Error: "bad <thing> & \u2028 \xff\n", TargetsTotal: -3, CreatedAt: math.MaxInt64},
			{Status: engine.StatusCancelled, CreatedAt: math.MinInt64, TargetsDone: math.MaxInt},
			{ID: "s", Status: engine.StatusRunning, CreatedAt: 1700000000, StartedAt: 1700000001},
			{ID: "e", Status: engine.StatusDone, CreatedAt: 1700000000, StartedAt: 1700000001, EndedAt: 1700000002},
			{ID: "o", Status: engine.StatusCancelled, CreatedAt: 1, EndedAt: math.MaxInt64, StartedAt: math.MinInt64},
			{ID: "d", Status: engine.StatusDone, CreatedAt: 1, StartedAt: 1, EndedAt: 2, Duration: 1234567 * time.Microsecond},
			{ID: "m", Status: engine.StatusDone, CreatedAt: 1, StartedAt: 1, EndedAt: 1, Duration: 1},
			{ID: "n", Status: engine.StatusDone, Duration: -5},
		} {
			want := encodingJSON(t, headOf(&tc))
			if got := string(appendJobHead(nil, &tc)) + "}"; got != want {
				t.Errorf("appendJobHead(%+v) = %s, want %s", tc, got, want)
			}
		}
	})
	t.Run("target", func(t *testing.T) {
		var cases []engine.TargetStatus
		for _, st := range []string{engine.TargetPending, engine.TargetRunning, engine.TargetDone, engine.TargetFailed} {
			for _, e := range []string{"", "retry later: 503", "internal error", "shutdown", "fetch stopped", "timeout", "a\"\\\x01\u2029\xff<>&"} {
				for _, hint := range []string{"", "check the URL", "\t\xc3"} {
					cases = append(cases, engine.TargetStatus{Idx: len(cases), URL: "https://example.com/" + e, Status: st, Error: e, Hint: hint})
				}
			}
		}
		cases = append(cases, engine.TargetStatus{Idx: -1}, engine.TargetStatus{Idx: math.MaxInt, URL: "\xff\xfe"})
		for _, d := range []time.Duration{-1, 1, time.Millisecond, time.Millisecond + 1, 90 * time.Second, math.MaxInt64} {
			cases = append(cases, engine.TargetStatus{Idx: len(cases), Status: engine.TargetDone, Duration: d})
		}
		for _, tc := range cases {
			want := encodingJSON(t, targetHeadOf("", &tc))
			if got := string(appendTargetHead(nil, "", &tc)) + "}"; got != want {
				t.Errorf("appendTargetHead(%+v) = %s, want %s", tc, got, want)
			}
		}
	})
}

// BenchmarkAppendJob is the JSON of a 32-target poll, appended by hand
// (append) and through encoding/json as it was (encoding/json).
func BenchmarkAppendJob(b *testing.B) {
	job := engine.Job{ID: "0123456789abcdef0123456789abcdef", Status: engine.StatusDone, TargetsTotal: 32, TargetsDone: 32, CreatedAt: 1700000000}
	targets := make([]engine.TargetStatus, 32)
	for i := range targets {
		targets[i] = engine.TargetStatus{Idx: i, URL: "https://example.com/large/page-" + strings.Repeat("x", i), Status: engine.TargetDone}
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bp := getBuf()
			buf := appendJobHead(*bp, &job)
			for i := range targets {
				buf = append(appendTargetHead(buf, job.Status, &targets[i]), '}')
			}
			*bp = buf
			putBuf(bp)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(jobHead{ID: job.ID, Status: job.Status, TargetsTotal: job.TargetsTotal, TargetsDone: job.TargetsDone, CreatedAt: job.CreatedAt})
			for i := range targets {
				t := &targets[i]
				_ = enc.Encode(targetHead{Idx: t.Idx, URL: t.URL, Status: t.Status, Error: t.Error, Hint: hintFor(job.Status, t)})
			}
		}
	})
}

// resultsRunner answers ResultJSON from a map (idx → bytes); nothing else.
type resultsRunner struct {
	runner
	results map[int][]byte
}

func (f resultsRunner) ResultJSON(_ string, idx int) ([]byte, bool) {
	res, ok := f.results[idx]
	return res, ok
}

// encodingJSONJob is a job's answer as writeJob wrote it through
// encoding/json before it appended by hand: the reference.
func encodingJSONJob(t *testing.T, job engine.Job, targets []engine.TargetStatus, results map[int][]byte) string {
	t.Helper()
	head := encodingJSON(t, headOf(&job))
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(head, "}") + `,"targets":[`)
	for i := range targets {
		if i > 0 {
			b.WriteByte(',')
		}
		tg := &targets[i]
		s := encodingJSON(t, targetHeadOf(job.Status, tg))
		if res := results[tg.Idx]; results != nil && tg.Status == engine.TargetDone && res != nil {
			s = strings.TrimSuffix(s, "}") + `,"result":` + string(res) + "}"
		}
		b.WriteString(s)
	}
	b.WriteString("]}\n")
	return b.String()
}

// TestHandler_WriteJob: a whole answer to a poll, with and without
// results, and one target's, are byte for byte what encoding/json wrote:
// targets of every status, with errors, hints (given and derived),
// characters that need escaping, an empty result; and again from a pooled
// buffer that held a longer answer before.
func TestHandler_WriteJob(t *testing.T) {
	job := engine.Job{ID: "0123456789abcdef0123456789abcdef", Caller: "alice", Status: engine.StatusPartial, Error: "a <b> & \"c\"",
		TargetsTotal: 6, TargetsDone: 4, TargetsFailed: 2, CreatedAt: 1700000000}
	targets := []engine.TargetStatus{
		{Idx: 0, URL: "https://example.com/?a=1&b=<2>", Status: engine.TargetDone},
		{Idx: 1, URL: "https://example.com/\u2028", Status: engine.TargetFailed, Error: "retry later: 503"},
		{Idx: 2, URL: "https://example.com/x", Status: engine.TargetFailed, Error: "HTTP 404 Not Found\n", Hint: "check the URL\t\xff"},
		{Idx: 3, URL: "https://example.com/empty", Status: engine.TargetDone},
		{Idx: 4, URL: "https://example.com/run", Status: engine.TargetRunning},
		{Idx: 5, URL: "https://example.com/pend", Status: engine.TargetPending},
	}
	results := map[int][]byte{0: []byte(`{"content":"<p>é</p>","meta":{"status":200}}`), 3: nil}
	h := &Handler{r: resultsRunner{results: results}, log: slog.New(slog.DiscardHandler)}
	for round := range 2 {
		for _, withResults := range []bool{false, true} {
			rec := httptest.NewRecorder()
			h.writeJob(rec, httptest.NewRequest(http.MethodGet, "/", nil), job, targets, withResults)
			want := encodingJSONJob(t, job, targets, nil)
			if withResults {
				want = encodingJSONJob(t, job, targets, results)
			}
			if got := rec.Body.String(); got != want {
				t.Errorf("round %d, results %v:\n got %s\nwant %s", round, withResults, got, want)
			}
		}
	}
	for _, tg := range targets {
		want := encodingJSON(t, targetHeadOf("", &tg))
		if res := results[tg.Idx]; tg.Status == engine.TargetDone && res != nil {
			want = strings.TrimSuffix(want, "}") + `,"result":` + string(res) + "}"
		}
		got := string(appendResult(appendTargetHead(nil, "", &tg), results[tg.Idx]))
		if tg.Status != engine.TargetDone {
			got = string(appendResult(appendTargetHead(nil, "", &tg), nil))
		}
		if got != want {
			t.Errorf("target %d:\n got %s\nwant %s", tg.Idx, got, want)
		}
	}
}
