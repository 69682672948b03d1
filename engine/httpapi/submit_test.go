package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// TestAPI_Submit: a bad body is 400 (bad JSON, in words that do not
// speak Go), 413 (too large) or 422 (no valid job), with a hint, and stores
// nothing; a good one is 202 with the job's id and Location, and the same
// targets again reuse the caller's job; past a caller's or the runner's
// live jobs, 429 with Retry-After.
func TestAPI_Submit(t *testing.T) {
	t.Parallel()
	t.Run("bad requests", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		huge := `{"targets":[{"url":"https://example.com/` + strings.Repeat("a", 257<<10) + `"}]}`
		for _, tc := range []struct {
			name, body string
			code       int
			msg        string
		}{
			{"not json", `{"targets":`, http.StatusBadRequest, "bad json: the JSON ends too soon"},
			{"empty body", ``, http.StatusBadRequest, "empty body"},
			{"blank body", " \n", http.StatusBadRequest, "empty body"},
			{"targets an object", `{"targets":{}}`, http.StatusBadRequest, `bad json: targets must be a list of {"url": …}`},
			{"a target a number", `{"targets":[1]}`, http.StatusBadRequest, `bad json: targets must be a list of {"url": …}`},
			{"url a number", `{"targets":[{"url":1}]}`, http.StatusBadRequest, "bad json: url must be a string"},
			{"options a list", `{"targets":[{"url":"https://example.com/","options":[]}]}`, http.StatusBadRequest, "bad json: options must be an object"},
			{"context a string", `{"targets":[{"url":"https://example.com/","options":{"context":"yes"}}]}`, http.StatusBadRequest, "bad json: option context must be true or false"},
			{"mode a number", `{"targets":[{"url":"https://example.com/","options":{"mode":1}}]}`, http.StatusBadRequest, "bad json: option mode must be a string"},
			{"syntax", `{"targets":[x]}`, http.StatusBadRequest, "bad json: invalid character 'x' looking for beginning of value (at byte 13)"},
			{"not an object", `[1,2]`, http.StatusBadRequest, "bad json: the body must be one JSON object"},
			{"wrong type", `{"targets":"https://example.com/"}`, http.StatusBadRequest, "bad json"},
			{"unknown field", `{"targets":[{"url":"https://example.com/"}],"priority":1}`, http.StatusBadRequest, "unknown field"},
			{"unknown target field", `{"targets":[{"url":"https://example.com/","method":"POST"}]}`, http.StatusBadRequest, "unknown field"},
			{"unknown option", `{"targets":[{"url":"https://example.com/","options":{"speed":"fast"}}]}`, http.StatusUnprocessableEntity, `unknown option "speed"`},
			{"two objects", `{"targets":[{"url":"https://example.com/"}]}{}`, http.StatusBadRequest, "after the JSON"},
			{"trailing garbage", `{"targets":[{"url":"https://example.com/"}]} x`, http.StatusBadRequest, "after the JSON"},
			{"257 KiB", huge, http.StatusRequestEntityTooLarge, "too large"},
			{"no targets", `{"targets":[]}`, http.StatusUnprocessableEntity, "no targets"},
			{"targets missing", `{}`, http.StatusUnprocessableEntity, "no targets"},
			{"too many targets", targetsBody("https://e.com/1", "https://e.com/2", "https://e.com/3", "https://e.com/4", "https://e.com/5"), http.StatusUnprocessableEntity, "too many targets"},
			{"empty url", `{"targets":[{"url":""}]}`, http.StatusUnprocessableEntity, "empty url"},
			{"relative url", targetsBody("/page"), http.StatusUnprocessableEntity, "not an absolute"},
			{"ftp url", targetsBody("ftp://example.com/file"), http.StatusUnprocessableEntity, "not an absolute"},
			{"no host", targetsBody("https:///path"), http.StatusUnprocessableEntity, "not an absolute"},
			{"unparsable url", targetsBody("http://[::1"), http.StatusUnprocessableEntity, "not an absolute"},
			{"port too high", targetsBody("https://example.com:99999/"), http.StatusUnprocessableEntity, "port not 1 to 65535"},
			{"port zero", targetsBody("https://example.com:0/"), http.StatusUnprocessableEntity, "port not 1 to 65535"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(tc.body)), tc.code, tc.msg)
			})
		}
		// No message speaks Go.
		for _, body := range []string{`{"targets":{}}`, `[1]`, `{"targets":[{"url":true}]}`, `{"targets":[{"url":"https://e.com/","options":{"recover":"x"}}]}`} {
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
			for _, goWord := range []string{"Go ", "struct", "engine.", "submitRequest", "unmarshal", "[]"} {
				if strings.Contains(r.json(t)["error"].(string), goWord) {
					t.Errorf("%s: error %q speaks Go (%q)", body, r.json(t)["error"], goWord)
				}
			}
		}
		// None of them made a job.
		n := 0
		if err := b.Store.Jobs(func(persistence.JobRecord) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d jobs stored, want 0", n)
		}
	})

	t.Run("accepted and reused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		body := targetsBody("https://example.com/a", "https://example.com/b")
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
		wantCode(t, r, http.StatusAccepted)
		m := r.json(t)
		id, _ := m["id"].(string)
		// "status" is the job's path (the contract's shape), and so is
		// "location", beside the Location header.
		if len(id) != 32 || m["reused"] != false || m["status"] != "/v1/batch/"+id || m["location"] != "/v1/batch/"+id {
			t.Fatalf("answer %s", r.body)
		}
		if loc := r.header.Get("Location"); loc != "/v1/batch/"+id {
			t.Fatalf("Location %q", loc)
		}
		b.waitTerminal(t, id)
		r = b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
		wantCode(t, r, http.StatusAccepted)
		if m := r.json(t); m["id"] != id || m["reused"] != true {
			t.Fatalf("resubmit: %s, want id %s reused", r.body, id)
		}
		// Another caller with the same targets gets a job of its own.
		if other := b.submit(t, "bob-key", "https://example.com/a", "https://example.com/b"); other == id {
			t.Fatal("bob got alice's job")
		}
	})

	t.Run("429 with Retry-After", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.submit(t, "alice-key", holdURL)
		b.waitRunning(t, first)
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(targetsBody("https://example.com/other")))
		wantError(t, r, http.StatusTooManyRequests, "busy")
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra <= 0 {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		// bob's job is the second live job of two: carol meets the total cap.
		b.submit(t, "bob-key", holdURL)
		r = b.do(t, http.MethodPost, "/v1/batch", "carol-key", strings.NewReader(targetsBody("https://example.com/c")))
		wantError(t, r, http.StatusTooManyRequests, "jobs busy")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After on jobs busy")
		}
	})
}

