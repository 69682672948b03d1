package httpapi_test

// Adversarial black-box tests of the batch HTTP API: auth, isolation,
// hostile bodies, query values, long-polls, metrics labels, streamed
// answers cut short. Every test passes against the contract.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// advLeaks are strings no error answer may hold: Go type names, Go's own
// error prefixes, socket addresses, keys.
var advLeaks = []string{
	"engine.", "httpapi.", "submitRequest", "Go struct", "Go value", "json: cannot unmarshal", `"error":"json:`, "map[", "interface {",
	"[]engine", "*url.", "net/http", "127.0.0.1", "[::1]", "i/o timeout", "alice-key", "bob-key", "carol-key",
	"goroutine", "panic",
}

func advNoLeak(t *testing.T, what string, body []byte, extra ...string) {
	t.Helper()
	for _, s := range append(append([]string{}, advLeaks...), extra...) {
		if bytes.Contains(body, []byte(s)) {
			t.Errorf("%s: answer holds %q: %s", what, s, body)
		}
	}
}

// advReq builds a request to b with raw headers.
func advReq(t *testing.T, b *bundle, method, path string, body io.Reader, hdr ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return req
}

func TestAdversary_AuthRefusals(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/a")
	basic := base64.StdEncoding.EncodeToString([]byte("alice:alice-key"))
	huge := strings.Repeat("k", 900<<10)
	cases := []struct {
		name  string
		query string
		hdr   []string
	}{
		{"none", "", nil},
		{"wrong key", "", []string{"Authorization", "Bearer alice-key2"}},
		{"key prefix", "", []string{"Authorization", "Bearer alice-ke"}},
		{"key alone", "", []string{"Authorization", "alice-key"}},
		{"scheme alone", "", []string{"Authorization", "Bearer"}},
		{"scheme and blank", "", []string{"Authorization", "Bearer    "}},
		{"other scheme", "", []string{"Authorization", "Token alice-key"}},
		{"basic user:key", "", []string{"Authorization", "Basic " + basic}},
		{"basic key", "", []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice-key"))}},
		{"cookie key", "", []string{"Cookie", "key=alice-key"}},
		{"cookie session", "", []string{"Cookie", "session=alice-key; token=alice-key; api_key=alice-key"}},
		{"cookie authorization", "", []string{"Cookie", "Authorization=Bearer alice-key"}},
		{"query key", "?key=alice-key&api_key=alice-key&access_token=alice-key&token=alice-key", nil},
		{"x-api-key", "", []string{"X-Api-Key", "alice-key"}},
		{"proxy-authorization", "", []string{"Proxy-Authorization", "Bearer alice-key"}},
		{"key with NUL-like junk", "", []string{"Authorization", "Bearer alice-key\x01"}},
		{"huge key", "", []string{"Authorization", "Bearer " + huge}},
	}
	routes := []struct{ method, path string }{
		{http.MethodPost, "/v1/batch"},
		{http.MethodGet, "/v1/batch/" + id},
		{http.MethodGet, "/v1/batch/" + id + "?results=1&wait=1s"},
		{http.MethodGet, "/v1/batch/" + id + "/0"},
		{http.MethodDelete, "/v1/batch/" + id},
		{http.MethodGet, "/v1/nothing"},
		{http.MethodPut, "/v1/batch"},
	}
	for _, c := range cases {
		for _, rt := range routes {
			var body io.Reader
			if rt.method == http.MethodPost {
				body = strings.NewReader(targetsBody("https://example.com/x"))
			}
			path := rt.path
			if c.query != "" {
				if strings.Contains(path, "?") {
					path += "&" + c.query[1:]
				} else {
					path += c.query
				}
			}
			req, err := http.NewRequest(rt.method, b.url+path, body)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(c.hdr); i += 2 {
				req.Header[c.hdr[i]] = append(req.Header[c.hdr[i]], c.hdr[i+1])
			}
			resp, err := b.client.Do(req)
			if err != nil {
				// A header net/http refuses to send is no way in either.
				continue
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := c.name + " " + rt.method + " " + path[:min(len(path), 60)]
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Errorf("%s: 401 is not JSON", what)
				}
			case http.StatusRequestHeaderFieldsTooLarge, http.StatusBadRequest:
				if c.name != "huge key" && c.name != "key with NUL-like junk" {
					t.Errorf("%s: %d %s", what, resp.StatusCode, data)
				}
			default:
				t.Errorf("%s: got %d, want 401: %s", what, resp.StatusCode, data)
			}
			advNoLeak(t, what, data, "alice-key")
		}
	}
	// Nothing above reached the job: it is still there, and nothing
	// was submitted or cancelled.
	j, ok := b.runner.Job(id)
	if !ok || j.Status == engine.StatusCancelled {
		t.Fatalf("alice's job after the refusals: %+v %v", j, ok)
	}
}

