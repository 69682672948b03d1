package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

func TestKeys(t *testing.T) {
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
}

// TestAPI_Authenticator: the handler asks the authenticator about the
// Bearer key only; an error other than ErrUnknownKey is 503 and logged
// without its text; a caller without a name is refused.
func TestAPI_Authenticator(t *testing.T) {
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
	var seen []string
	auth := httpapi.AuthenticatorFunc(func(_ context.Context, key string) (*engine.Caller, string, error) {
		seen = append(seen, key)
		switch key {
		case "down":
			return nil, "", errors.New("keys db at 10.0.0.7: connection refused")
		case "nameless":
			return &engine.Caller{}, "", nil
		}
		return nil, "", fmt.Errorf("lookup: %w", httpapi.ErrUnknownKey)
	})
	var logs syncBuffer
	h, err := httpapi.New(r, auth, httpapi.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for key, code := range map[string]int{"down": http.StatusServiceUnavailable, "nameless": http.StatusUnauthorized, "other": http.StatusUnauthorized} {
		req := httptest.NewRequest(http.MethodGet, "/v1/batch/"+missingID, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != code {
			t.Errorf("%s: %d %s, want %d", key, rec.Code, rec.Body, code)
		}
	}
	if strings.Contains(logs.String(), "10.0.0.7") || !strings.Contains(logs.String(), "authenticate failed") {
		t.Errorf("log:\n%s", logs.String())
	}
	if _, err := httpapi.New(r, nil, httpapi.Options{}); err == nil {
		t.Error("New took a nil authenticator")
	}
	if _, err := httpapi.New(nil, auth, httpapi.Options{}); err == nil {
		t.Error("New took a nil runner")
	}
	if _, err := httpapi.New(r, auth, httpapi.Options{MaxBody: -1}); err == nil {
		t.Error("New took a negative MaxBody")
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"down", "nameless", "other"}) {
		t.Errorf("the authenticator saw %q", seen)
	}
}