// TestAPI_SubmitRefusesHostileBodies: unknown or duplicate fields, deep
// nesting, huge numbers, wrong types, junk around the JSON, bodies that are
// not UTF-8 are 400; an empty, relative, non-HTTP or port-less URL, user
// info, too many targets, an option not honoured are 422. Each answer is a
// short JSON error with a hint that names no Go type and no secret, and no
// hostile body leaves a job behind.
func TestAPI_SubmitRefusesHostileBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	deepObj := `{"targets":` + strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000) + `}`
	cases := []struct {
		name string
		body string
		code int
	}{
		{"unknown top field", `{"targets":[{"url":"https://example.com"}],"priority":9}`, 400},
		{"unknown target field", `{"targets":[{"url":"https://example.com","method":"POST"}]}`, 400},
		{"unknown option", `{"targets":[{"url":"https://example.com","options":{"headers":{"X":"1"}}}]}`, 422},
		{"field in other case", `{"targets":[{"URL":"https://example.com"}]}`, 400},
		{"field Targets", `{"Targets":[{"url":"https://example.com"}]}`, 400},
		{"duplicate targets", `{"targets":[{"url":"https://a.example"}],"targets":[{"url":"https://b.example"}]}`, 400},
		{"duplicate url", `{"targets":[{"url":"https://a.example","url":"http://127.0.0.1/"}]}`, 400},
		{"duplicate option", `{"targets":[{"url":"https://a.example","options":{"grep":"a","grep":"b"}}]}`, 400},
		{"deep array", deep, 400},
		{"deep targets", deepObj, 400},
		{"huge number url", `{"targets":[{"url":1e999999}]}`, 400},
		{"huge number context", `{"targets":[{"url":"https://a.example","options":{"context":123456789012345678901234567890}}]}`, 400},
		{"targets number", `{"targets":99999999999999999999}`, 400},
		{"targets object", `{"targets":{"url":"https://a.example"}}`, 400},
		{"target string", `{"targets":["https://a.example"]}`, 400},
		{"options array", `{"targets":[{"url":"https://a.example","options":[]}]}`, 400},
		{"top array", `[{"url":"https://a.example"}]`, 400},
		{"top string", `"https://a.example"`, 400},
		{"two objects", `{"targets":[{"url":"https://a.example"}]}{"targets":[]}`, 400},
		{"trailing junk", `{"targets":[{"url":"https://a.example"}]}x`, 400},
		{"not utf-8 in url", "{\"targets\":[{\"url\":\"https://a.example/\xff\xfe\"}]}", 400},
		{"not utf-8 outside", "{\"targets\":[{\"url\":\"https://a.example/\"}]}\xff", 400},
		{"bom", "\xef\xbb\xbf{\"targets\":[{\"url\":\"https://a.example/\"}]}", 400},
		{"truncated", `{"targets":[{"url":"https://a.exa`, 400},
		{"empty", ``, 400},
		{"spaces", "  \n\t ", 400},
		{"null", `null`, 422},
		{"no targets", `{"targets":[]}`, 422},
		{"null targets", `{"targets":null}`, 422},
		{"empty url", `{"targets":[{"url":""}]}`, 422},
		{"relative url", `{"targets":[{"url":"/etc/passwd"}]}`, 422},
		{"file url", `{"targets":[{"url":"file:///etc/passwd"}]}`, 422},
		{"gopher url", `{"targets":[{"url":"gopher://a.example:70/"}]}`, 422},
		{"userinfo url", `{"targets":[{"url":"https://user:s3cretpw@a.example/"}]}`, 422},
		{"port 0", `{"targets":[{"url":"https://a.example:0/"}]}`, 422},
		{"port 65536", `{"targets":[{"url":"https://a.example:65536/"}]}`, 422},
		{"port 99999", `{"targets":[{"url":"https://a.example:99999/"}]}`, 422},
		{"port huge", `{"targets":[{"url":"https://a.example:99999999999999999999999/"}]}`, 422},
		{"no host", `{"targets":[{"url":"https:///path"}]}`, 422},
		{"control char url", `{"targets":[{"url":"https://a.example/\u0000x"}]}`, 422},
		{"too many", targetsBody("https://a.example/1", "https://a.example/2", "https://a.example/3", "https://a.example/4", "https://a.example/5"), 422},
		{"option refused", `{"targets":[{"url":"https://a.example","options":{"mode":"summary"}}]}`, 422},
	}
	for _, c := range cases {
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(c.body))
		if r.code != c.code {
			t.Errorf("%s: got %d, want %d: %.300s", c.name, r.code, c.code, r.body)
			continue
		}
		m := r.json(t)
		if e, _ := m["error"].(string); e == "" {
			t.Errorf("%s: no error text: %s", c.name, r.body)
		}
		if h, _ := m["hint"].(string); h == "" {
			t.Errorf("%s: no hint: %s", c.name, r.body)
		}
		if len(r.body) > 2048 {
			t.Errorf("%s: error answer of %d bytes", c.name, len(r.body))
		}
		wantNoLeak(t, c.name, r.body, "s3cretpw")
	}
	// No hostile body left a job behind.
	r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(targetsBody("https://example.com/ok")))
	wantCode(t, r, http.StatusAccepted)
}

