package fetcher

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// TestFilterProtocol_RoundTrip: a request and each kind of response come
// through their frames as they went in.
func TestFilterProtocol_RoundTrip(t *testing.T) {
	req := filterRequest{jq: ".a", grep: "x", maxOut: 1 << 20, body: []byte(`{"a":"x"}`)}
	var buf bytes.Buffer
	if err := writeRequest(&buf, req); err != nil {
		t.Fatal(err)
	}
	got, _, err := readRequest(&buf, nil)
	if err != nil || got.jq != req.jq || got.grep != req.grep || got.maxOut != req.maxOut || string(got.body) != string(req.body) {
		t.Fatalf("request %+v %v", got, err)
	}
	for _, resp := range []filterResponse{
		{content: `"x"`, jqOutputs: 1, grepLines: 1},
		{err: &engine.TargetError{Status: 422, Msg: "jq: boom", Hint: "check it"}},
	} {
		buf.Reset()
		if err := writeResponse(&buf, resp); err != nil {
			t.Fatal(err)
		}
		back, err := readResponse(&buf, req, 1<<20)
		if err != nil || back.content != resp.content || back.jqOutputs != resp.jqOutputs || back.grepLines != resp.grepLines ||
			(resp.err == nil) != (back.err == nil) || resp.err != nil && *resp.err != *back.err {
			t.Fatalf("response %+v → %+v %v", resp, back, err)
		}
	}
}

// TestFilterProtocol_RefusesGarbage: a response that breaks the frame's
// rules is errBadFrame, read without allocating what it claims; a
// truncated one is an error too.
func TestFilterProtocol_RefusesGarbage(t *testing.T) {
	req := filterRequest{jq: ".a", maxOut: 1 << 10, body: []byte(`{}`)}
	ok := func(kind uint32, a, b int64, n1, n2 uint32) []byte {
		var buf bytes.Buffer
		h := make([]byte, respHeader)
		copy(h, magicResponse)
		binary.BigEndian.PutUint32(h[4:], kind)
		binary.BigEndian.PutUint64(h[8:], uint64(a))
		binary.BigEndian.PutUint64(h[16:], uint64(b))
		binary.BigEndian.PutUint32(h[24:], n1)
		binary.BigEndian.PutUint32(h[28:], n2)
		buf.Write(h)
		buf.WriteString(strings.Repeat("x", int(min(n1+n2, 64))))
		return buf.Bytes()
	}
	for name, frame := range map[string][]byte{
		"bad magic":           append([]byte("XXXX"), ok(respOK, 1, -1, 1, 0)[4:]...),
		"unknown kind":        ok(7, 1, -1, 1, 0),
		"content over cap":    ok(respOK, 1, -1, 1<<31, 0),
		"no jq count":         ok(respOK, -1, -1, 1, 0),
		"grep count unasked":  ok(respOK, 1, 3, 1, 0),
		"text2 with content":  ok(respOK, 1, -1, 1, 1),
		"status not an error": ok(respError, 200, 0, 1, 1),
		"long message":        ok(respError, 422, 0, maxErrText+1, 0),
		"not UTF-8":           append(ok(respError, 422, 0, 1, 0)[:respHeader], 0xff),
	} {
		if _, err := readResponse(bytes.NewReader(frame), req, 1<<10); !errors.Is(err, errBadFrame) {
			t.Errorf("%s: %v, want errBadFrame", name, err)
		}
	}
	if _, err := readResponse(bytes.NewReader(ok(respOK, 1, -1, 10, 0)[:respHeader+3]), req, 1<<10); err == nil {
		t.Error("a cut response read")
	}
}

// TestFilterPool_KilledIdleProcessReplaced: a warm process killed from
// outside (kill -9) while idle never fails the next page: killed just
// before the page (it may not have ended yet), it does not acknowledge
// the request and the page goes to a new process; every idle process
// killed and ended, each is found dead, reaped, and the page goes to a
// new one.
func TestFilterPool_KilledIdleProcessReplaced(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	req := filterRequest{grep: "^b", maxOut: 1 << 20, body: []byte("a\nb\n")}
	ctx := context.Background()
	page := func(p *filterPool, what string) {
		t.Helper()
		if resp, err := p.run(ctx, req, 1<<20); err != nil || resp.content != "b" {
			t.Fatalf("%s: %q %v", what, resp.content, err)
		}
	}
	one := newFilterPool(1, DefaultFilterMemory)
	defer one.close()
	page(one, "the first page")
	for i := range 3 {
		pids := one.pids()
		if len(pids) != 1 {
			t.Fatalf("filter processes %v, want one warm", pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		page(one, fmt.Sprintf("page %d, right after the idle process was killed", i))
		if procState(pids[0]) != "" {
			t.Errorf("killed idle process %d not reaped (state %q)", pids[0], procState(pids[0]))
		}
	}

	two := newFilterPool(2, DefaultFilterMemory)
	defer two.close()
	a, err := two.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := two.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	two.put(a)
	two.put(b)
	for _, c := range []*filterProc{a, b} {
		if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*filterProc{a, b} {
		// Its last thread gone, its pipes closed.
		testkit.WaitFor(t, fmt.Sprintf("killed process %d's output hung up", c.cmd.Process.Pid), func() bool { return pipeHungUp(c.out) })
	}
	page(two, "the page after every idle process was killed")
	for _, c := range []*filterProc{a, b} {
		if pid := c.cmd.Process.Pid; slices.Contains(two.pids(), pid) || procState(pid) != "" {
			t.Errorf("killed idle process %d not reaped (state %q; live %v)", pid, procState(pid), two.pids())
		}
	}
}

// procState returns the state letter of process pid ("Z" a zombie), or ""
// when there is no such process.
func procState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	state, _, _ := strings.Cut(rest, " ")
	return state
}

// benchPage returns n bytes of JSON lines, {"n":I,"name":"item I"}.
func benchPage(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "{\"n\":%d,\"name\":\"item %d\"}\n", i, i)
	}
	return b.Bytes()[:n]
}