func TestAdversary_IsolationEveryRoute(t *testing.T) {
	b := setup(t)
	// A finished job (carol's) and a live one (alice's).
	done := b.submit(t, "carol-key", "https://example.com/c", "https://example.com/fail")
	b.waitTerminal(t, done)
	live := b.submit(t, "alice-key", holdURL, "https://example.com/two")
	b.waitRunning(t, live)
	paths := func(id string) []struct{ method, path string } {
		return []struct{ method, path string }{
			{http.MethodGet, "/v1/batch/" + id},
			{http.MethodGet, "/v1/batch/" + id + "?results=1"},
			{http.MethodGet, "/v1/batch/" + id + "?wait=20s"},
			{http.MethodGet, "/v1/batch/" + id + "?wait=20s&results=1"},
			{http.MethodGet, "/v1/batch/" + id + "?wait=bogus"},
			{http.MethodGet, "/v1/batch/" + id + "?wait=61s"},
			{http.MethodGet, "/v1/batch/" + id + "/0"},
			{http.MethodGet, "/v1/batch/" + id + "/1"},
			{http.MethodGet, "/v1/batch/" + id + "/7"},
			{http.MethodGet, "/v1/batch/" + id + "/-1"},
			{http.MethodGet, "/v1/batch/" + id + "/x"},
			{http.MethodDelete, "/v1/batch/" + id},
		}
	}
	strip := func(h http.Header) http.Header {
		h = h.Clone()
		h.Del("Date")
		return h
	}
	for _, other := range []string{live, done} {
		mine, missing := paths(other), paths(missingID)
		for i := range mine {
			start := time.Now()
			a := b.do(t, mine[i].method, mine[i].path, "bob-key", nil)
			took := time.Since(start)
			m := b.do(t, missing[i].method, missing[i].path, "bob-key", nil)
			if a.code != http.StatusNotFound || !bytes.Equal(a.body, m.body) {
				t.Errorf("bob %s %s: %d %s; missing id: %d %s", mine[i].method, mine[i].path, a.code, a.body, m.code, m.body)
			}
			if fmt.Sprint(strip(a.header)) != fmt.Sprint(strip(m.header)) {
				t.Errorf("bob %s %s: headers %v, missing id: %v", mine[i].method, mine[i].path, a.header, m.header)
			}
			// A long-poll on someone else's live job must not wait: a
			// wait would tell that the job exists.
			if took > 3*time.Second {
				t.Errorf("bob %s %s took %s", mine[i].method, mine[i].path, took)
			}
			advNoLeak(t, "bob "+mine[i].path, a.body, "example.com", other)
		}
	}
	// Bob's DELETE cancelled nothing; the jobs are as they were.
	if j, _ := b.runner.Job(live); !engine.IsLive(j.Status) {
		t.Fatalf("alice's live job after bob's DELETE: %+v", j)
	}
	if j, _ := b.runner.Job(done); j.Status != engine.StatusPartial {
		t.Fatalf("carol's job after bob's DELETE: %+v", j)
	}
	// Other spellings of alice's id never reach it for bob, and answer as
	// a missing id does.
	spellings := []string{
		strings.ToUpper(live), live + "%20", "%20" + live, live + "%00", live[:31], live + "0",
		"%" + fmt.Sprintf("%02x", live[0]) + live[1:], "./" + live, live + "/.", live + "%2F0",
	}
	ref := b.do(t, http.MethodGet, "/v1/batch/"+missingID, "bob-key", nil)
	for _, s := range spellings {
		r := b.do(t, http.MethodGet, "/v1/batch/"+s, "bob-key", nil)
		if r.code == http.StatusOK || (r.code == http.StatusNotFound && !bytes.Equal(r.body, ref.body) && !bytes.Contains(r.body, []byte("not found"))) {
			t.Errorf("bob GET %s: %d %s", s, r.code, r.body)
		}
		r = b.do(t, http.MethodDelete, "/v1/batch/"+s, "bob-key", nil)
		if r.code == http.StatusOK {
			t.Errorf("bob DELETE %s: %d %s", s, r.code, r.body)
		}
	}
	if j, _ := b.runner.Job(live); !engine.IsLive(j.Status) {
		t.Fatalf("alice's live job after bob's spellings: %+v", j)
	}
}

