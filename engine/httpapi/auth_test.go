package httpapi_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// TestKeys_ReadAndAuthenticate: a keys file names each caller's key and
// class (standard, restricted, admin); a key is known exactly as written;
// a malformed file is refused without its error showing a key.
func TestKeys_ReadAndAuthenticate(t *testing.T) {
	t.Parallel()
	kr, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if c, class, err := kr.Authenticate(ctx, "carol-key"); err != nil || c.Name != "carol" || class != httpapi.ClassRestricted {
		t.Fatalf("carol: %+v %q %v", c, class, err)
	}
	if c, class, err := kr.Authenticate(ctx, "alice-key"); err != nil || c.Name != "alice" || class != httpapi.ClassStandard || len(c.KeySHA256) != 64 {
		t.Fatalf("alice: %+v %q %v", c, class, err)
	}
	admin, err := httpapi.ReadKeys(strings.NewReader("root root-key admin\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, class, err := admin.Authenticate(ctx, "root-key"); err != nil || c.Name != "root" || class != httpapi.ClassAdmin {
		t.Fatalf("root: %+v %q %v", c, class, err)
	}
	// As Notepad saves it: a byte order mark, CRLF, a no-break space.
	edited, err := httpapi.ReadKeys(strings.NewReader("\ufeffdave\u00a0dave-key\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, _, err := edited.Authenticate(ctx, "dave-key"); err != nil || c.Name != "dave" {
		t.Fatalf("dave: %+v %v", c, err)
	}
	for _, bad := range []string{"", "alice-key ", "ALICE-KEY", "nobody"} {
		if _, _, err := kr.Authenticate(ctx, bad); !errors.Is(err, httpapi.ErrUnknownKey) {
			t.Errorf("%q: %v, want ErrUnknownKey", bad, err)
		}
	}
	for _, bad := range []string{"onlyname\n", "a k1 root\n", "a k1\nb k1\n", "# nothing\n", "a b c d\n"} {
		_, err := httpapi.ReadKeys(strings.NewReader(bad))
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "k1") {
			t.Errorf("error %q shows a key", err)
		}
	}
	// Each error names the line and what is wrong with it, never a word
	// that may be a key.
	for bad, want := range map[string]string{
		"alice\n":                        `keys line 1: one word only (a name, or a key, alone); want NAME KEY [restricted|admin]`,
		"\na k1 admn\n":                  `keys line 2: the third word, "admn", is not restricted or admin; want NAME KEY [restricted|admin]`,
		"a k1 standard\n":                `keys line 1: the third word is "standard", the default class: leave it out; want NAME KEY [restricted|admin]`,
		"a k1 k2-secret\n":               `keys line 1: the third word is not restricted or admin (not shown: it may be a key); want NAME KEY [restricted|admin]`,
		"a k1 SecretKeyOfLetters\n":      `keys line 1: the third word is not restricted or admin (not shown: it may be a key); want NAME KEY [restricted|admin]`,
		"# c\na k1 admin extra-secret\n": `keys line 2: 4 words, not 2 or 3; want NAME KEY [restricted|admin]`,
	} {
		_, err := httpapi.ReadKeys(strings.NewReader(bad))
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", bad, err, want)
		}
	}
}