// BenchmarkFilter measures a page's filters in a warm filter process
// against the same filters in this process (as they ran before issue 23),
// side by side: one op runs the page both ways, in turns (which goes first
// alternates). A grep that keeps one line in ten, on pages of 4 KiB,
// 256 KiB and 4 MiB. It reports each way's p50 and p99 (ms-inproc-p50,
// ms-child-p50, …) and the overhead of the process, child minus in
// process, at p50 and p99 (ms-overhead-p50, ms-overhead-p99: the
// percentiles of the paired differences).
func BenchmarkFilter(b *testing.B) {
	for _, size := range []int{4 << 10, 256 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("grep/size=%dKiB", size>>10), func(b *testing.B) {
			req := filterRequest{grep: `"n":[0-9]*0,`, maxOut: DefaultMaxBody, body: benchPage(size)}
			p := newFilterPool(1, DefaultFilterMemory)
			defer p.close()
			want := filterPage(req)
			if got, err := p.run(context.Background(), req, 1<<30); err != nil || got.content != want.content || got.grepLines != want.grepLines {
				b.Fatalf("child %d lines, %v; in process %d lines", got.grepLines, err, want.grepLines)
			}
			var in, child, diff []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var dIn, dChild time.Duration
				runIn := func() {
					t0 := time.Now()
					filterPage(req)
					dIn = time.Since(t0)
				}
				runChild := func() {
					t0 := time.Now()
					if _, err := p.run(context.Background(), req, 1<<30); err != nil {
						b.Fatal(err)
					}
					dChild = time.Since(t0)
				}
				if i%2 == 0 {
					runIn()
					runChild()
				} else {
					runChild()
					runIn()
				}
				in, child, diff = append(in, dIn), append(child, dChild), append(diff, dChild-dIn)
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(percentile(in, 50)), "ms-inproc-p50")
			b.ReportMetric(ms(percentile(in, 99)), "ms-inproc-p99")
			b.ReportMetric(ms(percentile(child, 50)), "ms-child-p50")
			b.ReportMetric(ms(percentile(child, 99)), "ms-child-p99")
			b.ReportMetric(ms(percentile(diff, 50)), "ms-overhead-p50")
			b.ReportMetric(ms(percentile(diff, 99)), "ms-overhead-p99")
		})
	}
}

// BenchmarkFilterStart measures a filter process's start: one op starts a
// pool, filters a 4 KiB page in a new process (start, confinement, the
// ready frame, the page) and closes the pool (kill, reap).
func BenchmarkFilterStart(b *testing.B) {
	req := filterRequest{grep: `"n":[0-9]*0,`, maxOut: DefaultMaxBody, body: benchPage(4 << 10)}
	for i := 0; i < b.N; i++ {
		p := newFilterPool(1, DefaultFilterMemory)
		if _, err := p.run(context.Background(), req, 1<<30); err != nil {
			b.Fatal(err)
		}
		p.close()
	}
}

// percentile returns the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// TestReadReady_KnowsAProgramByItsWordsNotItsSpeed: a new filter process's
// first words decide: the ready word, however slowly it comes, is ready;
// another byte first is the program's main (errNotReady); an end first is
// errStartEnded; silence past the deadline is errSlowStart, never
// errNotReady.
func TestReadReady_KnowsAProgramByItsWordsNotItsSpeed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		words  []string // written one by one, each after the reader has taken the one before
		close  bool     // the writer ends after its words
		silent bool     // then says nothing, its reader's deadline past
		want   error
	}{
		{name: "ready", words: []string{magicReady}},
		{name: "ready a byte at a time", words: strings.Split(magicReady, "")},
		{name: "main prints", words: []string{"main started\n"}, want: errNotReady},
		{name: "main prints after the ready word's first byte", words: []string{magicReady[:1], "x"}, want: errNotReady},
		{name: "ends at once", close: true, want: errStartEnded},
		{name: "ends half way", words: []string{magicReady[:2]}, close: true, want: errStartEnded},
		{name: "silent", silent: true, want: errSlowStart},
		{name: "silent half way", words: []string{magicReady[:2]}, silent: true, want: errSlowStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			done := make(chan error, 1)
			if tc.silent {
				// The deadline: past at once, once the words were read.
				for _, word := range tc.words {
					if _, err := w.WriteString(word); err != nil {
						t.Fatal(err)
					}
				}
				_ = r.SetReadDeadline(time.Now())
				done <- readReady(r)
			} else {
				go func() { done <- readReady(r) }()
				for _, word := range tc.words {
					if _, err := w.WriteString(word); err != nil {
						t.Fatal(err)
					}
				}
				if tc.close {
					w.Close()
				}
			}
			if got := testkit.Recv(t, done); !errors.Is(got, tc.want) && got != tc.want {
				t.Fatalf("readReady: %v, want %v", got, tc.want)
			}
		})
	}
}