// padded returns a valid submit body of exactly n bytes (n large).
func padded(n int) string {
	body := targetsBody("https://example.com/pad")
	return body[:len(body)-1] + strings.Repeat(" ", n-len(body)) + "}"
}

// TestAPI_SubmitBodyCap: a body of up to DefaultMaxBody bytes is read,
// with a length or chunked; one byte more is 413.
func TestAPI_SubmitBodyCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const max = httpapi.DefaultMaxBody
	for _, c := range []struct {
		name    string
		n       int
		chunked bool
		code    int
	}{
		{"cap-1", max - 1, false, 202},
		{"cap", max, false, 202},
		{"cap+1", max + 1, false, 413},
		{"cap chunked", max, true, 202},
		{"cap+1 chunked", max + 1, true, 413},
		{"4 MiB chunked", 4 << 20, true, 413},
	} {
		body := padded(c.n)
		if len(body) != c.n {
			t.Fatalf("padded body is %d bytes, want %d", len(body), c.n)
		}
		var rd io.Reader = strings.NewReader(body)
		if c.chunked {
			rd = io.MultiReader(strings.NewReader(body[:10]), strings.NewReader(body[10:])) // no length known
		}
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/batch", rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice-key")
		if c.chunked {
			req.ContentLength = -1
		}
		resp, err := b.client.Do(req)
		if err != nil {
			// The server may close while the client still sends past the cap.
			if c.code == 413 {
				continue
			}
			t.Fatalf("%s: %v", c.name, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s: got %d, want %d: %.200s", c.name, resp.StatusCode, c.code, data)
		}
		wantNoLeak(t, c.name, data)
		if resp.StatusCode == 202 {
			// Same targets: the job is reused; make room for none else.
			continue
		}
	}
}