func TestAdversary_HostileBodies(t *testing.T) {
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
		{"unknown option", `{"targets":[{"url":"https://example.com","options":{"headers":{"X":"1"}}}]}`, 400},
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
		advNoLeak(t, c.name, r.body, "s3cretpw")
	}
	// No hostile body left a job behind.
	r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(targetsBody("https://example.com/ok")))
	wantCode(t, r, http.StatusAccepted)
}

// advPadded returns a valid submit body of exactly n bytes (n large).
func advPadded(n int) string {
	body := targetsBody("https://example.com/pad")
	return body[:len(body)-1] + strings.Repeat(" ", n-len(body)) + "}"
}

func TestAdversary_BodyCapEdges(t *testing.T) {
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
		body := advPadded(c.n)
		if len(body) != c.n {
			t.Fatalf("padded body is %d bytes, want %d", len(body), c.n)
		}
		var rd io.Reader = strings.NewReader(body)
		if c.chunked {
			rd = io.MultiReader(strings.NewReader(body[:10]), strings.NewReader(body[10:])) // no length known
		}
		req := advReq(t, b, http.MethodPost, "/v1/batch", rd, "Authorization", "Bearer alice-key")
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
		advNoLeak(t, c.name, data)
		if resp.StatusCode == 202 {
			// Same targets: the job is reused; make room for none else.
			continue
		}
	}
}

// advServer serves h on a loopback listener with the given timeouts, and
// returns its address.
func advServer(t *testing.T, h http.Handler, read, write time.Duration) (*http.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadTimeout: read, WriteTimeout: write, ErrorLog: nil}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return srv, ln.Addr().String()
}

// advRaw sends raw on a fresh connection and reads the answer.
func advRaw(t *testing.T, addr, raw string, stall bool) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	_ = stall // the rest of the body never comes
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(data)
}

func TestAdversary_SlowAndBrokenBodies(t *testing.T) {
	b := setup(t)
	_, addr := advServer(t, b.handler, 300*time.Millisecond, 5*time.Second)
	body := targetsBody("https://example.com/slow")
	// A body that stops coming: 408, and no socket address or Go error.
	resp, data := advRaw(t, addr, fmt.Sprintf("POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body)+50, body), true)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("stalled body: %d %s", resp.StatusCode, data)
	}
	advNoLeak(t, "stalled body", []byte(data), addr)
	// A chunked body that stops coming.
	resp, data = advRaw(t, addr, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"targets\":[{\"ur", true)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("stalled chunked body: %d %s", resp.StatusCode, data)
	}
	advNoLeak(t, "stalled chunked body", []byte(data), addr)
	// A malformed chunked encoding: 400 "bad request body".
	resp, data = advRaw(t, addr, "POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", false)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad chunked: %d %s", resp.StatusCode, data)
	}
	advNoLeak(t, "bad chunked", []byte(data), addr)
	// Chunked in tiny pieces, whole: accepted.
	var raw strings.Builder
	raw.WriteString("POST /v1/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
	for i := 0; i < len(body); i += 3 {
		p := body[i:min(i+3, len(body))]
		fmt.Fprintf(&raw, "%x\r\n%s\r\n", len(p), p)
	}
	raw.WriteString("0\r\n\r\n")
	resp, data = advRaw(t, addr, raw.String(), false)
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("tiny chunks: %d %s", resp.StatusCode, data)
	}
}

