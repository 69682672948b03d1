package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// keptConns is a listener whose connections have a small kernel send
// buffer, and which hands each accepted connection, the server's side, to
// accepted (if it has room): a test can time one out as the server's
// WriteTimeout would, by setting its write deadline. With the default
// buffers (up to 4 MiB here, tcp_wmem) a whole answer could sit in the
// kernel and no Write would ever block on a client that does not read.
type keptConns struct {
	net.Listener
	accepted chan net.Conn
}

func (l keptConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
		select {
		case l.accepted <- c:
		default:
		}
	}
	return c, err
}

// keptServer serves h on keptConns.
func keptServer(t *testing.T, h http.Handler) (*httptest.Server, keptConns) {
	t.Helper()
	var l keptConns
	srv := newServer(t, h, func(s *httptest.Server) {
		l = keptConns{Listener: s.Listener, accepted: make(chan net.Conn, 64)}
		s.Listener = l
	})
	return srv, l
}

// stuckReader asks srv, as key, for path on a raw connection with a tiny
// receive buffer, reads the answer's head and nothing more, and returns
// the connection and the answer's status. A 200 answer larger than the
// kernel's buffers is then stuck in the middle, its handler blocked in a
// Write.
func stuckReader(t *testing.T, srv *httptest.Server, key, path string) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(1 << 10)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", path, key)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil) // its body is never read, nor closed: closing reads it
	if err != nil {
		t.Fatalf("stuck reader: %v", err)
	}
	return conn, resp.StatusCode
}

// getFrom GETs path from srv as key with a client of its own, and reads
// the whole answer.
func getFrom(t *testing.T, srv *httptest.Server, key, path string) response {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}, Timeout: testkit.Deadline}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	return send(t, client, req)
}

// wantAnswersUnread checks a 429 of the answer budget: Retry-After, and
// the hint to read the answers already asked for.
func wantAnswersUnread(t *testing.T, r response) {
	t.Helper()
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("got %d, want 429: %.200s", r.code, r.body)
	}
	wantError(t, r, http.StatusTooManyRequests, "answers unread")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if hint, _ := r.json(t)["hint"].(string); !strings.Contains(hint, "read them before asking for more") {
		t.Errorf("hint %q", hint)
	}
}

// TestAPI_AnswerBudgetRefusesStuckReaders: one caller's clients that ask
// for a 256 KiB result and never read it hold their answers; past its
// budget (MaxAnswerBytes 1 MiB: 3 such answers) its next reads of a result
// and of a job's results answer 429 at once with Retry-After and a hint,
// holding nothing more, while a small answer (a job, a list) still fits,
// and another caller's reads proceed. Its cancel is still answered.
// Once its connections close, what they held is given back: it reads
// again, and the budget keeps no entry for it.
func TestAPI_AnswerBudgetRefusesStuckReaders(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	b := setupWith(t, bigFetch, httpapi.Options{MaxAnswerBytes: budget})
	srv, _ := keptServer(t, b.handler)
	mine := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2")
	b.waitTerminal(t, mine)
	theirs := b.submit(t, "bob-key", "https://example.com/3")
	b.waitTerminal(t, theirs)
	one := getFrom(t, srv, "alice-key", "/v1/batch/"+mine+"/0")
	wantCode(t, one, http.StatusOK)
	perAnswer := len(one.body) // what such an answer reserves: the bytes it writes
	fits := budget / perAnswer

	var conns []net.Conn
	codes := map[int]int{}
	for range fits + 3 {
		conn, code := stuckReader(t, srv, "alice-key", "/v1/batch/"+mine+"/0")
		conns = append(conns, conn)
		codes[code]++
	}
	if codes[http.StatusOK] != fits || codes[http.StatusTooManyRequests] != 3 {
		t.Fatalf("%d stuck readers of %d B answers, budget %d B: answers %v, want %d × 200 and the rest 429", fits+3, perAnswer, budget, codes, fits)
	}
	held, callers := httpapi.AnswerBytesHeld(b.api, "alice")
	if held != int64(fits*perAnswer) || callers != 1 {
		t.Fatalf("alice holds %d B (budget %d, %d answers of %d B), %d callers hold anything", held, budget, fits, perAnswer, callers)
	}

	for _, path := range []string{"/v1/batch/" + mine + "/1", "/v1/batch/" + mine + "?results=1"} {
		wantAnswersUnread(t, getFrom(t, srv, "alice-key", path))
	}
	// A small answer still fits in what is left.
	for _, path := range []string{"/v1/batch/" + mine, "/v1/batch"} {
		wantCode(t, getFrom(t, srv, "alice-key", path), http.StatusOK)
	}
	// Another caller's reads proceed, whole.
	if r := getFrom(t, srv, "bob-key", "/v1/batch/"+theirs+"/0"); r.code != http.StatusOK || len(r.body) < 256<<10 {
		t.Fatalf("bob's result: %d, %d bytes", r.code, len(r.body))
	}
	if r := getFrom(t, srv, "bob-key", "/v1/batch/"+theirs+"?results=1"); r.code != http.StatusOK || !json.Valid(r.body) {
		t.Fatalf("bob's results: %d, valid JSON %v", r.code, json.Valid(r.body))
	}
	wantCode(t, getFrom(t, srv, "bob-key", "/v1/batch"), http.StatusOK)
	// A cancel is small: counted, never refused (409: the job has ended).
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/batch/"+mine, nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	wantError(t, send(t, http.DefaultClient, req), http.StatusConflict, "already finished")
	if now, _ := httpapi.AnswerBytesHeld(b.api, "alice"); now != held {
		t.Fatalf("alice holds %d B after her refused reads, %d before", now, held)
	}

	for _, c := range conns {
		c.Close()
	}
	testkit.WaitFor(t, "alice's closed connections to give their answers back", func() bool {
		_, callers := httpapi.AnswerBytesHeld(b.api, "alice")
		return callers == 0
	})
	if r := getFrom(t, srv, "alice-key", "/v1/batch/"+mine+"?results=1"); r.code != http.StatusOK || !json.Valid(r.body) || len(r.body) < 512<<10 {
		t.Fatalf("alice's results once her readers are gone: %d, %d bytes", r.code, len(r.body))
	}
}