// TestAPI_SubmitBodyErrors: a body that stops coming (with a length, or
// chunked) is answered 408, a body whose chunked encoding is malformed 400
// "bad request body"; no answer names a socket address, as the read
// error's text does. A body chunked in tiny pieces, whole, is accepted.
func TestAPI_SubmitBodyErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newServer(t, b.handler, func(s *httptest.Server) { s.Config.ReadTimeout = 300 * time.Millisecond })
	addr := srv.Listener.Addr().String()
	head := "POST /v1/batch HTTP/1.1\r\nHost: siftbatch\r\nAuthorization: Bearer alice-key\r\nContent-Type: application/json\r\n"
	for _, tc := range []struct {
		name, raw string
		code      int
		msg       string
	}{
		{"body stops", head + "Content-Length: 100\r\n\r\n" + `{"targets":`, http.StatusRequestTimeout, "body read timed out"},
		{"chunked body stops", head + "Transfer-Encoding: chunked\r\n\r\n10\r\n{\"targets\":[{\"ur", http.StatusRequestTimeout, "body read timed out"},
		{"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", http.StatusBadRequest, "bad request body"},
		{"chunk without its CRLF", head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n", http.StatusBadRequest, "bad request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, addr, tc.raw)
			r := response{code: resp.StatusCode, header: resp.Header, body: []byte(body)}
			wantError(t, r, tc.code, tc.msg)
			if m := r.json(t); m["error"] != tc.msg {
				t.Errorf("error %q, want exactly %q", m["error"], tc.msg)
			}
			wantNoLeak(t, tc.name, r.body, addr, "tcp", "i/o")
		})
	}
	// Whole, in pieces of 3 bytes (on b's server: no read timeout to race).
	tiny := targetsBody("https://example.com/tiny")
	var raw strings.Builder
	raw.WriteString(head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
	for i := 0; i < len(tiny); i += 3 {
		p := tiny[i:min(i+3, len(tiny))]
		fmt.Fprintf(&raw, "%x\r\n%s\r\n", len(p), p)
	}
	raw.WriteString("0\r\n\r\n")
	if resp, body := rawExchange(t, strings.TrimPrefix(b.url, "http://"), raw.String()); resp.StatusCode != http.StatusAccepted {
		t.Errorf("tiny chunks: %d %s", resp.StatusCode, body)
	}
}