func TestAdversary_WaitValues(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, id)
	bad := []string{
		"-1s", "-1", "61s", "60.000000001s", "1m1s", "1h", "1e9h", "1e9", "9223372036854775807",
		"9223372036854775808ns", "99999999999999999999s", "99999999999999999999", "65535", "65536",
		"abc", "NaN", "Inf", "+Inf", "0x10", " 1s", "1s ", "1 s", "1s\x00", "30S", "٣٠", "1.5", "--1s", "1s1", "∞",
	}
	for _, v := range bad {
		start := time.Now()
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait="+url.QueryEscape(v), "alice-key", nil)
		if r.code != http.StatusBadRequest {
			t.Errorf("wait=%s: got %d, want 400: %s", v, r.code, r.body)
			continue
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("wait=%s: a 400 took %s", v, time.Since(start))
		}
		m := r.json(t)
		if h, _ := m["hint"].(string); h == "" {
			t.Errorf("wait=%s: no hint: %s", v, r.body)
		}
		advNoLeak(t, "wait="+v, r.body)
	}
	// Values that answer at once, or within their wait, with the job live.
	for _, v := range []string{"", "0", "0s", "-0", "+0s", "1ns", "1ms", "1", "200ms"} {
		start := time.Now()
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?wait="+url.QueryEscape(v), "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if s := r.json(t)["status"]; s != engine.StatusRunning {
			t.Errorf("wait=%s: status %v", v, s)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("wait=%s took %s", v, took)
		}
	}
}

func TestAdversary_ResultsAndIdxValues(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/<b>&\"x\"", "https://example.com/fail")
	b.waitTerminal(t, id)
	for _, v := range []string{"1", "true", "t", "TRUE", "True", "T"} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results="+v, "alice-key", nil)
		wantCode(t, r, http.StatusOK)
		if !bytes.Contains(r.body, []byte(`"result":`)) {
			t.Errorf("results=%s: no result: %s", v, r.body)
		}
	}
	for _, v := range []string{"", "0", "false", "no", "2", "yes", "%00", "1%00", strings.Repeat("1", 5000)} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"?results="+v, "alice-key", nil)
		if r.code != http.StatusOK && r.code != http.StatusBadRequest {
			t.Errorf("results=%.20s: %d %s", v, r.code, r.body)
		}
		if r.code == http.StatusOK && bytes.Contains(r.body, []byte(`"result":`)) {
			t.Errorf("results=%.20s: results included: %s", v, r.body)
		}
	}
	// The page text is written as it is: no HTML escaping.
	r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/0", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if !bytes.Contains(r.body, []byte(`<b>&`)) || bytes.Contains(r.body, []byte(`\u003c`)) {
		t.Errorf("target 0 escapes HTML: %s", r.body)
	}
	r = b.do(t, http.MethodGet, "/v1/batch/"+id+"/1", "alice-key", nil)
	wantCode(t, r, http.StatusOK)
	if bytes.Contains(r.body, []byte(`"result"`)) || !bytes.Contains(r.body, []byte(`"hint"`)) {
		t.Errorf("failed target 1: %s", r.body)
	}
	for _, idx := range []string{"2", "-1", "-0", "+0", "+1", "00", "01", "1e0", "0x0", "0.0", "1.", "%200", "0%20",
		"99999", "100000", "2147483648", "9223372036854775808", "99999999999999999999999999", "١", "０", "NaN", "0%00"} {
		r := b.do(t, http.MethodGet, "/v1/batch/"+id+"/"+idx, "alice-key", nil)
		if r.code != http.StatusNotFound {
			t.Errorf("idx %s: got %d, want 404: %s", idx, r.code, r.body)
			continue
		}
		wantCode(t, r, http.StatusNotFound)
		advNoLeak(t, "idx "+idx, r.body)
	}
}

