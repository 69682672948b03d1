package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// ExampleNew submits a job to a server, waits for it, and streams its
// results. The server here is the API of a runner in this process, on
// loopback, with one key, "k1", for the caller "agent".
func ExampleNew() {
	store, err := persistence.Open("")
	if err != nil {
		panic(err)
	}
	defer store.Close()
	fetch := func(_ context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		if strings.HasSuffix(t.URL, "/missing") {
			return engine.Result{}, &engine.TargetError{Msg: "HTTP 404", Hint: "check the URL"}
		}
		return engine.Result{Content: "<h1>" + t.URL + "</h1>"}, nil
	}
	r, err := engine.New(store, fetch, engine.Config{}, nil)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	keys, err := httpapi.ReadKeys(strings.NewReader("agent k1\n"))
	if err != nil {
		panic(err)
	}
	api, err := httpapi.New(r, keys, httpapi.Options{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()

	// The client's side.
	ctx := context.Background()
	c, err := client.New(srv.URL, "k1")
	if err != nil {
		panic(err)
	}
	sub, err := c.Submit(ctx, []client.Target{{URL: "https://example.com/a"}, {URL: "https://example.com/missing"}})
	if err != nil {
		panic(err)
	}
	job, err := c.Wait(ctx, sub.ID, time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Printf("job: %s, %d of %d stored, %d failed\n", job.Status, job.TargetsDone, job.TargetsTotal, job.TargetsFailed)
	for t, err := range c.Results(ctx, sub.ID) {
		if err != nil {
			panic(err)
		}
		if t.Result != nil {
			fmt.Printf("%d %s: %s\n", t.Idx, t.Status, t.Result.Content)
		} else {
			fmt.Printf("%d %s: %s (%s)\n", t.Idx, t.Status, t.Error, t.Hint)
		}
	}
	// Output:
	// job: partial, 2 of 2 stored, 1 failed
	// 0 done: <h1>https://example.com/a</h1>
	// 1 failed: HTTP 404 (check the URL)
}