// TestAPI_Options: a target option the FetchFunc does not honour is
// refused at submit, 422, naming it; an honoured one passes Check first;
// nothing is accepted and then silently ignored.
func TestAPI_Options(t *testing.T) {
	t.Parallel()
	yes := true
	t.Run("none honoured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for name, o := range map[string]engine.Options{
			"mode": {Mode: "summary"}, "question": {Question: "why?"}, "pages": {Pages: "1-2"},
			"grep": {Grep: "x"}, "jq": {JQ: "."}, "context": {Context: &yes}, "recover": {Recover: true},
		} {
			body, _ := json.Marshal(map[string]any{"targets": []engine.Target{{URL: "https://example.com/", Options: o}}})
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", bytes.NewReader(body))
			wantError(t, r, http.StatusUnprocessableEntity, "target 0: option "+name+" is not supported by this server")
			if h := r.json(t)["hint"].(string); !strings.Contains(h, "belongs to a fetcher that supports it") || !strings.Contains(h, "honours none") {
				t.Errorf("%s: hint %q", name, h)
			}
		}
		// An option on a later target names that target.
		for _, c := range []struct{ name, opts string }{
			{"mode", `{"mode":"summary"}`},
			{"question", `{"question":"why?"}`},
			{"pages", `{"pages":"1-3"}`},
			{"grep", `{"grep":"x"}`},
			{"jq", `{"jq":"."}`},
			{"context", `{"context":false}`},
			{"recover", `{"recover":true}`},
		} {
			body := `{"targets":[{"url":"https://example.com/a"},{"url":"https://example.com/b","options":` + c.opts + `}]}`
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
			wantError(t, r, http.StatusUnprocessableEntity, "target 1: option "+c.name)
		}
		// Options left empty are no options.
		b.submit(t, "alice-key", "https://example.com/plain")
		r := b.do(t, http.MethodPost, "/v1/batch", "bob-key", strings.NewReader(`{"targets":[{"url":"https://example.com/","options":{"mode":"","grep":"","jq":"","context":null,"recover":false}}]}`))
		wantCode(t, r, http.StatusAccepted)
	})

	t.Run("the fetcher's", func(t *testing.T) {
		t.Parallel()
		f, err := fetcher.New(fetcher.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := setupWith(t, nil, httpapi.Options{Honoured: f.Honours(), Check: f.Check})
		body := func(o engine.Options) io.Reader {
			data, _ := json.Marshal(map[string]any{"targets": []engine.Target{{URL: "https://example.com/a"}, {URL: "https://example.com/b", Options: o}}})
			return bytes.NewReader(data)
		}
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{Mode: "summary"})), http.StatusUnprocessableEntity,
			"target 1: option mode is not supported by this server")
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{Grep: "a("}))
		wantError(t, r, http.StatusUnprocessableEntity, "target 1: grep: error parsing regexp: missing closing ): `a(`")
		wantError(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{JQ: ".a |"})), http.StatusUnprocessableEntity, "target 1: jq: ")
		// What the fetcher cannot run is refused at submit, naming the
		// option, in words that leak nothing.
		for _, c := range []struct{ name, opts, want string }{
			{"bad regex", `{"grep":"(abc"}`, "grep"},
			{"bad regex class", `{"grep":"[z-a]"}`, "grep"},
			{"regex repeat too big", `{"grep":"a{1001}"}`, "grep"},
			{"regex nested repeat", `{"grep":"((a{1000}){1000}){1000}"}`, "grep"},
			{"perl backref", `{"grep":"(a)\\1"}`, "grep"},
			{"lookahead", `{"grep":"a(?=b)"}`, "grep"},
			{"jq syntax", `{"jq":".[ |"}`, "jq"},
			{"jq unknown func", `{"jq":"nosuchfunc(1)"}`, "jq"},
			{"jq unknown var", `{"jq":"$nope"}`, "jq"},
			{"jq import", `{"jq":"import \"x\" as x; ."}`, "jq"},
			{"mode still refused", `{"mode":"x","grep":"a"}`, "mode"},
		} {
			body := `{"targets":[{"url":"https://example.com/a","options":` + c.opts + `}]}`
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(body))
			wantError(t, r, http.StatusUnprocessableEntity, c.want)
			wantNoLeak(t, c.name, r.body)
		}
		wantCode(t, b.do(t, http.MethodPost, "/v1/batch", "alice-key", body(engine.Options{Grep: "(?i)x", JQ: ".a"})), http.StatusAccepted)
	})
}