func TestAdversary_OptionsRefusedNamed(t *testing.T) {
	b := setup(t) // Honoured nil: every option refused
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
		wantError(t, r, http.StatusUnprocessableEntity, c.name)
		m := r.json(t)
		if e := m["error"].(string); !strings.Contains(e, "1") {
			t.Errorf("%s: error does not name target 1: %s", c.name, e)
		}
	}
	// Unset-looking values set nothing: accepted.
	r := b.do(t, http.MethodPost, "/v1/batch", "alice-key", strings.NewReader(
		`{"targets":[{"url":"https://example.com/z","options":{"mode":"","grep":"","jq":"","context":null,"recover":false}}]}`))
	wantCode(t, r, http.StatusAccepted)
}

func TestAdversary_FetcherOptionChecks(t *testing.T) {
	f, err := fetcher.New(fetcher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := setupWith(t, nil, httpapi.Options{Honoured: f.Honours(), Check: f.Check})
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
		advNoLeak(t, c.name, r.body)
	}
}

func TestAdversary_AuthenticatorFailures(t *testing.T) {
	store, err := persistence.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r, err := engine.New(store, fakeFetch(nil), engine.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var logs syncBuffer
	auth := httpapi.AuthenticatorFunc(func(_ context.Context, key string) (*engine.Caller, string, error) {
		switch key {
		case "down":
			return nil, "", errors.New("dial tcp 10.9.8.7:5432: connect: db-secret-host refused")
		case "wrapped":
			return nil, "", fmt.Errorf("lookup of key %s: %w", key, httpapi.ErrUnknownKey)
		case "nilcaller":
			return nil, "standard", nil
		case "noname":
			return &engine.Caller{Workspace: "w"}, "standard", nil
		case "panic":
			panic("panic-value-secret " + key)
		}
		return nil, "", httpapi.ErrUnknownKey
	})
	h, err := httpapi.New(r, auth, httpapi.Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		code int
	}{{"down", 503}, {"wrapped", 401}, {"nilcaller", 401}, {"noname", 401}, {"panic", 500}, {"other", 401}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+missingID, nil)
		req.Header.Set("Authorization", "Bearer "+c.key)
		h.ServeHTTP(rec, req)
		if rec.Code != c.code {
			t.Errorf("key %s: got %d, want %d: %s", c.key, rec.Code, c.code, rec.Body)
		}
		advNoLeak(t, "key "+c.key, rec.Body.Bytes(), "10.9.8.7", "db-secret-host", "panic-value-secret")
	}
	for _, s := range []string{"10.9.8.7", "db-secret-host", "panic-value-secret"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("log holds %q:\n%s", s, logs.String())
		}
	}
}