// TestAPI_AuthNeedsABearerKey: every route answers 401 with
// WWW-Authenticate: Bearer unless the request carries "Authorization:
// Bearer KEY" with a known key; the scheme is case-insensitive; a cookie
// or a query parameter is not a key.
func TestAPI_AuthNeedsABearerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, header := range map[string]string{
		"missing":     "",
		"unknown key": "Bearer nobody-key",
		"empty key":   "Bearer ",
		"basic":       "Basic YWxpY2U6YWxpY2Uta2V5",
		"bare key":    "alice-key",
		"token":       "Token alice-key",
		"no space":    "Beareralice-key",
	} {
		t.Run(name, func(t *testing.T) {
			for _, rt := range []struct{ method, path string }{
				{http.MethodPost, "/v1/batch"},
				{http.MethodGet, "/v1/batch/0123456789abcdef0123456789abcdef"},
				{http.MethodGet, "/v1/batch/0123456789abcdef0123456789abcdef/0"},
				{http.MethodDelete, "/v1/batch/0123456789abcdef0123456789abcdef"},
				{http.MethodGet, "/v1/other"},
			} {
				req, _ := http.NewRequest(rt.method, b.url+rt.path, strings.NewReader(targetsBody("https://example.com/")))
				if header != "" {
					req.Header.Set("Authorization", header)
				}
				resp, err := b.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r := response{code: resp.StatusCode, header: resp.Header, body: body}
				wantError(t, r, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s: no WWW-Authenticate: Bearer", rt.method, rt.path)
				}
			}
		})
	}
	t.Run("scheme is case-insensitive", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/0123456789abcdef0123456789abcdef", nil)
		req.Header.Set("Authorization", "bearer alice-key")
		resp, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("got %d, want 404", resp.StatusCode)
		}
	})
	t.Run("a cookie or a query parameter is not a key", func(t *testing.T) {
		for _, req := range []*http.Request{
			func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+missingID, nil)
				r.AddCookie(&http.Cookie{Name: "key", Value: "alice-key"})
				r.AddCookie(&http.Cookie{Name: "Authorization", Value: "Bearer alice-key"})
				return r
			}(),
			func() *http.Request {
				r, _ := http.NewRequest(http.MethodGet, b.url+"/v1/batch/"+missingID+"?key=alice-key&access_token=alice-key", nil)
				return r
			}(),
		} {
			wantError(t, send(t, b.client, req), http.StatusUnauthorized, "unauthorized")
		}
	})
}

// TestAPI_AuthRefusesAKeyPresentedOtherwise: a key presented any other way
// than "Authorization: Bearer KEY" (a near miss, another scheme, Basic, a
// cookie, a query parameter, another header, junk, a huge key) is refused
// on every route, 401 as JSON (or 400/431 where net/http refuses the
// header), and no answer echoes the key; nothing reaches the job.
func TestAPI_AuthRefusesAKeyPresentedOtherwise(t *testing.T) {
	t.Parallel()
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
			wantNoLeak(t, what, data, "alice-key")
		}
	}
	// Nothing above reached the job: it is still there, and nothing
	// was submitted or cancelled.
	j, ok := b.Runner.Job(id)
	if !ok || j.Status == engine.StatusCancelled {
		t.Fatalf("alice's job after the refusals: %+v %v", j, ok)
	}
}

// TestAPI_AuthRefusesTwoAuthorizationHeaders: the API takes a key from
// "Authorization: Bearer KEY" only, and a key otherwise presented is 401.
// Authorization is a singleton field (RFC 9110 §11.6.2): a request with
// two is ambiguous, and a proxy in front of the API that checks or logs
// the last one while the handler used the first would act for another
// caller than the one the handler serves. Such a request is refused, on a
// read and on a submit.
func TestAPI_AuthRefusesTwoAuthorizationHeaders(t *testing.T) {
	t.Parallel()
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
	// The same through a POST: no job is stored for either key's owner.
	req, _ := http.NewRequest(http.MethodPost, b.url+"/v1/batch", strings.NewReader(targetsBody("https://example.com/second")))
	req.Header["Authorization"] = []string{"Bearer bob-key", "Bearer alice-key"}
	if r := send(t, b.client, req); r.code == http.StatusAccepted {
		t.Errorf("POST with two keys accepted: %s", r.body)
	}
}

