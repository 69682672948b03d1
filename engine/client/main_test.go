package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/client"
	"github.com/sift/batch/engine/enginetest"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/httpapi"
)

// TestMain checks that no test leaves a goroutine behind: every runner,
// server and client connection a test starts is stopped by its end.
func TestMain(m *testing.M) { enginetest.Main(m) }

// Test keys: alice and bob, two standard callers, and root, an admin.
const testKeys = "alice alice-key\nbob bob-key\nroot root-key admin\n"

// bundle is a real serve's API under test: the kit's runner, the httpapi
// handler over it on a loopback test server, and the requests it got.
type bundle struct {
	*enginetest.Bundle
	url string
	// gate holds every fetch of a URL ending in /hold until opened.
	gate *testkit.Gate
	// requests counts the requests of each route ("POST /v1/batch").
	requests map[string]*atomic.Int64
	// auth, if set, is asked before the keys: an error it returns is the
	// API's 503.
	auth atomic.Pointer[func() error]
	// cut, if not 0, drops the connection of every answer once that many
	// of its body's bytes are written, as a server does whose job is
	// deleted while its answer is written.
	cut atomic.Int64
	// idemKey is the Idempotency-Key header of the last request.
	idemKey atomic.Pointer[string]
}

// cutWriter writes at most n bytes of an answer's body, then fails.
type cutWriter struct {
	http.ResponseWriter
	n   int64
	cut bool
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if w.cut {
		return 0, errors.New("cut")
	}
	if int64(len(p)) > w.n {
		p, w.cut = p[:w.n], true
	}
	n, err := w.ResponseWriter.Write(p)
	w.n -= int64(n)
	if err == nil && w.cut {
		err = errors.New("cut")
	}
	return n, err
}

func (w *cutWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// fakeFetch answers from the URL: ".../hold" waits at g (or until the
// runner's close), ".../fail" fails with a hint, ".../size/N" succeeds
// with N bytes of content, anything else succeeds with "page URL".
func fakeFetch(g *testkit.Gate) engine.FetchFunc {
	return func(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
		switch {
		case strings.HasSuffix(t.URL, "/hold"):
			if err := g.Wait(ctx); err != nil {
				return engine.Result{}, err
			}
		case strings.HasSuffix(t.URL, "/fail"):
			return engine.Result{}, &engine.TargetError{Status: 404, Msg: "HTTP 404 Not Found", Hint: "check the URL"}
		case strings.Contains(t.URL, "/size/"):
			n, err := strconv.Atoi(t.URL[strings.LastIndex(t.URL, "/")+1:])
			if err != nil {
				return engine.Result{}, err
			}
			return engine.Result{Content: strings.Repeat("x", n)}, nil
		}
		return engine.Result{Content: "page " + t.URL, Meta: map[string]any{"status": float64(200)}}, nil
	}
}

// setup starts a runner with cfg (the engine's defaults, but the kit's
// clock) and the API with o over it, served on loopback.
func setup(t testing.TB, cfg engine.Config, o httpapi.Options) *bundle {
	t.Helper()
	b := &bundle{gate: testkit.NewGate(), requests: map[string]*atomic.Int64{}}
	b.Bundle = enginetest.Setup(t, fakeFetch(b.gate), cfg)
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	auth := httpapi.AuthenticatorFunc(func(ctx context.Context, key string) (*engine.Caller, string, error) {
		if f := b.auth.Load(); f != nil {
			if err := (*f)(); err != nil {
				return nil, "", err
			}
		}
		return keys.Authenticate(ctx, key)
	})
	o.Wrap = func(route string, h http.Handler) http.Handler {
		n := &atomic.Int64{}
		b.requests[route] = n
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			k := r.Header.Get("Idempotency-Key")
			b.idemKey.Store(&k)
			cut := b.cut.Load()
			if cut == 0 {
				h.ServeHTTP(w, r)
				return
			}
			cw := &cutWriter{ResponseWriter: w, n: cut}
			h.ServeHTTP(cw, r)
			if cw.cut {
				panic(http.ErrAbortHandler) // net/http drops the connection
			}
		})
	}
	o.Log = b.Log
	api, err := httpapi.New(b.Runner, auth, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	srv.Config.RegisterOnShutdown(api.EndWaits)
	t.Cleanup(func() {
		b.gate.Open()
		api.EndWaits()
		srv.Close()
	})
	b.url = srv.URL
	return b
}

// count is the requests route has had.
func (b *bundle) count(route string) int64 { return b.requests[route].Load() }

// client is a client of b's server with key, and opts.
func (b *bundle) client(t testing.TB, key string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(b.url, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { http.DefaultTransport.(*http.Transport).CloseIdleConnections() })
	return c
}

// targets are n targets of urls under https://example.com/name/.
func targets(name string, n int) []client.Target {
	ts := make([]client.Target, n)
	for i := range ts {
		ts[i] = client.Target{URL: "https://example.com/" + name + "/" + strconv.Itoa(i)}
	}
	return ts
}