func TestAdversary_PollerCrowd(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL, "https://example.com/after")
	b.waitRunning(t, id)
	const owners, strangers = 48, 48
	var started atomic.Int32
	type out struct {
		who  string
		code int
		body []byte
		took time.Duration
		err  error
	}
	results := make(chan out, owners+strangers)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}, Timeout: 40 * time.Second}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	poll := func(who, key string) {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+id+"?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		started.Add(1)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			results <- out{who: who, err: err}
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		results <- out{who, resp.StatusCode, data, time.Since(start), nil}
	}
	wg.Add(owners + strangers)
	for i := 0; i < owners; i++ {
		go poll("alice", "alice-key")
	}
	for i := 0; i < strangers; i++ {
		go poll("bob", "bob-key")
	}
	// Every stranger answers 404 at once, while the owners still wait.
	for i := 0; i < strangers; i++ {
		select {
		case o := <-results:
			if o.err != nil {
				t.Fatalf("%s: %v", o.who, o.err)
			}
			if o.who != "bob" || o.code != http.StatusNotFound {
				t.Fatalf("before the release: %s got %d %s", o.who, o.code, o.body)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("strangers' polls not answered: %d of %d", i, strangers)
		}
	}
	release := time.Now()
	b.release()
	for i := 0; i < owners; i++ {
		select {
		case o := <-results:
			if o.err != nil || o.code != http.StatusOK {
				t.Fatalf("%s: %d %v %s", o.who, o.code, o.err, o.body)
			}
			if !bytes.Contains(o.body, []byte(`"status":"done"`)) {
				t.Fatalf("owner's poll ended before the job: %s", o.body)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("owners' polls not answered %s after the job's end: %d of %d", time.Since(release), i, owners)
		}
	}
	wg.Wait()
}

func TestAdversary_LongPollsEndOnShutdown(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", holdURL)
	b.waitRunning(t, id)
	keys, _ := httpapi.ReadKeys(strings.NewReader(testKeys))
	var entered atomic.Int32
	api, err := httpapi.New(b.runner, keys, httpapi.Options{Wrap: func(route string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.Add(1)
			h.ServeHTTP(w, r)
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv, addr := advServer(t, api, 5*time.Second, 90*time.Second)
	srv.RegisterOnShutdown(api.EndWaits)
	const n = 16
	type out struct {
		code int
		body []byte
		err  error
	}
	results := make(chan out, n)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 70 * time.Second}
	defer client.CloseIdleConnections()
	for i := 0; i < n; i++ {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/batch/"+id+"?wait=60s", nil)
			req.Header.Set("Authorization", "Bearer alice-key")
			resp, err := client.Do(req)
			if err != nil {
				results <- out{err: err}
				return
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- out{resp.StatusCode, data, err}
		}()
	}
	waitFor(t, 10*time.Second, "every poll to reach the handler", func() bool { return entered.Load() == n })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("graceful stop held up by long-polls: %v after %s", err, time.Since(start))
	}
	for i := 0; i < n; i++ {
		o := <-results
		if o.err != nil || o.code != http.StatusOK || !bytes.Contains(o.body, []byte(`"status":"running"`)) {
			t.Fatalf("poll ended by shutdown: %d %v %s", o.code, o.err, o.body)
		}
	}
	// A later wait answers at once.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?wait=60s", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	done := make(chan struct{})
	go func() { api.ServeHTTP(rec, req); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a wait after EndWaits did not answer at once")
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("wait after EndWaits: %d %s", rec.Code, rec.Body)
	}
}

func TestAdversary_MetricsLabelsFixed(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/m")
	b.waitTerminal(t, id)
	paths := []string{
		"/v1/batch/" + id, "/v1/batch/" + id + "/0", "/v1/batch/" + id + "/9999", "/v1/batch/" + id + "/../x",
		"/v1/batch/" + missingID, "/v1/batch/%22%7D%0Aevil%7Bx%3D%22", "/v1/batch/a/b/c/d", "/v1/" + id,
		"/v1/batch/" + strings.Repeat("z", 3000), "/v1/batch?id=" + id, "/v1/batch/" + id + "?wait=1ms",
	}
	for _, p := range paths {
		for _, key := range []string{"alice-key", "bob-key", ""} {
			for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPut, http.MethodPatch} {
				b.do(t, m, p, key, nil)
			}
		}
	}
	scrape := b.do(t, http.MethodGet, "/metrics", "", nil)
	if scrape.code != http.StatusOK {
		t.Fatalf("/metrics: %d", scrape.code)
	}
	routes := map[string]bool{}
	re := regexp.MustCompile(`route="([^"]*)"`)
	for _, line := range strings.Split(string(scrape.body), "\n") {
		if strings.Contains(line, id) || strings.Contains(line, missingID) || strings.Contains(line, "evil") || strings.Contains(line, "zzzz") {
			t.Errorf("metric line holds request input: %.200s", line)
		}
		for _, m := range re.FindAllStringSubmatch(line, -1) {
			routes[m[1]] = true
		}
	}
	fixed := map[string]bool{"POST /v1/batch": true, "GET /v1/batch": true, "GET /v1/batch/{id}": true, "GET /v1/batch/{id}/{idx}": true,
		"DELETE /v1/batch/{id}": true, "/v1/": true}
	for r := range routes {
		if !fixed[r] {
			t.Errorf("route label %q is not one of the fixed ones", r)
		}
	}
	if len(routes) == 0 {
		t.Fatalf("no route labels in:\n%s", scrape.body)
	}
}

// advBlockingWriter is a ResponseWriter whose first Write blocks until
// released, so that a test can act in the middle of a streamed answer.
type advBlockingWriter struct {
	mu      sync.Mutex
	header  http.Header
	code    int
	body    bytes.Buffer
	writes  int
	first   chan struct{} // closed at the first Write
	proceed chan struct{} // the first Write returns once closed
}

func (w *advBlockingWriter) Header() http.Header { return w.header }
func (w *advBlockingWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code = code
	}
}
func (w *advBlockingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.code == 0 {
		w.code = 200
	}
	w.writes++
	n := w.writes
	w.body.Write(p)
	w.mu.Unlock()
	if n == 1 {
		close(w.first)
		<-w.proceed
	}
	return len(p), nil
}