// TestAPI_SubmitCannotKillTheServer: no input makes library code panic,
// and a jq program that runs out of bounds fails its target with a hint.
// Through the whole API (the fetcher's Honours and Check, as serve wires
// them), one POST with a jq program that would overflow the worker's
// stack inside gojq's setpath ("fatal error: stack overflow" ends a
// process, which no supervision strategy can catch) is refused or fails
// its targets: the process lives on. Run in a child process (long).
func TestAPI_SubmitCannotKillTheServer(t *testing.T) {
	const program = `("\u0000" * 4000000 | explode) as $p | null | setpath($p; 1) | 1`
	if os.Getenv("SIFTBATCH_TEST_CHILD") == "setpath" {
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("null")) }))
		defer page.Close()
		f, err := fetcher.New(fetcher.Options{AllowPrivate: true})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := setupWith(t, f.Fetch, httpapi.Options{Honoured: f.Honours(), Check: f.Check})
		// Three targets: on a slow machine the program may run out of its
		// second before it reaches setpath.
		var ts []map[string]any
		for i := 0; i < 3; i++ {
			ts = append(ts, map[string]any{"url": page.URL + "/" + string(rune('a'+i)), "options": map[string]string{"jq": program}})
		}
		body, _ := json.Marshal(map[string]any{"targets": ts})
		r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(string(body)))
		if r.code != http.StatusAccepted {
			println("CHILD-SURVIVED refused at submit", r.code)
			return
		}
		id := r.json(t)["id"].(string)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		j, err := b.Runner.Wait(ctx, id)
		println("CHILD-SURVIVED", j.Status, err == nil)
		return
	}
	testkit.Long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAPI_SubmitCannotKillTheServer$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SIFTBATCH_TEST_CHILD=setpath")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "CHILD-SURVIVED") {
		first := string(out)
		for _, l := range strings.Split(first, "\n") {
			if strings.Contains(l, "fatal error") || strings.Contains(l, "exceeds") {
				first = l
				break
			}
		}
		if len(first) > 300 {
			first = first[:300]
		}
		t.Fatalf("one POST /v1/batch killed the server process (%v): %s", err, first)
	}
}

