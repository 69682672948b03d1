package httpapi_test

import (
	"net/http"
	"net/url"
	"slices"
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
// caller's own jobs only, a 400 with an error and a hint, or (a caller
// parameter from a standard key) a 403; never a 5xx. The same query from
// an admin key is never a 403, and without a caller parameter lists its
// own jobs only.
func FuzzAPI_List(f *testing.F) {
	b := setupWith(f, nil, httpapi.Options{})
	own := b.submit(f, "alice-key", "https://example.com/a")
	b.waitTerminal(f, own)
	other := b.submit(f, "bob-key", "https://example.com/b")
	b.waitTerminal(f, other)
	for _, seed := range []string{"", "status=live", "status=terminal&limit=1", "limit=100", "cursor=AAAA", "cursor=%zz", "limit=-1", "status=", "limit=1&limit=2", "status=done;x",
		"caller=*", "caller=alice", "caller=", "caller=%ff", "caller=*&status=done&limit=1", "caller=bob&caller=alice"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		u, err := url.Parse("http://h/v1/batch?" + query)
		if err != nil {
			t.Skip("no client sends it")
		}
		q, qerr := url.ParseQuery(u.RawQuery) // what is sent: no fragment
		_, byCaller := q["caller"]
		for _, key := range []string{"alice-key", "root-key"} {
			r := b.do(t, http.MethodGet, "/v1/batch?"+query, key, nil)
			switch r.code {
			case http.StatusOK:
				if key == "alice-key" && byCaller {
					t.Fatalf("alice listed with %q", query)
				}
				for _, j := range r.json(t)["jobs"].([]any) {
					id := j.(map[string]any)["id"]
					if (key == "alice-key" && id == other) || (key == "root-key" && !byCaller && (id == own || id == other)) {
						t.Fatalf("%s listed another caller's job with %q", key, query)
					}
				}
			case http.StatusBadRequest, http.StatusForbidden:
				if strings.HasPrefix(string(r.body), "400 Bad Request") {
					return // net/http refused the request line before the handler
				}
				if r.code == http.StatusForbidden && (key == "root-key" || !byCaller || qerr != nil) {
					t.Fatalf("%s: 403 for %q", key, query)
				}
				m := r.json(t)
				if m["error"] == "" || m["hint"] == "" {
					t.Fatalf("%d without error and hint: %s", r.code, r.body)
				}
			default:
				t.Fatalf("%s %q: %d %s", key, query, r.code, r.body)
			}
		}
	})
}

// listIDs pages through GET path (a query without cursor) with key and
// returns each job's id and caller ("" when the answer has none).
func listIDs(t *testing.T, b *bundle, path, key string) (ids, callers []string) {
	t.Helper()
	cursor := ""
	for range 50 {
		p := path
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.do(t, http.MethodGet, p, key, nil)
		if r.code != http.StatusOK {
			t.Fatalf("%s: %d %s", p, r.code, r.body)
		}
		m := r.json(t)
		for _, j := range m["jobs"].([]any) {
			job := j.(map[string]any)
			ids = append(ids, job["id"].(string))
			c, _ := job["caller"].(string)
			callers = append(callers, c)
		}
		next, _ := m["next_cursor"].(string)
		if next == "" {
			return ids, callers
		}
		cursor = next
	}
	t.Fatal("the cursor never ended")
	return nil, nil
}

// TestAPI_ListByCaller: an admin key lists any caller's jobs with
// ?caller=NAME and every caller's with ?caller=*, each job with its
// caller, newest first, paged, filtered; its plain list is its own jobs;
// any other key gets 403 for any caller parameter, its own name included,
// and never another caller's job, not even with the admin's cursor; reads
// by id stay the owner's, admin or not.
func TestAPI_ListByCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var all, callers []string // newest first
	for i, key := range []string{"alice-key", "bob-key", "alice-key", "carol-key", "root-key", "bob-key"} {
		u := "https://example.com/" + string(rune('a'+i))
		if i == 2 {
			u = "https://example.com/fail"
		}
		id := b.submit(t, key, u)
		b.waitTerminal(t, id)
		all = append([]string{id}, all...)
		callers = append([]string{strings.TrimSuffix(key, "-key")}, callers...)
		b.Clock.Advance(time.Millisecond)
	}
	pick := func(name string) []string {
		var out []string
		for i, c := range callers {
			if c == name {
				out = append(out, all[i])
			}
		}
		return out
	}

	ids, cs := listIDs(t, b, "/v1/batch?caller=*&limit=2", "root-key")
	if !slices.Equal(ids, all) || !slices.Equal(cs, callers) {
		t.Fatalf("caller=*: %v %v, want %v %v", ids, cs, all, callers)
	}
	for _, name := range []string{"alice", "bob", "carol", "root", "nobody"} {
		ids, cs := listIDs(t, b, "/v1/batch?caller="+name+"&limit=1", "root-key")
		if !slices.Equal(ids, pick(name)) {
			t.Fatalf("caller=%s: %v, want %v", name, ids, pick(name))
		}
		for _, c := range cs {
			if c != name {
				t.Fatalf("caller=%s listed a job of %q", name, c)
			}
		}
	}
	if ids, cs := listIDs(t, b, "/v1/batch?limit=5", "root-key"); !slices.Equal(ids, pick("root")) || cs[0] != "" {
		t.Fatalf("the admin's plain list: %v %v, want its own %v without callers", ids, cs, pick("root"))
	}
	if ids, _ := listIDs(t, b, "/v1/batch?caller=*&status=failed", "root-key"); !slices.Equal(ids, []string{all[3]}) {
		t.Fatalf("caller=*&status=failed: %v, want %v", ids, all[3])
	}
	wantError(t, b.do(t, http.MethodGet, "/v1/batch?caller=", "root-key", nil), http.StatusBadRequest, "bad caller: empty")
	wantError(t, b.do(t, http.MethodGet, "/v1/batch?caller=*&status=nope", "root-key", nil), http.StatusBadRequest, "")

	// Every other key: 403, whatever the name; nothing listed.
	for _, key := range []string{"alice-key", "bob-key", "carol-key"} {
		for _, name := range []string{"*", "alice", "bob", "carol", "root", "", "nobody"} {
			r := b.do(t, http.MethodGet, "/v1/batch?caller="+url.QueryEscape(name), key, nil)
			wantError(t, r, http.StatusForbidden, "listing by caller needs an admin key")
			if strings.Contains(string(r.body), all[0][:8]) {
				t.Fatalf("%s: a 403 that names a job: %s", key, r.body)
			}
		}
	}
	// The admin's cursor, in alice's hands, lists alice's jobs only.
	r := b.do(t, http.MethodGet, "/v1/batch?caller=*&limit=1", "root-key", nil)
	next := r.json(t)["next_cursor"].(string)
	ids, _ = listIDs(t, b, "/v1/batch?cursor="+url.QueryEscape(next)+"&limit=100", "alice-key")
	for _, id := range ids {
		if !slices.Contains(pick("alice"), id) {
			t.Fatalf("alice listed %s through the admin's cursor", id)
		}
	}
	// Reads by id: the owner's only, for an admin too.
	for _, id := range pick("alice") {
		wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id, "root-key", nil), http.StatusNotFound, "")
		wantError(t, b.do(t, http.MethodGet, "/v1/batch/"+id, "bob-key", nil), http.StatusNotFound, "")
	}
}
