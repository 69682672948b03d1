package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// ExampleNew mounts the API with an authenticator of its own, submits a
// job over HTTP, waits for it and reads it back.
func ExampleNew() {
	store, err := persistence.Open("")
	if err != nil {
		panic(err)
	}
	defer store.Close()
	fetch := func(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		return engine.Result{Content: "<h1>" + t.URL + "</h1>"}, nil
	}
	// A clock that stands still, so that the answers below hold no time
	// (duration_ms, started_at and ended_at are absent when 0).
	still := func() time.Time { return time.Unix(1700000000, 0) }
	r, err := engine.New(store, fetch, engine.Config{Now: still}, nil)
	if err != nil {
		panic(err)
	}
	defer r.Close()

	// One key, "k1", for the caller "agent".
	auth := httpapi.AuthenticatorFunc(func(_ context.Context, key string) (*engine.Caller, string, error) {
		if key != "k1" {
			return nil, "", httpapi.ErrUnknownKey
		}
		return &engine.Caller{Name: "agent"}, httpapi.ClassStandard, nil
	})
	api, err := httpapi.New(r, auth, httpapi.Options{})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do("POST", "/v1/batch", `{"targets":[{"url":"https://example.com/a"}]}`)
	var sub struct{ ID string }
	_ = json.Unmarshal([]byte(body), &sub)
	fmt.Println("submit:", code)
	if _, err := r.Wait(context.Background(), sub.ID); err != nil {
		panic(err)
	}
	code, body = do("GET", "/v1/batch/"+sub.ID+"/0", "")
	fmt.Print("target: ", code, " ", body)
	// Output:
	// submit: 202
	// target: 200 {"idx":0,"url":"https://example.com/a","status":"done","duration_ms":1,"result":{"content":"<h1>https://example.com/a</h1>"}}
}
