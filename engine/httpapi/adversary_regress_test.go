package httpapi_test

// Adversarial tests that FAIL against the current handler. Each names the
// rule it breaks.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
)

// TestAdversary_TwoAuthorizationHeaders: the API takes a key from
// "Authorization: Bearer KEY" only, and a key "otherwise presented" is 401
// (package doc; SPEC "Every /v1/ request carries Authorization: Bearer
// KEY"). Authorization is a singleton field (RFC 9110 §11.6.2): a request
// with two is ambiguous, and a proxy in front of the API that checks or
// logs the last one while the handler uses the first (Header.Get) acts
// for another caller than the one the handler serves. The handler answers
// as the first key's owner instead of refusing.
func TestAdversary_TwoAuthorizationHeaders(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "alice-key", "https://example.com/two-headers")
	b.waitTerminal(t, id)
	for _, pair := range [][2]string{
		{"Bearer alice-key", "Bearer bob-key"},
		{"Bearer alice-key", "Bearer nobody"},
		{"Bearer alice-key", "Basic Ym9iOmJvYi1rZXk="},
	} {
		req, err := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Authorization"] = []string{pair[0], pair[1]}
		r := send(t, b.client, req)
		if r.code != http.StatusUnauthorized && r.code != http.StatusBadRequest {
			t.Errorf("Authorization %q and %q: got %d, want 401 (or 400): %.80s", pair[0], pair[1], r.code, r.body)
		}
	}
	// The same through a POST: a job is stored for the first key's owner.
	req, _ := http.NewRequest(http.MethodPost, b.url+"/v1/batch", strings.NewReader(targetsBody("https://example.com/second")))
	req.Header["Authorization"] = []string{"Bearer bob-key", "Bearer alice-key"}
	if r := send(t, b.client, req); r.code == http.StatusAccepted {
		t.Errorf("POST with two keys accepted: %s", r.body)
	}
}

// TestAdversary_OneRequestKillsTheServer: rule 10 ("No input makes
// library code panic"; panics are isolated by supervision) and issue 13
// (a jq program that "runs out of bounds → that target fails with a
// hint"). Through the whole API (the fetcher's Honours and Check, as
// serve wires them), one POST by any key holder, with a jq program that
// Check accepts, makes the worker overflow its stack inside gojq's
// setpath: "fatal error: stack overflow" ends the process, which no
// supervision strategy can catch; every caller's jobs and long-polls die
// with it. Run in a child process.
func TestAdversary_OneRequestKillsTheServer(t *testing.T) {
	const program = `("\u0000" * 4000000 | explode) as $p | null | setpath($p; 1) | 1`
	if os.Getenv("SIFTBATCH_ADV_CHILD") == "killer" {
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
			println("ADV-SURVIVED refused at submit", r.code)
			return
		}
		id := r.json(t)["id"].(string)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		j, err := b.runner.Wait(ctx, id)
		println("ADV-SURVIVED", j.Status, err == nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAdversary_OneRequestKillsTheServer$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SIFTBATCH_ADV_CHILD=killer")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "ADV-SURVIVED") {
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
