// Command embedapi mounts siftbatch's whole HTTP API into a program's own
// http.ServeMux, behind the program's own authenticator: what sift does.
// The block marked "wiring" is all of it (15 lines: the fetcher, a runner
// on its own store, the handler, the mount); the rest of the program starts a page to fetch on
// 127.0.0.1, serves the mux, submits a job over HTTP as an agent would,
// waits for it and prints it. (examples/metrics adds the metrics.)
//
//	go run ./examples/embedapi
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
)

func main() {
	fetcher.RunFilterChild() // first: the fetcher runs jq and grep in a copy of this program
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embedapi:", err)
		os.Exit(1)
	}
}

// agents is the program's own authenticator: its callers and their keys.
// A real one asks the program's user store.
type agents map[string]string // key → caller name

func (a agents) Authenticate(_ context.Context, key string) (*engine.Caller, string, error) {
	name, ok := a[key]
	if !ok {
		return nil, "", httpapi.ErrUnknownKey
	}
	return &engine.Caller{Name: name}, httpapi.ClassStandard, nil
}

func run(out io.Writer) error {
	page, stopPage, err := serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<h1>a page</h1>")
	}))
	if err != nil {
		return err
	}
	defer stopPage()

	mux := http.NewServeMux() // the program's own mux, with its own routes
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "the program's own page") })

	// wiring: all an embedder writes to mount the API (TestWiring counts it)
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true}) // the page is on 127.0.0.1
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := engine.Open("", f.Fetch, engine.Config{}, nil) // "" in memory; a directory keeps jobs across restarts
	if err != nil {
		return err
	}
	defer r.Close() // closes its store too
	api, err := httpapi.New(r, agents{"agent-7-key": "agent-7"}, httpapi.Options{Honoured: f.Honours(), Check: f.Check})
	if err != nil {
		return err
	}
	mux.Handle("/v1/", api)
	// end of wiring

	base, stopAPI, err := serve(mux)
	if err != nil {
		return err
	}
	defer stopAPI()

	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	call := func(method, path, body string) (string, error) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer agent-7-key")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))), err
	}
	answer, err := call(http.MethodPost, "/v1/batch", `{"targets":[{"url":"`+page+`/a"},{"url":"`+page+`/b"}]}`)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "POST /v1/batch →", answer)
	_, rest, _ := strings.Cut(answer, `"id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	// A long-poll: answered once the job has ended (or after 30s).
	if answer, err = call(http.MethodGet, "/v1/batch/"+id+"?results=1&wait=30s", ""); err != nil {
		return err
	}
	fmt.Fprintln(out, "GET /v1/batch/ID?results=1&wait=30s →", answer)
	if !strings.Contains(answer, `"status":"done"`) {
		return errors.New("the job did not finish")
	}
	return nil
}

// serve serves h on a free port of 127.0.0.1 until stop is called.
func serve(h http.Handler) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}