// TestAPI_AnswerBudgetGivenBackOnTimeout: an answer stuck on a client
// that does not read holds its caller's budget until its connection ends:
// with MaxAnswerBytes 64 KiB, a 256 KiB result is served (the caller held
// nothing), and the caller's next reads, of a result, a job or a list,
// answer 429 meanwhile; once the stuck answer's write times out (its write
// deadline passes, as the server's WriteTimeout sets it), or its client
// closes the connection, the caller reads again.
func TestAPI_AnswerBudgetGivenBackOnTimeout(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"timeout", "close"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t, bigFetch, httpapi.Options{MaxAnswerBytes: 64 << 10})
			srv, l := keptServer(t, b.handler)
			mine := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2")
			b.waitTerminal(t, mine)

			conn, code := stuckReader(t, srv, "alice-key", "/v1/batch/"+mine+"/0")
			if code != http.StatusOK {
				t.Fatalf("the stuck reader's answer: %d", code)
			}
			serverSide := testkit.Recv(t, l.accepted) // the stuck reader's: the first connection
			for _, path := range []string{"/v1/batch/" + mine + "/1", "/v1/batch/" + mine, "/v1/batch"} {
				wantAnswersUnread(t, getFrom(t, srv, "alice-key", path))
			}

			if end == "timeout" {
				_ = serverSide.SetWriteDeadline(time.Now())
			} else {
				conn.Close()
			}
			var last response
			testkit.WaitFor(t, "alice's read to be answered once her stuck answer has ended", func() bool {
				last = getFrom(t, srv, "alice-key", "/v1/batch/"+mine+"/1")
				return last.code != http.StatusTooManyRequests
			})
			if last.code != http.StatusOK || len(last.body) < 256<<10 {
				t.Fatalf("alice's read: %d, %d bytes", last.code, len(last.body))
			}
			testkit.WaitFor(t, "alice's budget to be empty", func() bool {
				_, callers := httpapi.AnswerBytesHeld(b.api, "alice")
				return callers == 0
			})
		})
	}
}

