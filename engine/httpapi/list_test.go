package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sift/batch/engine/httpapi"
)

// TestAPI_List: GET /v1/batch lists the caller's own jobs, newest first,
// a page at a time; bob never sees alice's jobs, not even with her cursor;
// bad parameters are 400 with a hint.
func TestAPI_List(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var alice []string
	for _, u := range []string{"https://example.com/a", "https://example.com/b", "https://example.com/fail"} {
		id := b.submit(t, "alice-key", u)
		b.waitTerminal(t, id)
		alice = append(alice, id)
		b.Clock.Advance(time.Millisecond)
	}
	bob := b.submit(t, "bob-key", "https://example.com/c")
	b.waitTerminal(t, bob)

	var got []string
	cursor := ""
	for range 10 {
		q := url.Values{"limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := b.do(t, http.MethodGet, "/v1/batch?"+q.Encode(), "alice-key", nil)
		if r.code != http.StatusOK {
			t.Fatalf("%d %s", r.code, r.body)
		}
		m := r.json(t)
		for _, j := range m["jobs"].([]any) {
			job := j.(map[string]any)
			if _, ok := job["targets"]; ok {
				t.Fatalf("a list holds summaries, not targets: %s", r.body)
			}
			got = append(got, job["id"].(string))
		}
		next, _ := m["next_cursor"].(string)
		if next == "" {
			break
		}
		if cursor == "" {
			// bob with alice's cursor: his own jobs only
			rb := b.do(t, http.MethodGet, "/v1/batch?cursor="+url.QueryEscape(next), "bob-key", nil)
			for _, j := range rb.json(t)["jobs"].([]any) {
				if id := j.(map[string]any)["id"].(string); id != bob {
					t.Fatalf("bob listed %s through alice's cursor", id)
				}
			}
		}
		cursor = next
	}
	if len(got) != 3 || got[0] != alice[2] || got[1] != alice[1] || got[2] != alice[0] {
		t.Fatalf("listed %v, want %v newest first", got, alice)
	}
	r := b.do(t, http.MethodGet, "/v1/batch?status=failed", "alice-key", nil)
	if jobs := r.json(t)["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["id"] != alice[2] {
		t.Fatalf("status=failed: %s", r.body)
	}
	r = b.do(t, http.MethodGet, "/v1/batch", "bob-key", nil)
	if jobs := r.json(t)["jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["id"] != bob {
		t.Fatalf("bob: %s", r.body)
	}
	if _, ok := r.json(t)["next_cursor"]; ok {
		t.Fatalf("next_cursor on the last page: %s", r.body)
	}
	for _, q := range []string{"status=nope", "limit=0", "limit=101", "limit=x", "cursor=!!", "cursor=AAAA", "color=red"} {
		wantError(t, b.do(t, http.MethodGet, "/v1/batch?"+q, "alice-key", nil), http.StatusBadRequest, "")
	}
	if r := b.do(t, http.MethodGet, "/v1/batch", "", nil); r.code != http.StatusUnauthorized {
		t.Fatalf("no key: %d", r.code)
	}
}

// FuzzAPI_List fuzzes the list's query: any query is a 200 with the
// caller's own jobs only, or a 400 with an error and a hint; never a 5xx.
func FuzzAPI_List(f *testing.F) {
	b := setupWith(f, nil, httpapi.Options{})
	own := b.submit(f, "alice-key", "https://example.com/a")
	b.waitTerminal(f, own)
	other := b.submit(f, "bob-key", "https://example.com/b")
	b.waitTerminal(f, other)
	for _, seed := range []string{"", "status=live", "status=terminal&limit=1", "limit=100", "cursor=AAAA", "cursor=%zz", "limit=-1", "status=", "limit=1&limit=2", "status=done;x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		if _, err := url.Parse("http://h/v1/batch?" + query); err != nil {
			t.Skip("no client sends it")
		}
		r := b.do(t, http.MethodGet, "/v1/batch?"+query, "alice-key", nil)
		switch r.code {
		case http.StatusOK:
			for _, j := range r.json(t)["jobs"].([]any) {
				if j.(map[string]any)["id"] == other {
					t.Fatalf("alice listed bob's job with %q", query)
				}
			}
		case http.StatusBadRequest:
			if strings.HasPrefix(string(r.body), "400 Bad Request") {
				return // net/http refused the request line before the handler
			}
			m := r.json(t)
			if m["error"] == "" || m["hint"] == "" {
				t.Fatalf("400 without error and hint: %s", r.body)
			}
		default:
			t.Fatalf("%q: %d %s", query, r.code, r.body)
		}
	})
}
