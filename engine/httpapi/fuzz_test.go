package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/itchyny/gojq"

	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
)

// The fuzz targets serve each input in-process (no network hop) on the API
// of setup: at most 4 targets a job, a fake fetch that finishes at once.
// Their seeds are in testdata/fuzz/NAME and run in every go test.

// FuzzAPI_Submit posts arbitrary bodies to POST /v1/batch, on a server
// that honours the fetcher's options (grep and jq). No body makes the API
// panic or answer 5xx; every answer is one the contract names (202, 400,
// 413, 422, 429); and a 202 only answers a body that is valid per the
// contract, as validSubmitBody (written apart from the server's decoder)
// reads it (valid options included: only grep and jq, with values that
// compile), and a valid body is always answered 202 or 429.
func FuzzAPI_Submit(f *testing.F) {
	for _, seed := range []string{
		`{"targets":[{"url":"https://example.com/a"}]}`,
		`{"targets":[{"url":"http://example.com/b","options":{"mode":"text","question":"q","pages":"1-2","grep":"x","jq":".a","context":true,"recover":true}}]}`,
		`{"targets":[{"url":"https://example.com/1"},{"url":"https://example.com/2"},{"url":"https://example.com/3"},{"url":"https://example.com/4"},{"url":"https://example.com/5"}]}`,
		`{"targets":[]}`, `{}`, `null`, `[]`, `{"targets":null}`, `{"targets":[null]}`,
		`{"targets":[{"url":""}]}`, `{"targets":[{"url":"ftp://x/"}]}`, `{"targets":[{"url":"/rel"}]}`,
		`{"targets":[{"url":"https://example.com/","options":null}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"context":null}}]}`,
		`{"Targets":[{"URL":"https://example.com/"}]}`,
		`{"targets":[{"url":"https://example.com/a","url":"https://example.com/b"}]}`,
		"{\"targets\":[{\"url\":\"https://example.com/\xff\"}]}",
		`{"targets":[{"url":"https://example.com/"}]} {}`,
		`{"targets":[{"url":"https://user:pw@example.com/"}]}`,
		`{"targets":[{"url":"https://example.com:99999/"}]}`, `{"targets":[{"url":"https://example.com:0/"}]}`,
		`{"targets":[{"url":"https://example.com:00080/"}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"speed":1}}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"context":"yes"}}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"grep":"(?i)a+","jq":".x[]"}}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"grep":"a(","jq":""}}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"jq":".a |","mode":""}}]}`,
		`{"targets":[{"url":"https://example.com/","options":{"recover":false,"context":null,"pages":""}}]}`,
		strings.Repeat("[", 20000),
	} {
		f.Add([]byte(seed))
	}
	fe, err := fetcher.New(fetcher.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(fe.Close)
	// grep and jq; the API's log is not checked here: discarded, so that
	// it does not grow with every input.
	b := setupWith(f, nil, httpapi.Options{Honoured: fe.Honours(), Check: fe.Check, Log: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice-key")
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		valid := validSubmitBody(body, 4)
		switch rec.Code {
		case http.StatusAccepted:
			if !valid {
				t.Fatalf("202 for a body that is not valid: %q", body)
			}
		case http.StatusTooManyRequests:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			if valid {
				t.Fatalf("%d for a valid body %q: %s", rec.Code, body, rec.Body)
			}
		default:
			t.Fatalf("%d for %q: %s", rec.Code, body, rec.Body)
		}
		var e struct{ Error, Hint string }
		if rec.Code != http.StatusAccepted && (json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == "" || e.Hint == "") {
			t.Fatalf("%d answer is not a JSON error with a hint: %s", rec.Code, rec.Body)
		}
	})
}

// optionTypes are the option fields and their JSON types.
var optionTypes = map[string]string{
	"mode": "string", "question": "string", "pages": "string", "grep": "string", "jq": "string",
	"context": "bool", "recover": "bool",
}

// validSubmitBody reports whether body is a submit request the contract
// accepts, read strictly: UTF-8 JSON, one object, exactly the field names
// of the contract (case and all), no field twice, 1 to max targets, each
// with an absolute http(s) URL; options an object (or null) of known
// fields of the right types (or null). It shares nothing with the server's
// decoder.
func validSubmitBody(body []byte, max int) bool {
	if len(body) > httpapi.DefaultMaxBody || !utf8.Valid(body) || !json.Valid(body) || hasDuplicateKeys(body) {
		return false
	}
	var root map[string]json.RawMessage
	if json.Unmarshal(body, &root) != nil || root == nil || len(root) != 1 {
		return false
	}
	raw, ok := root["targets"]
	var targets []json.RawMessage
	if !ok || json.Unmarshal(raw, &targets) != nil || len(targets) < 1 || len(targets) > max {
		return false
	}
	for _, rt := range targets {
		var tg map[string]json.RawMessage
		if json.Unmarshal(rt, &tg) != nil || tg == nil {
			return false
		}
		var u string
		if json.Unmarshal(tg["url"], &u) != nil || u == "" {
			return false
		}
		if !absoluteHTTP(u) {
			return false
		}
		for k, v := range tg {
			switch k {
			case "url":
			case "options":
				if !validOptions(v) {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// absoluteHTTP reports whether u is an absolute http or https URL with a
// host, no user info, and a port, if any, of 1 to 65535.
func absoluteHTTP(u string) bool {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Hostname() == "" || p.User != nil {
		return false
	}
	port, err := strconv.Atoi(p.Port())
	return p.Port() == "" || err == nil && port >= 1 && port <= 65535
}

func validOptions(raw json.RawMessage) bool {
	if string(raw) == "null" {
		return true
	}
	var opts map[string]any
	if json.Unmarshal(raw, &opts) != nil || opts == nil {
		return false
	}
	for k, v := range opts {
		typ, ok := optionTypes[k]
		if !ok {
			return false
		}
		switch x := v.(type) {
		case nil:
		case string:
			ok = typ == "string" && honouredValue(k, x)
		case bool:
			// The server honours no bool option: context is set by any
			// value, recover by true.
			ok = typ == "bool" && k == "recover" && !x
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return true
}

// honouredValue reports whether the server under fuzz takes a string
// option: empty (no option), or grep an RE2 expression, or jq a program
// that compiles; the server honours no other.
func honouredValue(name, v string) bool {
	switch {
	case v == "":
		return true
	case name == "grep":
		_, err := regexp.Compile(v)
		return err == nil
	case name == "jq":
		q, err := gojq.Parse(v)
		if err == nil {
			_, err = gojq.Compile(q)
		}
		return err == nil
	}
	return false
}

// hasDuplicateKeys reports whether any object in the JSON text has a key
// twice. It reads the text with a stack of the objects it is in.
func hasDuplicateKeys(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type object struct {
		keys  map[string]bool
		atKey bool
		isObj bool
	}
	var stack []*object
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n := len(stack); n > 0 && stack[n-1].isObj && stack[n-1].atKey {
			if k, ok := tok.(string); ok {
				if stack[n-1].keys[k] {
					return true
				}
				stack[n-1].keys[k] = true
				stack[n-1].atKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &object{keys: map[string]bool{}, atKey: true, isObj: true})
			continue
		case json.Delim('['):
			stack = append(stack, &object{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 && stack[n-1].isObj {
			stack[n-1].atKey = true
		}
	}
}

// FuzzAPI_Paths sends GET, DELETE and other methods to /v1/batch/{id} and
// /v1/batch/{id}/{idx} with arbitrary id, idx and query strings (?wait=
// and ?results= among them), as each of the test callers. Nothing panics or answers 5xx; a 200 only answers the
// job's owner, naming the job by its exact id and a target by its plain
// decimal index; and no input string that is not an id ever reaches the
// log.
func FuzzAPI_Paths(f *testing.F) {
	b := setupWith(f, nil, httpapi.Options{MaxWait: 20 * time.Millisecond}) // a fuzzed ?wait= on the live job ends soon
	done := b.submit(f, "alice-key", "https://example.com/a", "https://example.com/b")
	b.waitTerminal(f, done)
	live := b.submit(f, "carol-key", holdURL, "https://example.com/c")
	for _, seed := range []struct {
		method, key byte
		id, idx     string
		withIdx     bool
		query       string
	}{
		{0, 0, done, "", false, ""}, {0, 0, done, "1", true, "results=1"}, {1, 2, live, "", false, ""},
		{0, 1, done, "0", true, ""}, {1, 1, done, "", false, ""}, {0, 0, strings.ToUpper(done), "0", true, ""},
		{0, 0, done, "+1", true, ""}, {0, 0, done, "01", true, ""}, {0, 0, "..", "", false, ""},
		{0, 0, done + "/..", "0", true, ""}, {0, 0, "", "", true, ""}, {0, 0, done, "", true, ""},
		{2, 0, done, "", false, ""}, {3, 0, done, "0", true, ""}, {0, 3, done, "", false, ""},
		{0, 0, "%zz", "%", true, "%zz;a=b"}, {0, 0, "a\x00b", "\xff", true, ""}, {0, 0, "https://secret.example/", "", false, ""},
		{0, 0, done, "99999999999999999999999", true, ""}, {0, 0, done, "-1", true, "results=maybe"},
		{0, 2, live, "", false, "wait=10ms"}, {0, 2, live, "", false, "wait=1h"}, {0, 0, done, "", false, "wait=-5s&results=1"},
		{0, 1, live, "", false, "wait=15ms"}, {0, 2, live, "", false, "wait=%ff"}, {0, 0, done, "", false, "wait=1e9"},
	} {
		f.Add(seed.method, seed.key, seed.id, seed.idx, seed.withIdx, seed.query)
	}
	methods := []string{http.MethodGet, http.MethodDelete, http.MethodHead, http.MethodPost, http.MethodPut}
	keys := []string{"alice-key", "bob-key", "carol-key", "nobody-key"}
	owner := map[string]string{done: "alice-key", live: "carol-key"}
	seen := 0 // how much of the log the inputs before have checked
	f.Fuzz(func(t *testing.T, m, k byte, id, idx string, withIdx bool, query string) {
		method, key := methods[int(m)%len(methods)], keys[int(k)%len(keys)]
		p := "/v1/batch/" + id
		if withIdx {
			p += "/" + idx
		}
		req := httptest.NewRequest(method, "/", nil)
		req.URL = &url.URL{Path: p, RawQuery: query}
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		b.handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", method, req.URL, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusOK {
			if owner[id] != key {
				t.Fatalf("%s %q as %s: 200 for a job that is not the caller's: %s", method, req.URL, key, rec.Body)
			}
			if withIdx && idx != "" { // "/v1/batch/{id}/" is the job's own path
				n, err := strconv.Atoi(idx)
				if err != nil || n < 0 || n > 1 || strconv.Itoa(n) != idx {
					t.Fatalf("%s %q: 200 for target %q", method, req.URL, idx)
				}
			}
		}
		all := b.Logs.String()
		logs := all[seen:]
		seen = len(all)
		for _, s := range []string{id, idx, query} {
			if len(s) >= 4 && owner[s] == "" && strings.Contains(logs, s) {
				t.Fatalf("the log carries the request's %q:\n%s", s, logs)
			}
		}
	})
}
