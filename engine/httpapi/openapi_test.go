package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/httpapi/internal/apispec"
)

// TestAPI_OpenAPIDocument: GET /v1/openapi.json answers the embedded
// OpenAPI 3.1 document without a key; it is valid, and describes exactly
// the handler's operations, each with its error answers.
func TestAPI_OpenAPIDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/v1/openapi.json", "", nil)
	wantCode(t, r, http.StatusOK)
	if !bytes.Equal(r.body, httpapi.OpenAPI()) {
		t.Fatal("the served document is not the embedded one")
	}
	// With a key, the same.
	if r2 := b.do(t, http.MethodGet, "/v1/openapi.json", "alice-key", nil); !bytes.Equal(r2.body, r.body) {
		t.Fatal("the document differs with a key")
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(r.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	var ops []string
	for p, item := range doc.Paths.Map() {
		for m, op := range item.Operations() {
			ops = append(ops, m+" "+p)
			codes := op.Responses.Map()
			for _, code := range []string{"400"} {
				if codes[code] == nil {
					t.Errorf("%s %s: no %s answer", m, p, code)
				}
			}
			if p != "/v1/openapi.json" && (codes["401"] == nil || codes["500"] == nil || codes["503"] == nil) {
				t.Errorf("%s %s: no 401, 500 or 503 answer", m, p)
			}
		}
	}
	slices.Sort(ops)
	want := []string{"DELETE /v1/batch/{id}", "GET /v1/batch", "GET /v1/batch/{id}", "GET /v1/batch/{id}/{idx}", "GET /v1/openapi.json", "POST /v1/batch"}
	if !slices.Equal(ops, want) {
		t.Fatalf("operations %q, want %q", ops, want)
	}
	// The returned document is a copy.
	c := httpapi.OpenAPI()
	c[0] = 'x'
	if httpapi.OpenAPI()[0] == 'x' {
		t.Fatal("OpenAPI returned the embedded bytes")
	}
}

// TestAPI_OpenAPIConformanceCatchesDrift: the conformance check
// (apispec) the package's test setup wraps every handler in fails an answer the document
// does not describe (a status, a field, a missing header, a wrong type)
// and a request the document refuses that the handler took; and passes
// answers that are as described.
func TestAPI_OpenAPIConformanceCatchesDrift(t *testing.T) {
	t.Parallel()
	spec, err := apispec.Load(httpapi.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	const job = `{"id":"x","status":"done","targets_total":0,"targets_done":0,"targets_failed":0,"created_at":1,"targets":[]}`
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		header                   map[string]string
		answer                   string
		want                     string // "" if it conforms
	}{
		{"job as described", "GET", "/v1/batch/x", "", 200, nil, job, ""},
		{"job with a field not described", "GET", "/v1/batch/x", "", 200, nil, strings.Replace(job, `"id"`, `"pad":1,"id"`, 1), "answer is not as the document says"},
		{"job without its targets", "GET", "/v1/batch/x", "", 200, nil, strings.Replace(job, `,"targets":[]`, "", 1), "answer is not as the document says"},
		{"job status not described", "GET", "/v1/batch/x", "", 200, nil, strings.Replace(job, `"done"`, `"finished"`, 1), "answer is not as the document says"},
		{"status code not described", "GET", "/v1/batch/x", "", 418, nil, `{"error":"teapot","hint":"h"}`, "answer is not as the document says"},
		{"429 without Retry-After", "GET", "/v1/batch/x", "", 429, nil, `{"error":"busy","hint":"h"}`, "answer is not as the document says"},
		{"429 with Retry-After", "GET", "/v1/batch/x", "", 429, map[string]string{"Retry-After": "5"}, `{"error":"busy","hint":"h"}`, ""},
		{"error of another shape", "GET", "/v1/batch/x", "", 404, nil, `{"message":"gone"}`, "answer is not as the document says"},
		{"202 without Location", "POST", "/v1/batch", `{"targets":[{"url":"https://a.example"}]}`, 202, nil, `{"id":"x","reused":false,"status":"/v1/batch/x","location":"/v1/batch/x"}`, "answer is not as the document says"},
		{"a request refused by the document, taken", "POST", "/v1/batch", `{"targets":[]}`, 202, map[string]string{"Location": "/v1/batch/x"}, `{"id":"x","reused":false,"status":"/v1/batch/x","location":"/v1/batch/x"}`, "took a request the document refuses"},
		{"outside the document, 200", "GET", "/v1/other", "", 200, nil, `{}`, "outside the document"},
		{"outside the document, 404", "GET", "/v1/other", "", 404, nil, `{"error":"not found","hint":"h"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := apispec.NewChecker(spec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body) // as the handler reads a submit
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(tc.answer))
			}))
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req := httptest.NewRequest(tc.method, tc.path, body)
			req.Header.Set("Authorization", "Bearer alice-key")
			rec := httptest.NewRecorder()
			c.ServeHTTP(rec, req)
			bad := c.Violations()
			switch {
			case tc.want == "" && len(bad) > 0:
				t.Fatalf("flagged: %q", bad)
			case tc.want != "" && (len(bad) == 0 || !strings.Contains(bad[0], tc.want)):
				t.Fatalf("got %q, want a violation with %q", bad, tc.want)
			}
			if c.Seen() != 1 {
				t.Fatalf("checked %d exchanges, want 1", c.Seen())
			}
		})
	}
}

// oapiCodegen is the pinned oapi-codegen of TestAPI_OpenAPICodegenClient:
// v2.8.0 or later handles the parts of OpenAPI 3.1 the document keeps to
// (see its info.description).
const oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"

// TestAPI_OpenAPICodegenClient: a client that oapi-codegen generates from
// the served document, in a module of its own that pulls
// github.com/oapi-codegen/runtime itself, compiles and completes a
// session against the API on a loopback server: submit (with an
// Idempotency-Key, twice), long-poll until the job has ended, read the
// results, one target, the list, a missing job. Its requests and the
// answers go through the conformance check too. Tier codegen (make
// test/codegen): it needs the module proxy, and a minute to build.
func TestAPI_OpenAPICodegenClient(t *testing.T) {
	testkit.RequireTier(t, "codegen")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	b := setup(t)
	dir := t.TempDir()
	files := map[string][]byte{
		"go.mod":       []byte("module codegentest\n\ngo 1.26\n"),
		"openapi.json": httpapi.OpenAPI(),
	}
	for _, name := range []string{"oapi-codegen.yaml", "main.go"} {
		data, err := os.ReadFile(filepath.Join("testdata", "codegen", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "batchclient"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a failure deadline: downloads and builds
	defer cancel()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	run(goBin, "run", oapiCodegen, "-config", "oapi-codegen.yaml", "openapi.json")
	run(goBin, "mod", "tidy")
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(mod, []byte("github.com/oapi-codegen/runtime ")) {
		t.Fatalf("the generated client's module does not require oapi-codegen/runtime:\n%s", mod)
	}
	run(goBin, "build", "-o", "session", ".")
	out := run(filepath.Join(dir, "session"), b.url, "alice-key", "https://example.com/a", "https://example.com/fail", "https://example.com/c")

	var rep struct {
		ID, Location, Again, Status, Target0 string
		Reused, Listed                       bool
		Polls, Missing                       int
		Contents, Failed                     []string
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the session's report: %v: %s", err, out)
	}
	switch {
	case rep.ID == "" || rep.Reused || rep.Location != "/v1/batch/"+rep.ID:
		t.Fatalf("submit: %+v", rep)
	case rep.Again != rep.ID:
		t.Fatalf("the same Idempotency-Key and body made job %s, then %s", rep.ID, rep.Again)
	case rep.Status != engine.StatusPartial || rep.Polls < 1:
		t.Fatalf("waited %d polls for status %q, want partial", rep.Polls, rep.Status)
	case !slices.Equal(rep.Contents, []string{"page https://example.com/a", "page https://example.com/c"}):
		t.Fatalf("results %q", rep.Contents)
	case len(rep.Failed) != 1 || rep.Failed[0] != "check the URL":
		t.Fatalf("failed targets' hints %q", rep.Failed)
	case rep.Target0 != "page https://example.com/a" || !rep.Listed || rep.Missing != http.StatusNotFound:
		t.Fatalf("target, list, missing: %+v", rep)
	}
	// The job is alice's, as the runner has it.
	if j, ok := b.Runner.Job(rep.ID); !ok || j.Caller != "alice" || j.TargetsTotal != 3 {
		t.Fatalf("the runner's job: %+v %v", j, ok)
	}
}

// TestAPI_OpenAPI429sDescribed: every operation that takes a key answers
// 429 as the document's TooManyRequests describes it (Retry-After
// required, described), and each 429 error the package writes (found in
// its source: writeError(w, http.StatusTooManyRequests, "…")) has an
// example there and is named in its description: a limit added without
// its 429 described fails here.
func TestAPI_OpenAPI429sDescribed(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	tmr := doc.Components.Responses["TooManyRequests"].Value
	ra := tmr.Headers["Retry-After"]
	if ra == nil || !ra.Value.Required || ra.Value.Description == "" {
		t.Fatalf("TooManyRequests: Retry-After not required or not described")
	}
	for p, item := range doc.Paths.Map() {
		for m, op := range item.Operations() {
			if p == "/v1/openapi.json" {
				continue
			}
			if r := op.Responses.Map()["429"]; r == nil || r.Ref != "#/components/responses/TooManyRequests" {
				t.Errorf("%s %s: no 429 TooManyRequests answer", m, p)
			}
		}
	}
	examples := map[string]bool{}
	for _, ex := range tmr.Content["application/json"].Examples {
		v, _ := ex.Value.Value.(map[string]any)
		e, _ := v["error"].(string)
		examples[e] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`StatusTooManyRequests,\s*"([^"]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			found++
			e := string(m[1])
			if !examples[e] || !strings.Contains(*tmr.Description, `"`+e+`"`) {
				t.Errorf("429 %q (%s): no example in the document's TooManyRequests, or not named in its description", e, f)
			}
		}
	}
	if found < 5 {
		t.Fatalf("found %d 429 errors in the package's source: the search is broken", found)
	}
}