// TestAPI_Authenticator: the handler asks the authenticator about the
// Bearer key only. ErrUnknownKey (wrapped or not), a caller without a
// name, or no caller is 401; any other error is 503 (with Retry-After)
// and a panic 500, both
// logged without their text; no answer or log line holds what the
// authenticator's error or panic said. New refuses a nil authenticator
// or runner and a negative MaxBody.
func TestAPI_Authenticator(t *testing.T) {
	t.Parallel()
	r := enginetest.Setup(t, enginetest.OKFetch, engine.Config{}).Runner
	var mu sync.Mutex
	var seen []string
	auth := httpapi.AuthenticatorFunc(func(_ context.Context, key string) (*engine.Caller, string, error) {
		mu.Lock()
		seen = append(seen, key)
		mu.Unlock()
		switch key {
		case "down":
			return nil, "", errors.New("dial tcp 10.9.8.7:5432: connect: db-secret-host refused")
		case "wrapped":
			return nil, "", fmt.Errorf("lookup of key %s: %w", key, httpapi.ErrUnknownKey)
		case "nilcaller":
			return nil, "standard", nil
		case "nameless":
			return &engine.Caller{Workspace: "w"}, "standard", nil
		case "empty": // a zero caller and no class
			return &engine.Caller{}, "", nil
		case "panic":
			panic("panic-value-secret " + key)
		}
		return nil, "", httpapi.ErrUnknownKey
	})
	var logs testkit.SyncBuffer
	h, err := httpapi.New(r, auth, httpapi.Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"10.9.8.7", "db-secret-host", "panic-value-secret"}
	cases := []struct {
		key  string
		code int
	}{{"down", 503}, {"wrapped", 401}, {"nilcaller", 401}, {"nameless", 401}, {"empty", 401}, {"panic", 500}, {"other", 401}}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+missingID, nil)
		req.Header.Set("Authorization", "Bearer "+c.key)
		h.ServeHTTP(rec, req)
		if rec.Code != c.code {
			t.Errorf("key %s: got %d, want %d: %s", c.key, rec.Code, c.code, rec.Body)
		}
		if ra := rec.Header().Get("Retry-After"); (c.code == 503) != (ra == "5") {
			t.Errorf("key %s: %d with Retry-After %q; want 5 on a 503 only", c.key, rec.Code, ra)
		}
		wantNoLeak(t, "key "+c.key, rec.Body.Bytes(), secrets...)
	}
	if !strings.Contains(logs.String(), "authenticate failed") {
		t.Errorf("the failed authenticator is not logged:\n%s", logs.String())
	}
	testkit.RequireNoneOf(t, logs.String(), secrets...)
	if _, err := httpapi.New(r, nil, httpapi.Options{}); err == nil {
		t.Error("New took a nil authenticator")
	}
	if _, err := httpapi.New(nil, auth, httpapi.Options{}); err == nil {
		t.Error("New took a nil runner")
	}
	if _, err := httpapi.New(r, auth, httpapi.Options{MaxBody: -1}); err == nil {
		t.Error("New took a negative MaxBody")
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(seen)
	want := []string{"down", "empty", "nameless", "nilcaller", "other", "panic", "wrapped"}
	if !slices.Equal(seen, want) {
		t.Errorf("the authenticator saw %q, want %q", seen, want)
	}
}

// TestKeys_StarIsNoCallerName: "*" means every caller in a list by caller
// (GET /v1/batch?caller=*), so no caller may be named "*": its jobs could
// never be listed as one caller's (an admin's ?caller=* lists everyone's),
// and the dashboard's caller filter "*" is every caller too. ReadKeys
// refuses the name, naming the line.
func TestKeys_StarIsNoCallerName(t *testing.T) {
	_, err := httpapi.ReadKeys(strings.NewReader("root root-key admin\n* star-key\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "star-key") {
		t.Fatalf("a caller named *: %v, want an error that names line 2 and not the key", err)
	}
}

// TestLoadKeys_RefusesShortKeys: a key file's key under 16 characters is
// refused at start, the error naming its line and never the key.
func TestLoadKeys_RefusesShortKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "keys")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := httpapi.LoadKeys(write("# keys\nalice alice-secret-key\nbob x\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3") || strings.Contains(err.Error(), " x") {
		t.Fatalf("one-character key: %v, want an error naming line 3 and not the key", err)
	}
	_, err = httpapi.LoadKeys(write("bob b0b-sixteen-chars restricted\ncarol " + strings.Repeat("é", 15) + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("15-character key: %v, want an error naming line 2", err)
	}
	kr, err := httpapi.LoadKeys(write("alice alice-secret-key\n")) // 16: the shortest taken
	if err != nil {
		t.Fatal(err)
	}
	if c, _, err := kr.Authenticate(context.Background(), "alice-secret-key"); err != nil || c.Name != "alice" {
		t.Fatalf("Authenticate: %v, %v", c, err)
	}
}