// TestAPI_AnswerLargerThanBudgetServed: a caller that holds nothing is
// served an answer larger than its whole budget (MaxAnswerBytes 64 KiB;
// 256 KiB results): one target's result, and a job's results one at a
// time, whole.
func TestAPI_AnswerLargerThanBudgetServed(t *testing.T) {
	t.Parallel()
	b := setupWith(t, bigFetch, httpapi.Options{MaxAnswerBytes: 64 << 10})
	mine := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3")
	b.waitTerminal(t, mine)
	r := b.do(t, http.MethodGet, "/v1/batch/"+mine+"/2", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if len(r.body) < 256<<10 || !json.Valid(r.body) {
		t.Fatalf("the result: %d bytes, valid JSON %v", len(r.body), json.Valid(r.body))
	}
	r = b.do(t, http.MethodGet, "/v1/batch/"+mine+"?results=1", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	var job struct {
		Targets []struct {
			Result struct{ Content string } `json:"result"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(r.body, &job); err != nil || len(job.Targets) != 3 {
		t.Fatalf("the results: %v, %d targets", err, len(job.Targets))
	}
	for i, tg := range job.Targets {
		if len(tg.Result.Content) != 256<<10 {
			t.Fatalf("target %d: %d bytes of content", i, len(tg.Result.Content))
		}
	}
	if _, callers := httpapi.AnswerBytesHeld(b.api, "alice"); callers != 0 {
		t.Fatalf("%d callers hold answer bytes once every answer is out", callers)
	}
}

// TestAPI_AnswerBudgetResultsWaitOnceBegun: a ?results=1 answer whose
// status is out (its first result, small, fitted) and whose next result
// does not fit beside the caller's stuck answer (MaxAnswerBytes 300 KiB)
// waits for room, holding nothing, then goes on once the stuck answer's
// connection closes: the answer is whole.
func TestAPI_AnswerBudgetResultsWaitOnceBegun(t *testing.T) {
	t.Parallel()
	fetch := func(ctx context.Context, c *engine.Caller, tg engine.Target) (engine.Result, error) {
		if strings.HasSuffix(tg.URL, "/small") {
			return engine.Result{Content: "small", Meta: map[string]any{"status": 200}}, nil
		}
		return bigFetch(ctx, c, tg)
	}
	b := setupWith(t, fetch, httpapi.Options{MaxAnswerBytes: 300 << 10})
	srv, _ := keptServer(t, b.handler)
	mine := b.submit(t, "alice-key", "https://example.com/big", "https://example.com/small", "https://example.com/big2")
	b.waitTerminal(t, mine)
	conn, code := stuckReader(t, srv, "alice-key", "/v1/batch/"+mine+"/0")
	if code != http.StatusOK {
		t.Fatalf("the stuck reader's answer: %d", code)
	}
	// The answer's first chunk (up to target 0's result, 256 KiB) would
	// not fit: refused before it begins.
	wantAnswersUnread(t, getFrom(t, srv, "alice-key", "/v1/batch/"+mine+"?results=1"))

	// A job whose first result is small: it begins, then waits.
	small := b.submit(t, "alice-key", "https://example.com/small", "https://example.com/big")
	b.waitTerminal(t, small)
	answered := make(chan response, 1)
	go func() {
		client := &http.Client{Transport: &http.Transport{}, Timeout: testkit.Deadline}
		defer client.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/batch/"+small+"?results=1", nil)
		req.Header.Set("Authorization", "Bearer alice-key")
		resp, err := client.Do(req)
		if err != nil {
			answered <- response{code: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			answered <- response{code: -1, body: []byte(err.Error())}
			return
		}
		answered <- response{code: resp.StatusCode, header: resp.Header, body: body}
	}()
	testkit.WaitFor(t, "the results answer to wait for room", func() bool { return httpapi.AnswerWaiting(b.api, "alice") })
	select {
	case r := <-answered:
		t.Fatalf("the results answer ended while it waited: %d %.200s", r.code, r.body)
	default:
	}
	conn.Close()
	r := testkit.Recv(t, answered)
	if r.code != http.StatusOK || !json.Valid(r.body) || len(r.body) < 256<<10 {
		t.Fatalf("the results answer: %d, %d bytes, valid JSON %v: %.200s", r.code, len(r.body), json.Valid(r.body), r.body)
	}
}

// forwardingCluster is a Cluster whose other node holds job remoteID: its
// answer to a read is 200 with a body of 64 KiB, in one part, after which
// Forward returns. parts counts the parts a Write took.
type forwardingCluster struct {
	parts chan int
}

const remoteID = "ffeeddccbbaa99887766554433221100"

func (c forwardingCluster) Forward(w http.ResponseWriter, r *http.Request, id string) bool {
	if id != remoteID {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte(`{"id":"` + remoteID + `","status":"failed","error":"` + strings.Repeat("x", 64<<10) +
		`","targets_total":0,"targets_done":0,"targets_failed":0,"created_at":0,"targets":[]}`)); err == nil {
		c.parts <- 1
	}
	return true
}

func (forwardingCluster) List(context.Context, string, engine.ListOptions) ([]engine.Job, string, []string, error) {
	return nil, "", nil, nil
}

func (forwardingCluster) ListAll(context.Context, engine.ListOptions) ([]engine.Job, string, []string, error) {
	return nil, "", nil, nil
}

// TestAPI_AnswerBudgetCountsForwardedAnswers: on a cluster node, a read
// of another node's job reserves, once its answer begins, the part of it
// this node holds at a time (256 KiB) of the caller's budget: beside a
// stuck answer of the caller (MaxAnswerBytes 300 KiB; a 256 KiB result)
// it is answered 429 and takes none of the other node's answer, while a
// read of this node's own small job is not refused; once the stuck
// answer's connection closes, the forwarded read is answered, and gives
// its reservation back.
func TestAPI_AnswerBudgetCountsForwardedAnswers(t *testing.T) {
	t.Parallel()
	cl := forwardingCluster{parts: make(chan int, 8)}
	b := setupWith(t, bigFetch, httpapi.Options{MaxAnswerBytes: 300 << 10, Cluster: cl})
	srv, _ := keptServer(t, b.handler)
	mine := b.submit(t, "alice-key", "https://example.com/1")
	b.waitTerminal(t, mine)
	conn, code := stuckReader(t, srv, "alice-key", "/v1/batch/"+mine+"/0")
	if code != http.StatusOK {
		t.Fatalf("the stuck reader's answer: %d", code)
	}
	r := getFrom(t, srv, "alice-key", "/v1/batch/"+remoteID)
	wantAnswersUnread(t, r)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("the 429's Content-Type %q", ct)
	}
	select {
	case <-cl.parts:
		t.Fatal("a refused forwarded read took the other node's answer")
	default:
	}
	wantCode(t, getFrom(t, srv, "alice-key", "/v1/batch/"+mine), http.StatusOK)

	conn.Close()
	var last response
	testkit.WaitFor(t, "the forwarded read to be answered once the stuck answer has ended", func() bool {
		last = getFrom(t, srv, "alice-key", "/v1/batch/"+remoteID)
		return last.code != http.StatusTooManyRequests
	})
	if last.code != http.StatusOK || !strings.Contains(string(last.body), remoteID) {
		t.Fatalf("the forwarded read: %d %.200s", last.code, last.body)
	}
	testkit.WaitFor(t, "alice's budget to be empty", func() bool {
		_, callers := httpapi.AnswerBytesHeld(b.api, "alice")
		return callers == 0
	})
}

// TestAPI_AnswerBudgetServesParallelReadsThatFit: the budget refuses only
// what does not fit. An agent that reads its results in parallel, 32
// reads of 256 KiB results and 8 of a job's results (1 MiB each) at once
// under the default MaxAnswerBytes (64 MiB), gets every answer whole, and
// holds nothing once they are read.
func TestAPI_AnswerBudgetServesParallelReadsThatFit(t *testing.T) {
	t.Parallel()
	// Its 40 reads at once may all wait for a turn: MaxQueuedReads (32 by
	// default) would refuse some, which is not what this test is about.
	b := setupWith(t, bigFetch, httpapi.Options{MaxQueuedReads: 64})
	srv, _ := keptServer(t, b.handler)
	id := b.submit(t, "alice-key", "https://example.com/1", "https://example.com/2", "https://example.com/3", "https://example.com/4")
	b.waitTerminal(t, id)
	var paths []string
	for i := range 32 {
		paths = append(paths, fmt.Sprintf("/v1/batch/%s/%d", id, i%4))
	}
	for range 8 {
		paths = append(paths, "/v1/batch/"+id+"?results=1")
	}
	answers := make([]response, len(paths))
	start := make(chan struct{})
	done := make(chan int)
	for i, p := range paths {
		go func() {
			<-start
			client := &http.Client{Transport: &http.Transport{}, Timeout: testkit.Deadline}
			defer client.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+p, nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			resp, err := client.Do(req)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answers[i] = response{code: resp.StatusCode, header: resp.Header, body: body}
			}
			done <- i
		}()
	}
	close(start)
	for range paths {
		testkit.Recv(t, done)
	}
	for i, r := range answers {
		if r.code != http.StatusOK || len(r.body) < 256<<10 {
			t.Errorf("%s: %d, %d bytes: %.200s", paths[i], r.code, len(r.body), r.body)
		}
	}
	testkit.WaitFor(t, "alice's answers to be given back", func() bool {
		_, callers := httpapi.AnswerBytesHeld(b.api, "alice")
		return callers == 0
	})
}