// TestAPI_SubmitUnknownOption: a key inside a target's options that names
// no option is 422 naming it and the target, whatever its value, and
// creates nothing; the rest of the body stays strict: an unknown top-level
// or target field, or bad JSON anywhere, is 400 even beside it.
func TestAPI_SubmitUnknownOption(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, httpapi.Options{Honoured: []string{"mode"}})
	for _, tc := range []struct {
		name, body string
		code       int
		msg        string
	}{
		{"bool", `{"targets":[{"url":"https://a.example","options":{"summarize":true}}]}`, 422, `target 0: unknown option "summarize"`},
		{"object value", `{"targets":[{"url":"https://a.example","options":{"headers":{"X":"1","X":"2"}}}]}`, 422, `unknown option "headers"`},
		{"second target", `{"targets":[{"url":"https://a.example"},{"url":"https://b.example","options":{"mode":"x","depth":3}}]}`, 422, `target 1: unknown option "depth"`},
		{"other case", `{"targets":[{"url":"https://a.example","options":{"MODE":"x"}}]}`, 422, `unknown option "MODE"`},
		{"first of two", `{"targets":[{"url":"https://a.example","options":{"a":1,"b":2}}]}`, 422, `unknown option "a"`},
		{"long name cut", `{"targets":[{"url":"https://a.example","options":{"` + strings.Repeat("n", 300) + `":1}}]}`, 422, `unknown option "` + strings.Repeat("n", 64) + `…"`},
		{"known, not honoured", `{"targets":[{"url":"https://a.example","options":{"grep":"x"}}]}`, 422, "option grep is not supported"},
		{"with unknown top field", `{"targets":[{"url":"https://a.example","options":{"summarize":true}}],"priority":1}`, 400, `unknown field "priority"`},
		{"with unknown target field", `{"targets":[{"url":"https://a.example","method":"GET","options":{"summarize":true}}]}`, 400, `unknown field "method"`},
		{"with a later syntax error", `{"targets":[{"url":"https://a.example","options":{"summarize":true}}],}`, 400, "bad json"},
		{"with a wrong type", `{"targets":[{"url":"https://a.example","options":{"summarize":true,"mode":1}}]}`, 400, "option mode must be a string"},
		{"option at the top", `{"targets":[{"url":"https://a.example"}],"mode":"x"}`, 400, `unknown field "mode"`},
		{"option in a target", `{"targets":[{"url":"https://a.example","mode":"x"}]}`, 400, `unknown field "mode"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(tc.body))
			wantError(t, r, tc.code, tc.msg)
			wantNoLeak(t, tc.name, r.body)
		})
	}
	list := b.do(t, http.MethodGet, "/v1/batch", "alice-key", nil)
	wantCode(t, list, http.StatusOK)
	if jobs := list.json(t)["jobs"].([]any); len(jobs) != 0 {
		t.Fatalf("refused submits created %d jobs", len(jobs))
	}
	// An option known and honoured still submits.
	r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(`{"targets":[{"url":"https://a.example","options":{"mode":"x"}}]}`))
	wantCode(t, r, http.StatusAccepted)
}

// TestAPI_SubmitIdempotencyKey: an Idempotency-Key header names the job
// instead of its targets, for its caller: the same key and body is the
// same job (reused); the same key and another body 422 while that job is
// reusable; a new key a new job of the same targets; a failed job frees
// its key. A malformed key is 400 and creates nothing.
func TestAPI_SubmitIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post := func(key, idem string, urls ...string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/batch", strings.NewReader(targetsBody(urls...)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		return send(t, b.client, req)
	}
	type answer struct {
		ID     string `json:"id"`
		Reused bool   `json:"reused"`
	}
	accepted := func(r response) answer {
		t.Helper()
		wantCode(t, r, http.StatusAccepted)
		var a answer
		if err := json.Unmarshal(r.body, &a); err != nil {
			t.Fatal(err)
		}
		if loc := r.header.Get("Location"); loc != "/v1/batch/"+a.ID {
			t.Fatalf("Location %q for job %s", loc, a.ID)
		}
		return a
	}
	const a, c = "https://example.com/a", "https://example.com/c"

	first := accepted(post("alice-key", "run-1", a))
	if first.Reused {
		t.Fatal("a new key reused a job")
	}
	b.waitTerminal(t, first.ID)
	for _, step := range []struct {
		name      string
		key, idem string
		urls      []string
		code      int
		same      bool // the answer is first's job, reused
	}{
		{"same key and body", "alice-key", "run-1", []string{a}, 202, true},
		{"same key, other body", "alice-key", "run-1", []string{c}, 422, false},
		{"same key, more targets", "alice-key", "run-1", []string{a, c}, 422, false},
		{"new key, same body", "alice-key", "run-2", []string{a}, 202, false},
		{"no key, same body", "alice-key", "", []string{a}, 202, false},
		{"another caller's same key", "bob-key", "run-1", []string{a}, 202, false},
	} {
		r := post(step.key, step.idem, step.urls...)
		if step.code != http.StatusAccepted {
			wantError(t, r, step.code, "idempotency key reused with other targets")
			continue
		}
		got := accepted(r)
		if step.same != (got.ID == first.ID) || step.same != got.Reused {
			t.Fatalf("%s: job %s reused %v; first job %s", step.name, got.ID, got.Reused, first.ID)
		}
		b.waitTerminal(t, got.ID)
	}

	// A failed job frees its key.
	failed := accepted(post("alice-key", "run-3", "https://example.com/fail"))
	if j := b.waitTerminal(t, failed.ID); j.Status != engine.StatusFailed {
		t.Fatalf("job %s", j.Status)
	}
	again := accepted(post("alice-key", "run-3", c))
	if again.Reused || again.ID == failed.ID {
		t.Fatalf("a failed job's key still bound: %+v", again)
	}
	b.waitTerminal(t, again.ID)

	// Malformed keys: 400, nothing created.
	before := len(b.do(t, http.MethodGet, "/v1/batch?limit=100", "alice-key", nil).json(t)["jobs"].([]any))
	for name, header := range map[string][]string{
		"too long":    {strings.Repeat("k", 256)},
		"tab":         {"secret\tkey"},
		"not UTF-8":   {"secret\xffkey"},
		"empty":       {""},
		"given twice": {"secret-one", "secret-two"},
	} {
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/batch", strings.NewReader(targetsBody("https://example.com/new")))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice-key")
		req.Header["Idempotency-Key"] = header
		r := send(t, b.client, req)
		wantError(t, r, http.StatusBadRequest, "bad Idempotency-Key header")
		if header[0] != "" {
			wantNoLeak(t, name, r.body, header...) // the key is never echoed
		}
	}
	if after := len(b.do(t, http.MethodGet, "/v1/batch?limit=100", "alice-key", nil).json(t)["jobs"].([]any)); after != before {
		t.Fatalf("malformed keys created %d jobs", after-before)
	}
	// The longest key is taken.
	b.waitTerminal(t, accepted(post("alice-key", strings.Repeat("k", 255), a)).ID)
}

// TestAPI_IdempotencyKeyBodyIsItsTargets: the body an Idempotency-Key is
// bound to is its targets, not its bytes: the same targets written
// otherwise (fields in another order, spaces, empty options, an escaped
// character) answer the same job, reused; a target more or another
// option is another body (422).
func TestAPI_IdempotencyKeyBodyIsItsTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post := func(body string) response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/batch", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer alice-key")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "same-targets")
		return send(t, b.client, req)
	}
	first := post(`{"targets":[{"url":"https://example.com/x"}]}`)
	wantCode(t, first, http.StatusAccepted)
	id := first.json(t)["id"].(string)
	b.waitTerminal(t, id)
	for _, body := range []string{
		`{"targets":[{"url":"https://example.com/x","options":{}}]}`,
		` { "targets" : [ { "options" : { } , "url" : "https://example.com/x" } ] } `,
		`{"targets":[{"url":"https:\/\/example.com\/\u0078"}]}`,
	} {
		r := post(body)
		wantCode(t, r, http.StatusAccepted)
		if m := r.json(t); m["id"] != id || m["reused"] != true {
			t.Fatalf("%s: %s; want job %s reused", body, r.body, id)
		}
	}
	for _, body := range []string{
		`{"targets":[{"url":"https://example.com/x"},{"url":"https://example.com/x"}]}`,
		`{"targets":[{"url":"https://example.com/x/"}]}`,
	} {
		wantError(t, post(body), http.StatusUnprocessableEntity, "idempotency key reused with other targets")
	}
}
