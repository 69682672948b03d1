package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
)

// Test keys: alice and bob are standard callers, carol is restricted.
const testKeys = `# name key [restricted]
alice alice-key
bob   bob-key
carol carol-key restricted
`

// missingID is a well-formed job id that no test job has.
const missingID = "00112233445566778899aabbccddeeff"

// fakeFetch answers from the URL: ".../hold" waits for release (or the
// runner's close), ".../fail" fails with a hint, anything else succeeds.
func fakeFetch(release <-chan struct{}) engine.FetchFunc {
	return func(ctx context.Context, c *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			select {
			case <-release:
			case <-ctx.Done():
				return engine.Result{}, ctx.Err()
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		}
		return engine.Result{Content: "<p>page " + t.URL, Meta: map[string]any{"status": 200}}, nil
	}
}

// response is an answer, its body read.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v: %s", r.code, err, r.body)
	}
	return m
}

// send does req with c and reads the whole answer.
func send(t testing.TB, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

func targetsBody(urls ...string) string {
	ts := make([]engine.Target, len(urls))
	for i, u := range urls {
		ts[i] = engine.Target{URL: u}
	}
	data, _ := json.Marshal(map[string]any{"targets": ts})
	return string(data)
}

func wantCode(t *testing.T, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %d, want %d: %s", r.code, code, r.body)
	}
}

// roundTripFunc is a function that is an [http.RoundTripper].
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