func TestAdversary_ResultsJobDeletedMidStream(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/r0", "https://example.com/r1", "https://example.com/r2")
	b.waitTerminal(t, id)
	w := &advBlockingWriter{header: http.Header{}, first: make(chan struct{}), proceed: make(chan struct{})}
	req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+id+"?results=1", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		b.handler.ServeHTTP(w, req)
	}()
	select {
	case <-w.first:
	case <-time.After(10 * time.Second):
		t.Fatal("no first write")
	}
	// The job expires while its answer is being written.
	b.clock.Advance(engine.DefaultTTL + time.Hour)
	if _, ok := b.runner.Job(id); ok {
		t.Fatal("job still readable past its TTL")
	}
	close(w.proceed)
	var v any
	select {
	case v = <-panicked:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not return")
	}
	if v != http.ErrAbortHandler {
		t.Fatalf("answer cut short ended with %v, want http.ErrAbortHandler", v)
	}
	w.mu.Lock()
	body := w.body.String()
	code := w.code
	w.mu.Unlock()
	if code != http.StatusOK || !strings.HasPrefix(body, `{"id":"`+id) {
		t.Fatalf("cut answer: %d %q", code, body)
	}
	if strings.HasSuffix(body, "]}\n") || strings.Contains(body, "r2") {
		t.Fatalf("cut answer passes for a whole one: %q", body)
	}
	if s := b.logs.String(); strings.Contains(s, "example.com") {
		t.Fatalf("log holds a URL:\n%s", s)
	}
	// The metrics count it as a 500 under the fixed route.
	scrape := b.do(t, http.MethodGet, "/metrics", "", nil)
	if !bytes.Contains(scrape.body, []byte(`siftbatch_http_requests_total{code="500",route="GET /v1/batch/{id}"} 1`)) {
		t.Fatalf("cut answer not counted as 500:\n%s", scrape.body)
	}
	// Afterwards the job reads as missing, everywhere.
	for _, p := range []string{"/v1/batch/" + id, "/v1/batch/" + id + "/0", "/v1/batch/" + id + "?wait=1s"} {
		r := b.do(t, http.MethodGet, p, "alice-key", nil)
		wantError(t, r, http.StatusNotFound, "not found")
	}
}
