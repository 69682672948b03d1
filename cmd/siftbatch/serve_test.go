package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/cmd/siftbatch/internal/servecmd"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/enginetest/testkit"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/persistence"
)

// TestServe runs the serve command: it listens, serves a job through the
// real fetcher, and on cancel (SIGINT) stops cleanly with the store closed.
func TestServe(t *testing.T) {
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("served"))
	}))
	defer site.Close()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineWriter{lines: make(chan string, 16)}
	var logs testkit.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--keys", keys, "--allow-private", "--log-level", "debug"}, out, &logs)
	}()
	var base string
	select {
	case l := <-out.lines:
		_, addr, ok := strings.Cut(l, "listening on ")
		if !ok {
			t.Fatalf("first line %q", l)
		}
		base = addr
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(testkit.Deadline):
		t.Fatal("serve did not start")
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	do := func(method, path, body string) response {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice-secret-key")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{code: resp.StatusCode, header: resp.Header, body: b}
	}
	if r := do(http.MethodGet, "/healthz", ""); r.code != http.StatusOK {
		t.Fatalf("healthz %d", r.code)
	}
	r := do(http.MethodPost, "/v1/batch", targetsBody(site.URL+"/x"))
	if r.code != http.StatusAccepted {
		t.Fatalf("submit %d %s", r.code, r.body)
	}
	id := r.json(t)["id"].(string)
	testkit.WaitFor(t, "the job", func() bool {
		return do(http.MethodGet, "/v1/batch/"+id, "").json(t)["status"] == "done"
	})
	if r := do(http.MethodGet, "/v1/batch/"+id+"/0", ""); !strings.Contains(string(r.body), `"content":"served"`) {
		t.Fatalf("target %s", r.body)
	}
	// The fetcher's options: honoured (grep, jq) or refused.
	r = do(http.MethodPost, "/v1/batch", `{"targets":[{"url":"`+site.URL+`/y","options":{"grep":"^nothing"}}]}`)
	if r.code != http.StatusAccepted {
		t.Fatalf("submit with grep: %d %s", r.code, r.body)
	}
	grepID := r.json(t)["id"].(string)
	// Long-polls until the job ends (a loaded machine starts a filter
	// process late: no bound on how long), then it must be done.
	var last []byte
	testkit.WaitFor(t, "the grep job ends", func() bool {
		r := do(http.MethodGet, "/v1/batch/"+grepID+"?wait=10s", "")
		last = r.body
		s := r.json(t)["status"]
		return s != "pending" && s != "running"
	})
	if !strings.Contains(string(last), `"status":"done"`) {
		t.Fatalf("the grep job: %s", last)
	}
	if r := do(http.MethodGet, "/v1/batch/"+grepID+"/0", ""); !strings.Contains(string(r.body), `"content":""`) {
		t.Fatalf("grep kept lines it does not match: %s", r.body)
	}
	if r := do(http.MethodPost, "/v1/batch", `{"targets":[{"url":"`+site.URL+`/z","options":{"mode":"summary"}}]}`); r.code != http.StatusUnprocessableEntity {
		t.Fatalf("mode: %d %s", r.code, r.body)
	}
	transport.CloseIdleConnections()

	cancel()
	if err := testkit.Recv(t, done); err != nil || report(err, io.Discard) != exitOK {
		t.Fatalf("serve stopped with %v", err)
	}
	// The store was closed: it opens again, with the job in it.
	s, err := persistence.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if j, err := s.Job(id); err != nil || j.Status != persistence.StatusDone {
		t.Fatalf("stored job %+v %v", j, err)
	}
	l := logs.String()
	if !strings.Contains(l, "stopped") || strings.Contains(l, "127.0.0.1:"+strings.TrimPrefix(site.URL, "http://127.0.0.1:")) || strings.Contains(l, "alice-secret-key") {
		t.Fatalf("logs:\n%s", l)
	}
}

// TestServe_FlagBounds: every number and duration flag of serve is checked
// before anything starts: out of bounds is a usage error (exit 2) that
// names the flag and its allowed range, and creates nothing.
func TestServe_FlagBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"workers", "0", "--workers must be 1 or 2 (got 0)"},
		{"workers", "3", "--workers must be 1 or 2 (got 3)"},
		{"workers", "-1", "--workers must be 1 or 2 (got -1)"},
		{"targets-per-job", "0", "--targets-per-job must be 1 to 65535 (got 0)"},
		{"targets-per-job", "65536", "--targets-per-job must be 1 to 65535 (got 65536)"},
		{"jobs-per-caller", "0", "--jobs-per-caller must be at least 1 (got 0)"},
		{"jobs-total", "-2", "--jobs-total must be at least 1 (got -2)"},
		{"max-bytes", "0", "--max-bytes must be at least 1 (bytes) (got 0)"},
		{"max-body", "0", "--max-body must be 1 to 16777216 (16 MiB) (got 0)"},
		{"max-body", "16777217", "--max-body must be 1 to 16777216 (16 MiB) (got 16777217)"},
		{"filter-memory", "1000000", "--filter-memory must be at least 33554432 (32 MiB) (got 1000000)"},
		{"max-answer-bytes", "0", "--max-answer-bytes must be at least 1 (bytes) (got 0)"},
		{"ttl", "0s", "--ttl must be a positive duration such as 24h (got 0s)"},
		{"retry-wait", "-1s", "--retry-wait must be a positive duration such as 2s (got -1s)"},
		{"retry-for", "0s", "--retry-for must be a positive duration such as 10m (got 0s)"},
		{"fetch-timeout", "-1s", "--fetch-timeout must be a positive duration such as 3m30s (got -1s)"},
		{"ui-session", "0s", "--ui-session must be a positive duration such as 12h (got 0s)"},
		{"log-level", "loud", `--log-level must be debug, info, warn or error (got "loud")`},
		{"workers", "two", `invalid value "two" for flag -workers`},
		{"addr", "nowhere", `--addr "nowhere" is not an address to listen on`},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			_, _, err := run(t, "serve", "--keys", keys, "--data", data, "--addr", "127.0.0.1:0", "--"+tc.flag, tc.value)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
			var msg bytes.Buffer
			if code := report(err, &msg); code != exitUsage || !strings.Contains(msg.String(), `"siftbatch serve --help"`) {
				t.Fatalf("exit %d, %q", code, msg.String())
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("serve created --data before refusing its flags")
			}
		})
	}
	// Within bounds, at both ends: serve starts, and stops at once (its
	// context is done).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	if err := Run(ctx, []string{"serve", "--keys", keys, "--data", "", "--addr", "127.0.0.1:0", "--workers", "2", "--max-body", "16777216",
		"--targets-per-job", "1", "--ttl", "1ns", "--max-answer-bytes", "1"}, &out, &errOut); err != nil {
		t.Fatalf("bounds: %v\n%s", err, errOut.String())
	}
}

// TestServe_PortInUse: a port in use is one line with a hint, exit 1, and
// nothing created: no store, no runner (no log line).
func TestServe_PortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	_, stderr, err := run(t, "serve", "--keys", keys, "--data", data, "--addr", ln.Addr().String())
	var msg bytes.Buffer
	if code := report(err, &msg); code != exitError {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	want := "siftbatch: cannot listen on " + ln.Addr().String() + ": the port is in use (another serve?); stop it, or pick another port with --addr\n"
	if msg.String() != want {
		t.Fatalf("printed %q, want %q", msg.String(), want)
	}
	if stderr != "" {
		t.Fatalf("logged %q before refusing", stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("serve created --data before it could listen")
	}
}

func TestServe_StoreInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	holdStoreInChild(t, data)
	_, _, err := run(t, "serve", "--addr", "127.0.0.1:0", "--data", data, "--keys", keys)
	if !errors.Is(err, persistence.ErrInUse) {
		t.Fatalf("got %v, want ErrInUse", err)
	}
}

// Keys of the serve session; each is long and unique, so that a search of
// the log for it cannot miss or hit by chance.
const (
	sessionAlice   = "alice-0d5b1f0c9a7e4c1b8f3e"
	sessionBob     = "bob-6a2c9e4f7b1d3a5c8e0f"
	sessionCarol   = "carol-3f8a1c6e2b9d4f7a0c5e"
	sessionRoot    = "root-5e2a9c7f1b4d8e0a3c6f"
	sessionInvalid = "invalid-9c4e7a2f5b8d1e3a6c0f"
	panicValue     = "PANIC-VALUE-7e1f"
)

// serveSession is a running serve (servecmd.Start and Serve, as servecmd.Run runs
// them) on a loopback port, its log captured at debug level, fetching from
// a loopback site that the fetcher reaches under the name site.example.
type serveSession struct {
	url      string
	client   *http.Client
	logs     *testkit.SyncBuffer
	site     *httptest.Server
	siteHost string // 127.0.0.1:PORT
	release  chan struct{}
	// active receives (without blocking) when a connection starts reading
	// a request.
	active chan struct{}
	// stop stops serve and waits for it, then lets held pages go; the
	// test's cleanup calls it too.
	stop func()
}

func startSession(t *testing.T) *serveSession {
	t.Helper()
	s := &serveSession{logs: &testkit.SyncBuffer{}, release: make(chan struct{}), active: make(chan struct{}, 1)}
	s.site = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok", "/panic":
			fmt.Fprint(w, "a page")
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/hold":
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
			fmt.Fprint(w, "held")
		case "/to-internal":
			http.Redirect(w, r, "http://internal.example/", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	s.siteHost = strings.TrimPrefix(s.site.URL, "http://")
	siteAddr := netip.MustParseAddrPort(s.siteHost)
	keys, err := httpapi.ReadKeys(strings.NewReader(fmt.Sprintf("alice %s\nbob %s\ncarol %s restricted\nroot %s admin\n", sessionAlice, sessionBob, sessionCarol, sessionRoot)))
	if err != nil {
		t.Fatal(err)
	}
	log, err := servecmd.NewLogger(s.logs, "debug")
	if err != nil {
		t.Fatal(err)
	}
	f := servecmd.Flags{
		FetchTimeout: 10 * time.Second,
		Config:       engine.Config{Workers: 2, JobsPerCaller: 1, JobsTotal: 2, RetryWait: 5 * time.Millisecond, RetryFor: 50 * time.Millisecond},
		FetcherHook: func(fo *fetcher.Options) {
			fo.Resolver = staticResolver{"site.example": {"127.0.0.1"}, "internal.example": {"10.9.8.7"}}
			fo.Exempt = func(ap netip.AddrPort) bool { return ap == siteAddr }
			fo.Control = func(ap netip.AddrPort) error {
				if !ap.Addr().IsLoopback() {
					return errOffMachine
				}
				return nil
			}
			fo.Wrap = func(next http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(req *http.Request) (*http.Response, error) {
					resp, err := next.RoundTrip(req)
					if err == nil && req.URL.Path == "/panic" {
						resp.Body.Close()
						panic(panicValue + " " + req.URL.String())
					}
					return resp, err
				})
			}
		},
	}
	srv, err := servecmd.Start(f, keys, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Close()
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String()
	srv.HTTP.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateActive {
			select {
			case s.active <- struct{}{}:
			default:
			}
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	transport := &http.Transport{}
	s.client = &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			transport.CloseIdleConnections()
			stop() // the runner's close ends the fetches in flight
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
			close(s.release)
			s.site.Close()
		})
	}
	t.Cleanup(s.stop)
	return s
}

func (s *serveSession) do(t *testing.T, method, path, key, body string) response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return send(t, s.client, req)
}

func (s *serveSession) submit(t *testing.T, key string, urls ...string) string {
	t.Helper()
	r := s.do(t, http.MethodPost, "/v1/batch", key, targetsBody(urls...))
	if r.code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	return r.json(t)["id"].(string)
}

// jobStatus reads a job's status through the API.
func (s *serveSession) jobStatus(t *testing.T, key, id string) string {
	t.Helper()
	r := s.do(t, http.MethodGet, "/v1/batch/"+id, key, "")
	st, _ := r.json(t)["status"].(string)
	return st
}

// TestServe_LogsAndMetricsCarryNoSecrets runs a serve session with valid
// and invalid keys, fetches that fail (HTTP 500, busy until they give up, a
// refused address, a redirect to one), a fetch that panics, 429s from the
// API, and cancels; then reads every log line and a /metrics scrape. No URL,
// target host, key, key hash or panic value may appear in either. (The
// engine logs a panicking fetch's stack, by design: frames and pointers,
// not the value.)
func TestServe_LogsAndMetricsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	s := startSession(t)
	siteURL := func(path string) string { return "http://site.example:" + portOf(s.siteHost) + path }

	// Invalid keys, on every route.
	for _, key := range []string{sessionInvalid, sessionAlice + "x", "", strings.ToUpper(sessionAlice)} {
		wantCode(t, s.do(t, http.MethodPost, "/v1/batch", key, targetsBody(siteURL("/ok"))), http.StatusUnauthorized)
		wantCode(t, s.do(t, http.MethodGet, "/v1/batch/"+missingID, key, ""), http.StatusUnauthorized)
		wantCode(t, s.do(t, http.MethodDelete, "/v1/batch/"+missingID, key, ""), http.StatusUnauthorized)
	}

	// alice: a job whose targets fail every way, and one panics.
	mixed := s.submit(t, sessionAlice, siteURL("/ok"), siteURL("/fail"), siteURL("/busy"), siteURL("/panic"),
		siteURL("/to-internal"), "http://internal.example/secret", s.site.URL+"/ok", siteURL("/missing"))
	// bob: a job that holds a worker (there are two), a second one
	// refused (429), a cancel.
	held := s.submit(t, sessionBob, siteURL("/hold"), siteURL("/ok"))
	r := s.do(t, http.MethodPost, "/v1/batch", sessionBob, targetsBody(siteURL("/other")))
	wantCode(t, r, http.StatusTooManyRequests)
	// carol: the total cap (429).
	wantCode(t, s.do(t, http.MethodPost, "/v1/batch", sessionCarol, targetsBody(siteURL("/c"))), http.StatusTooManyRequests)
	// Someone else's job: 404 for reads and cancels.
	wantCode(t, s.do(t, http.MethodGet, "/v1/batch/"+held, sessionAlice, ""), http.StatusNotFound)
	wantCode(t, s.do(t, http.MethodDelete, "/v1/batch/"+held, sessionAlice, ""), http.StatusNotFound)
	wantCode(t, s.do(t, http.MethodDelete, "/v1/batch/"+held, sessionBob, ""), http.StatusOK)
	wantCode(t, s.do(t, http.MethodDelete, "/v1/batch/"+held, sessionBob, ""), http.StatusConflict)
	// A bad body, an unknown route.
	wantCode(t, s.do(t, http.MethodPost, "/v1/batch", sessionAlice, `{"targets":[{"url":"`+siteURL("/x")+`","URL":1}]}`), http.StatusBadRequest)
	wantCode(t, s.do(t, http.MethodPost, "/v1/batch", sessionAlice, targetsBody("ftp://site.example/x")), http.StatusUnprocessableEntity)
	wantCode(t, s.do(t, http.MethodGet, "/v1/"+siteURL("/x"), sessionAlice, ""), http.StatusNotFound)

	testkit.WaitFor(t, "alice's job to finish", func() bool {
		st := s.jobStatus(t, sessionAlice, mixed)
		return st != "queued" && st != "running"
	})
	r = s.do(t, http.MethodGet, "/v1/batch/"+mixed+"?results=1", sessionAlice, "")
	wantCode(t, r, http.StatusOK)
	var job struct {
		Targets []struct{ Status, Error string }
	}
	if err := json.Unmarshal(r.body, &job); err != nil {
		t.Fatal(err)
	}
	wantErrs := []string{"", "HTTP 500", "HTTP 429", "internal error", "address not allowed", "address not allowed", "", "HTTP 404"}
	for i, tg := range job.Targets {
		if !strings.Contains(tg.Error, wantErrs[i]) || (wantErrs[i] == "") != (tg.Status == "done") {
			t.Errorf("target %d: %s %q, want error %q", i, tg.Status, tg.Error, wantErrs[i])
		}
	}
	wantCode(t, s.do(t, http.MethodGet, "/v1/batch/"+mixed+"/3", sessionAlice, ""), http.StatusOK)
	scrape := s.do(t, http.MethodGet, "/metrics", "", "")
	wantCode(t, scrape, http.StatusOK)

	secrets := map[string]string{
		"a target URL":     "://",
		"the site's name":  "site.example",
		"a refused name":   "internal.example",
		"the site address": s.siteHost,
		"a path":           "/to-internal",
		"the panic value":  panicValue,
	}
	for name, key := range map[string]string{"alice": sessionAlice, "bob": sessionBob, "carol": sessionCarol, "invalid": sessionInvalid} {
		sum := sha256.Sum256([]byte(key))
		secrets[name+"'s key"] = key
		secrets[name+"'s key hash"] = hex.EncodeToString(sum[:])
		secrets[name+"'s key hash, upper case"] = strings.ToUpper(hex.EncodeToString(sum[:]))
	}
	for what, secret := range secrets {
		if what != "a target URL" && what != "a path" && strings.Contains(string(scrape.body), secret) {
			t.Errorf("/metrics carries %s (%q)", what, secret)
		}
	}
	for _, series := range []string{"siftbatch_hook_panics_total 0", `siftbatch_jobs_total{outcome="created"} 2`, "go_goroutines", "process_"} {
		if !strings.Contains(string(scrape.body), series) {
			t.Errorf("/metrics lacks %q", series)
		}
	}
	if strings.Contains(string(scrape.body), mixed) {
		t.Error("/metrics carries a job id")
	}

	// Stop serve, so that its last lines are in the log too.
	s.stop()
	logs := s.logs.String()
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		for what, secret := range secrets {
			if strings.Contains(sc.Text(), secret) {
				t.Errorf("a log line carries %s (%q):\n%s", what, secret, sc.Text())
			}
		}
	}
	// The scan read a real session: the job ids, the panic, the 401s and
	// the cancel are all logged.
	for _, want := range []string{mixed, held, "fetch panicked", "code=401", "code=429", "job cancelled"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log has no %q; the session did not run as planned:\n%s", want, logs)
		}
	}
	t.Logf("%d log lines scanned, %d bytes of metrics", lines, len(scrape.body))
}

// staticResolver answers host lookups from a table, never from DNS.
type staticResolver map[string][]string

func (r staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	as, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// errOffMachine is what a test fetcher's dial gets for an address that is
// not loopback.
var errOffMachine = errors.New("test fetcher: refused to dial off the machine")

func portOf(hostport string) string {
	_, port, _ := net.SplitHostPort(hostport)
	return port
}

// TestServe_LongPollEndsOnStop: a long-poll pending when serve stops is
// answered at once with the job as it stands, so that it does not hold up
// the graceful stop (which would otherwise wait out its shutdown timeout).
func TestServe_LongPollEndsOnStop(t *testing.T) {
	t.Parallel()
	s := startSession(t)
	id := s.submit(t, sessionBob, "http://site.example:"+portOf(s.siteHost)+"/hold")
	select {
	case <-s.active: // the submit's
	default:
	}
	answer := make(chan response, 1)
	wrote := make(chan struct{})
	go func() {
		req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/batch/"+id+"?wait=60s", nil)
		// The stop must come after the request reached serve: before, it
		// would be refused, not ended.
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) },
		}))
		req.Header.Set("Authorization", "Bearer "+sessionBob)
		// A connection of its own: an idle one from the pool may be closed
		// by the stop just as the request goes out, and retried on a dial
		// the closed listener refuses.
		fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		defer fresh.CloseIdleConnections()
		resp, err := fresh.Do(req)
		if err != nil {
			answer <- response{code: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answer <- response{code: resp.StatusCode, body: b}
	}()
	<-s.active
	testkit.RequireClosed(t, wrote)
	s.stop()
	// Answered by the stop, not cut at the shutdown timeout (which would
	// log that requests were still in progress, and answer nothing).
	if r := testkit.Recv(t, answer); r.code != http.StatusOK || !strings.Contains(string(r.body), `"id":"`+id+`"`) {
		t.Fatalf("the long-poll got %d %s", r.code, r.body)
	}
	if strings.Contains(s.logs.String(), "requests still in progress at shutdown") {
		t.Errorf("the pending long-poll held up the stop until its timeout:\n%s", s.logs.String())
	}
}

// serveProcess is `siftbatch serve` run from the built binary, on a
// loopback port, its store in memory, keys testKeys (alice-secret-key, bob-long-secret-key,
// carol-secret-key), private addresses allowed.
type serveProcess struct {
	base string
	pid  int
	c    *http.Client
	// stop stops serve (SIGTERM) and waits for it; t's cleanup calls it
	// too. It is idempotent.
	stop func()
}

// startServeProcess starts serve with args after the ones it sets; it is
// stopped (SIGTERM) and waited for at t's cleanup, or by p.stop.
func startServeProcess(t testing.TB, args ...string) *serveProcess {
	t.Helper()
	return startServeBinary(t, clitest.Binary(t), args...)
}

// startServeBinary is startServeProcess with the serve of binary bin
// (another commit's, for a benchmark's reference).
func startServeBinary(t testing.TB, bin string, args ...string) *serveProcess {
	t.Helper()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", "", "--keys", keys, "--allow-private", "--log-level", "warn"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	transport := &http.Transport{}
	stop := sync.OnceFunc(func() {
		transport.CloseIdleConnections()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	t.Cleanup(stop)
	p := &serveProcess{pid: cmd.Process.Pid, c: &http.Client{Transport: transport, Timeout: 2 * time.Minute}, stop: stop}
	var ok bool
	if _, p.base, ok = strings.Cut(strings.TrimSpace(testkit.Recv(t, line)), "listening on "); !ok {
		t.Fatal("serve did not say where it listens")
	}
	return p
}

// do sends a request as key with a JSON body (none if "").
func (p *serveProcess) do(t testing.TB, method, path, key, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	return send(t, p.c, req)
}

// submit submits targets as key and returns the job's id.
func (p *serveProcess) submit(t testing.TB, key string, targets []engine.Target) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"targets": targets})
	r := p.do(t, http.MethodPost, "/v1/batch", key, string(body))
	if r.code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	return r.json(t)["id"].(string)
}

// wait long-polls job id until it has ended, and returns it with its
// targets.
func (p *serveProcess) wait(t testing.TB, key, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		j := p.do(t, http.MethodGet, "/v1/batch/"+id+"?wait=30s", key, "").json(t)
		if st := j["status"]; st != "queued" && st != "running" {
			return j
		}
	}
	t.Fatalf("job %s did not end", id)
	return nil
}

// filterSite serves /json: a 4 MiB JSON page of items, each with a code of
// 600 capital letters.
func filterSite(t testing.TB) *httptest.Server {
	t.Helper()
	code := strings.Repeat("QWERTYUIOPASDFGHJKLZXCVBNM", 24)[:600]
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < 4<<20-1024; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"item %d","code":"%s"}`, i, code)
	}
	b.WriteString(`]}`)
	page := b.String()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(site.Close)
	return site
}

// TestServe_HostileFiltersBounded runs issue 23's hostile jq programs and
// grep expression, as one caller's job, against a 4 MiB JSON page on a
// real serve process with one worker: each target fails with a hint that
// names the limit it passed; serve's own peak RSS stays within 300 MiB of
// its RSS before; another caller's job, submitted while the first runs,
// is done before the first has run half its targets (the worker takes
// the callers in turn, and no target holds it past its limit); a grep
// over 500 instructions is refused at submit with 422.
func TestServe_HostileFiltersBounded(t *testing.T) {
	testkit.Long(t)
	// Not parallel: it measures serve's memory and its filters' time
	// budget, which other tests running beside it would disturb.
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("no /proc/PID/clear_refs: cannot reset a peak RSS")
	}
	site := filterSite(t)
	p := startServeProcess(t, "--workers", "1")

	r := p.do(t, http.MethodPost, "/v1/batch", "alice-secret-key", `{"targets":[{"url":"`+site.URL+`/json","options":{"grep":"[A-Z]{1000}x"}}]}`)
	wantCode(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.body), "500 allowed") {
		t.Fatalf("a grep of 1003 instructions: %s, want the limit named", r.body)
	}

	// Warm up: the filter process starts; serve's RSS with a page in.
	warm := p.submit(t, "carol-secret-key", []engine.Target{{URL: site.URL + "/json?warm", Options: engine.Options{JQ: ".items | length"}}})
	if j := p.wait(t, "carol-secret-key", warm); j["status"] != "done" {
		t.Fatalf("warm-up job: %v", j)
	}
	base := procStatusBytes(t, p.pid, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset serve's peak RSS: %v", err)
	}

	hostile := []engine.Options{
		{JQ: `"x" * 1100000000 | length`},
		{JQ: `("x"*1000000000) as $a | $a+$a+$a | length`},
		{JQ: `"x"*1e8 | explode | length`},
		{Grep: `[A-Z]{400}x`},
	}
	var targets []engine.Target
	for round := range 2 {
		for i, o := range hostile {
			targets = append(targets, engine.Target{URL: fmt.Sprintf("%s/json?r=%d&i=%d", site.URL, round, i), Options: o})
		}
	}
	alice := p.submit(t, "alice-secret-key", targets)
	testkit.WaitFor(t, "alice's job running", func() bool {
		return p.do(t, http.MethodGet, "/v1/batch/"+alice, "alice-secret-key", "").json(t)["status"] == "running"
	})
	bob := p.submit(t, "bob-long-secret-key", []engine.Target{{URL: site.URL + "/json?bob", Options: engine.Options{JQ: "[.items[].name] | length"}}})
	if j := p.wait(t, "bob-long-secret-key", bob); j["status"] != "done" {
		t.Fatalf("bob's job: %v", j)
	}
	if done := p.do(t, http.MethodGet, "/v1/batch/"+alice, "alice-secret-key", "").json(t)["targets_done"].(float64); done > 4 {
		t.Errorf("bob's job ended after %v of alice's 8 hostile targets, want at most 4", done)
	}
	j := p.wait(t, "alice-secret-key", alice)
	if j["status"] != "failed" || j["targets_failed"] != float64(len(targets)) {
		t.Fatalf("alice's job: %v", j)
	}
	for _, tg := range j["targets"].([]any) {
		tg := tg.(map[string]any)
		msg, _ := tg["error"].(string)
		if !strings.HasSuffix(msg, "used more than 256 MiB of memory") && !strings.HasSuffix(msg, "ran longer than 1s") || tg["hint"] == "" {
			t.Errorf("target %v: %q %q, want a limit named, with a hint", tg["idx"], msg, tg["hint"])
		}
	}
	peak := procStatusBytes(t, p.pid, "VmHWM")
	t.Logf("serve's RSS %d MiB before the hostile job, peak %d MiB", base>>20, peak>>20)
	if peak > base+300<<20 {
		t.Errorf("serve's peak RSS %d MiB, more than 300 MiB over its %d MiB before", peak>>20, base>>20)
	}
}

// TestServe_JQCheckAtSubmitBounded checks issue 23's "every option a caller
// sends runs in a sandbox" and its figure "serve's peak RSS ≤ baseline +
// 300 MiB" at submit, where serve checks each jq program in its own
// process before the job exists: one key posts, 8 at a time, jq programs
// that fill the 256 KiB body with nesting (refused by their length,
// fetcher.MaxJQLen, before they are parsed); serve's own peak RSS must stay
// within 300 MiB of its RSS before, and serve must keep answering.
func TestServe_JQCheckAtSubmitBounded(t *testing.T) {
	testkit.Long(t)
	// Not parallel: it measures serve's memory and its filters' time
	// budget, which other tests running beside it would disturb.
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("no /proc/PID/clear_refs: cannot reset a peak RSS")
	}
	p := startServeProcess(t, "--workers", "1", "--jobs-per-caller", "100", "--jobs-total", "100")
	const depth = 125 << 10
	program := strings.Repeat("[", depth) + "." + strings.Repeat("]", depth)
	body := `{"targets":[{"url":"http://127.0.0.1:1/x","options":{"jq":"` + program + `"}}]}`
	if r := p.do(t, http.MethodPost, "/v1/batch", "alice-secret-key", body); r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), fmt.Sprintf("more than the %d allowed", fetcher.MaxJQLen)) {
		t.Fatalf("the first submit: %d %.200s, want 422 naming the length limit", r.code, r.body)
	}
	base := procStatusBytes(t, p.pid, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset serve's peak RSS: %v", err)
	}
	cpu0 := cpuTicksOf(p.pid)
	var wg sync.WaitGroup
	codes := make(chan int, 16)
	turns := make(chan struct{}, 8)
	for range 16 {
		wg.Add(1)
		turns <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-turns }()
			codes <- p.do(t, http.MethodPost, "/v1/batch", "alice-secret-key", body).code
		}()
	}
	wg.Wait()
	close(codes)
	accepted := 0
	for c := range codes {
		if c == http.StatusAccepted {
			accepted++
		}
	}
	peak := procStatusBytes(t, p.pid, "VmHWM")
	t.Logf("16 submits of a %d KiB jq program (%d accepted): serve's RSS %d MiB before, peak %d MiB, %d CPU ticks in serve", len(program)>>10, accepted, base>>20, peak>>20, cpuTicksOf(p.pid)-cpu0)
	if peak > base+300<<20 {
		t.Errorf("serve's peak RSS %d MiB while checking jq programs at submit, more than 300 MiB over its %d MiB before", peak>>20, base>>20)
	}
	if r := p.do(t, http.MethodGet, "/healthz", "", ""); r.code != http.StatusOK {
		t.Errorf("healthz after: %d", r.code)
	}
}

// cpuTicksOf returns the user and system CPU time of process pid, in
// clock ticks.
func cpuTicksOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

// TestServe_SlowReadersHoldNoTurn: over serve (Run, as main runs it),
// more clients than serve has turns (httpapi's MaxInFlight, GOMAXPROCS/2)
// ask for a 16 MiB result and stop reading once its answer has begun: the
// answer, larger than the kernel's buffers, is stuck in the middle.
// Meanwhile another caller's reads of a job, a target and a list, and
// the slow caller's own read of its job, answer; then each slow reader,
// once it reads again, gets its whole answer: serve had not given up on it
// (its WriteTimeout, 90 s, would have cut it had the other reads waited).
func TestServe_SlowReadersHoldNoTurn(t *testing.T) {
	testkit.Long(t)
	// Not parallel: it measures serve's memory and its filters' time
	// budget, which other tests running beside it would disturb.
	site := benchSite(t)
	base, _ := benchServe(t, "--max-body", strconv.Itoa(16<<20))
	c := benchClient(t)
	big := benchJob(t, c, base, "alice-secret-key", site.URL, 1, 16<<20, "big")
	small := benchJob(t, c, base, "bob-long-secret-key", site.URL, 2, 256, "small")

	var answers []*http.Response
	for range max(runtime.GOMAXPROCS(0)/2, 1) + 1 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/batch/%s/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-secret-key\r\n\r\n", big)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil) // the head only: its body is not read
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("slow reader: %v %v", resp, err)
		}
		defer resp.Body.Close()
		answers = append(answers, resp)
	}

	for _, rq := range []struct{ key, path string }{
		{"bob-long-secret-key", "/v1/batch/" + small},
		{"bob-long-secret-key", "/v1/batch/" + small + "/1"},
		{"bob-long-secret-key", "/v1/batch"},
		{"alice-secret-key", "/v1/batch/" + big},
	} {
		if code, n, err := benchGet(c, base+rq.path, rq.key); err != nil || code != http.StatusOK || n == 0 {
			t.Fatalf("GET %s: %d, %d bytes, %v", rq.path, code, n, err)
		}
	}
	for i, resp := range answers {
		body, err := io.ReadAll(resp.Body)
		if err != nil || !json.Valid(body) || len(body) < 16<<20 {
			t.Fatalf("slow reader %d: %d bytes, valid JSON %v, %v", i, len(body), json.Valid(body), err)
		}
	}
}

// TestServe_SlowReadersOfOneKeyBounded: one caller's clients that ask for
// a 16 MiB result and never read it (each holds only its own connection,
// README) cannot take serve's memory past the bound issue 23 sets for one
// hostile caller (its RSS before + 300 MiB): 32 of them, one key, on a
// real serve process (--max-body 16 MiB). Each such answer holds its
// result in memory until its connection ends; past the key's budget
// (--max-answer-bytes, 64 MiB: 3 of them) the others answer 429 at once.
// Another caller reads meanwhile, and once the stuck connections close,
// the key reads again. Without the budget (--max-answer-bytes 1 TiB)
// serve held all 32: 253 MiB before, 909 MiB at the peak; with it, 321.
func TestServe_SlowReadersOfOneKeyBounded(t *testing.T) {
	testkit.Long(t)
	// Not parallel: it measures serve's memory and its filters' time
	// budget, which other tests running beside it would disturb.
	if _, err := os.Stat("/proc/self/clear_refs"); err != nil {
		t.Skip("no /proc/PID/clear_refs: cannot reset a peak RSS")
	}
	const readers = 32
	site := benchSite(t)
	p := startServeProcess(t, "--max-body", strconv.Itoa(16<<20))
	id := benchJob(t, p.c, p.base, "alice-secret-key", site.URL, 1, 16<<20, "slow")
	other := benchJob(t, p.c, p.base, "bob-long-secret-key", site.URL, 1, 16<<20, "other")
	base := procStatusBytes(t, p.pid, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset serve's peak RSS: %v", err)
	}
	codes := map[int]int{}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close() // not the answers' bodies: closing one reads it whole
		}
	}()
	for range readers {
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		_ = conn.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(conn, "GET /v1/batch/%s/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-secret-key\r\n\r\n", id)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil) // the head only: its body is not read
		if err != nil {
			t.Fatalf("slow reader: %v", err)
		}
		codes[resp.StatusCode]++
	}
	// Another caller is answered meanwhile, whole.
	if code, n, err := benchGet(p.c, p.base+"/v1/batch/"+other+"/0", "bob-long-secret-key"); err != nil || code != http.StatusOK || n < 16<<20 {
		t.Errorf("bob's result among alice's slow readers: %d, %d bytes, %v", code, n, err)
	}
	peak := procStatusBytes(t, p.pid, "VmHWM")
	t.Logf("%d slow readers of one key's 16 MiB result (answers %v): serve's RSS %d MiB before, peak %d MiB", readers, codes, base>>20, peak>>20)
	if peak > base+300<<20 {
		t.Errorf("serve's peak RSS %d MiB, more than 300 MiB over its %d MiB before: one key's slow readers hold %d MiB",
			peak>>20, base>>20, (peak-base)>>20)
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusOK] == 0 {
		t.Errorf("answers %v: want the first served, then 429s past the key's budget", codes)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testkit.WaitFor(t, "alice's read once her slow readers are gone", func() bool {
		code, _, err := benchGet(p.c, p.base+"/v1/batch/"+id+"/0", "alice-secret-key")
		return err == nil && code == http.StatusOK
	})
}

// TestServe_Dashboard: serve mounts the dashboard at /ui/: sign-in with a
// key through the form, a session cookie that /v1/ refuses, the admin's
// view with its charts, and an event stream that does not hold up a stop.
func TestServe_Dashboard(t *testing.T) {
	t.Parallel()
	s := startSession(t)
	noRedirect := &http.Client{Transport: s.client.Transport, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form := func(key string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/ui/signin", strings.NewReader(url.Values{"key": {key}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}
	signIn := func(key string) *http.Cookie {
		t.Helper()
		r := send(t, noRedirect, form(key))
		if r.code != http.StatusSeeOther {
			t.Fatalf("sign in: %d %s", r.code, r.body)
		}
		for _, c := range (&http.Response{Header: r.header}).Cookies() {
			if c.Name == "siftbatch_session" {
				if !c.HttpOnly || c.Secure || c.Path != "/ui/" || c.MaxAge != 12*3600 {
					t.Fatalf("cookie %q", r.header.Get("Set-Cookie"))
				}
				return c
			}
		}
		t.Fatalf("no session cookie: %v", r.header)
		return nil
	}
	get := func(c *http.Cookie, path string) response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
		req.AddCookie(c)
		return send(t, noRedirect, req)
	}

	if r := s.do(t, http.MethodGet, "/ui/", "", ""); r.code != http.StatusOK || !strings.Contains(string(r.body), `action="/ui/signin"`) {
		t.Fatalf("GET /ui/: %d %s", r.code, r.body)
	}
	alice := signIn(sessionAlice)
	id := s.submit(t, sessionAlice, "http://site.example:"+portOf(s.siteHost)+"/hold")
	if r := get(alice, "/v1/batch/"+id); r.code != http.StatusUnauthorized {
		t.Fatalf("/v1/ with the session cookie: %d", r.code)
	}
	if r := get(alice, "/ui/jobs/"+id); r.code != http.StatusOK || !strings.Contains(string(r.body), "/hold") {
		t.Fatalf("alice's job page: %d", r.code)
	}
	root := signIn(sessionRoot)
	testkit.WaitFor(t, "the admin's overview with charts", func() bool {
		body := string(get(root, "/ui/").body)
		return strings.Contains(body, id[:8]) && strings.Contains(body, "Workers busy") && strings.Contains(body, "Targets per second")
	})

	// An open event stream: serve stops at once all the same.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/ui/events", nil)
	req.AddCookie(alice)
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: update\n" {
		t.Fatalf("stream: %q %v", line, err)
	}
	s.stop()
	for {
		if _, err := br.ReadString('\n'); err != nil {
			break // the stream has ended
		}
	}
	// Ended by the stop, not cut at the shutdown timeout.
	if strings.Contains(s.logs.String(), "requests still in progress at shutdown") {
		t.Errorf("the open event stream held up the stop until its timeout:\n%s", s.logs.String())
	}
}

// TestServe_Health: serve's /healthz is the health handler (internal/health
// has its cases): 200 {"status":"ok"} while the runner serves, and without
// --cluster, ?cluster=1 answers as /healthz; a runner that has stopped
// answers 503 "unavailable" on both.
func TestServe_Health(t *testing.T) {
	t.Parallel()
	keys, err := httpapi.ReadKeys(strings.NewReader(testKeys))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := servecmd.Start(servecmd.Flags{}, keys, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		srv.HTTP.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	for _, path := range []string{"/healthz", "/healthz?cluster=1"} {
		if code, body := get(path); code != http.StatusOK || body != "{\"status\":\"ok\"}\n" {
			t.Fatalf("serving, no cluster, %s: %d %s", path, code, body)
		}
	}
	srv.Runner.Close()
	for _, path := range []string{"/healthz", "/healthz?cluster=1"} {
		if code, body := get(path); code != http.StatusServiceUnavailable || !strings.Contains(body, "unavailable") {
			t.Errorf("after the runner closed, %s: %d %s", path, code, body)
		}
	}
}

// --durable sets the runner's Durability; with --data "" (in memory) it is
// a usage error, and the default (not given) is then not durable.
func TestServe_DurableFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want engine.Durability
		err  string
	}{
		{[]string{"--data", "d", "--durable"}, engine.DurabilitySync, ""},
		{[]string{"--data", "d", "--durable=false"}, engine.DurabilityProcess, ""},
		{[]string{"--data", ""}, engine.DurabilityProcess, ""},
		{[]string{"--data", "", "--durable"}, 0, `--durable needs a store on disk: --data "" keeps it in memory`},
		{[]string{"--data", "", "--durable=true"}, 0, `--durable needs a store on disk`},
	} {
		f, err := servecmd.Parse(append([]string{"--keys", "k"}, tc.args...), io.Discard)
		if tc.err != "" {
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, want a usage error with %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || f.Config.Durability != tc.want {
			t.Errorf("%q: durability %s, %v; want %s", tc.args, f.Config.Durability, err, tc.want)
		}
	}
	f, err := servecmd.Parse([]string{"--keys", "k"}, io.Discard)
	if want := map[bool]engine.Durability{false: engine.DurabilityProcess, true: engine.DurabilitySync}[servecmd.DefaultDurable]; err != nil || f.Config.Durability != want {
		t.Errorf("default: durability %s, %v; want %s (servecmd.DefaultDurable %v)", f.Config.Durability, err, want, servecmd.DefaultDurable)
	}
}

// The order of syscalls proves durable mode: serve --durable runs under
// strace -f -y, a job of 3 targets is submitted and waited for, and the
// trace must show a sync of the store's current memtable log, which holds
// the writes (msync MS_SYNC on a range the trace's mmap lines tie to the
// newest *.mem file in --data, or fsync/fdatasync of it)
// completed after the POST was read and before the 202 was written; after
// each target's fetch started (the GET written to the fixture) and before
// the next target's fetch started; after the last one's and before the
// answer that reads the job done. Without --durable the same check finds
// none of those syncs: it can fail.
func TestServe_DurableSyncsBeforeAnswering(t *testing.T) {
	testkit.RequireTier(t, "strace")
	if runtime.GOOS != "linux" {
		t.Skip("strace is Linux's")
	}
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("tier strace without strace: apt-get install -y strace (.ci/run installs it)")
	}
	t.Parallel()
	const targets = 3
	for _, durable := range []bool{true, false} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			tr := traceServeJob(t, durable, targets)
			missing := tr.check(targets)
			if durable {
				if len(missing) > 0 || tr.syncs == 0 {
					t.Fatalf("durable: %d store syncs; no sync %s\ntrace: %s", tr.syncs, strings.Join(missing, "; "), tr.file)
				}
				return
			}
			if len(missing) != targets+1 {
				t.Fatalf("not durable: a store sync found %d times of %d (%s)\ntrace: %s", targets+1-len(missing), targets+1, strings.Join(missing, "; "), tr.file)
			}
		})
	}
}

// syscallTrace is what TestServe_DurableSyncsBeforeAnswering reads from a
// trace, in the trace's order: the completion of each sync of a store file,
// and the points it must come between.
type syscallTrace struct {
	file       string
	syncs      int   // store syncs in all
	syncAt     []int // line of each store sync's completion
	postRead   int   // the POST /v1/batch read
	accepted   int   // the 202 written
	fetches    []int // the start of each target's GET, by idx (-1: none)
	doneAnswer int   // the first answer that reads the job done
}

// check returns what is missing: each interval with no store sync
// completed in it.
func (tr *syscallTrace) check(targets int) []string {
	synced := func(from, to int) bool {
		for _, at := range tr.syncAt {
			if at > from && at < to {
				return true
			}
		}
		return false
	}
	var missing []string
	points := append(append([]int{tr.postRead, tr.accepted}, tr.fetches...), tr.doneAnswer)
	for i, p := range points {
		if p < 0 {
			return []string{fmt.Sprintf("event %d not in the trace", i)}
		}
	}
	if !synced(tr.postRead, tr.accepted) {
		missing = append(missing, "between the POST read and the 202")
	}
	for i := range targets {
		next, what := tr.doneAnswer, "the answer that reads the job done"
		if i+1 < targets {
			next, what = tr.fetches[i+1], fmt.Sprintf("target %d's fetch", i+1)
		}
		if !synced(tr.fetches[i], next) {
			missing = append(missing, fmt.Sprintf("between target %d's fetch and %s", i, what))
		}
	}
	return missing
}

// traceServeJob runs serve (--durable or not) on a store in a new
// directory under strace, submits a job of n targets on a fixture server
// and waits for it, stops serve, and reads the trace.
func traceServeJob(t *testing.T, durable bool, n int) *syscallTrace {
	t.Helper()
	fixture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer fixture.Close()
	dir := t.TempDir()
	data, keys, trace := filepath.Join(dir, "data"), filepath.Join(dir, "keys"), filepath.Join(dir, "trace")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-f", "-y", "-s", "4096", "-o", trace,
		"-e", "trace=execve,mmap,mremap,munmap,msync,fsync,fdatasync,read,write",
		clitest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--data", data, "--keys", keys, "--allow-private", "--log-level", "warn"}
	if durable {
		args = append(args, "--durable")
	} else {
		args = append(args, "--durable=false")
	}
	cmd := exec.Command("strace", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		// serve is strace's child: the first line of the trace is its
		// execve. SIGTERM stops it cleanly; strace exits with it.
		if pid := tracedPID(trace); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		} else {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	}
	defer stop()
	_, base, ok := strings.Cut(strings.TrimSpace(testkit.Recv(t, line)), "listening on ")
	if !ok {
		t.Fatal("serve did not say where it listens")
	}
	c := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	defer c.CloseIdleConnections()
	var body strings.Builder
	body.WriteString(`{"targets":[`)
	for i := range n {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"url":%q}`, fmt.Sprintf("%s/t/%d", fixture.URL, i))
	}
	body.WriteString(`]}`)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/batch", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Bearer alice-secret-key")
	r := send(t, c, req)
	if r.code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.code, r.body)
	}
	var sub struct{ ID string }
	if err := json.Unmarshal([]byte(r.body), &sub); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/batch/"+sub.ID+"?wait=10s", nil)
		req.Header.Set("Authorization", "Bearer alice-secret-key")
		var job struct{ Status string }
		if r := send(t, c, req); json.Unmarshal([]byte(r.body), &job) == nil && job.Status == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job is not done after a minute")
		}
	}
	c.CloseIdleConnections()
	stop()
	return readTrace(t, trace, data, fixture.URL, sub.ID, n)
}

// tracedPID is the pid of strace's tracee, from the trace's first line
// (its execve), or 0.
func tracedPID(trace string) int {
	b, err := os.ReadFile(trace)
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), " ")
	pid, _ := strconv.Atoi(first)
	return pid
}

// traceLine is one line of strace -f output: "PID name(args) = ret", or a
// call split in two, "PID name(args <unfinished ...>" then "PID <... name
// resumed>args) = ret".
var (
	traceCall    = regexp.MustCompile(`^(\d+) +(\w+)\((.*)$`)
	traceResumed = regexp.MustCompile(`^(\d+) +<\.\.\. (\w+) resumed>(.*)$`)
	traceRet     = regexp.MustCompile(`\) += (-?\w+)(?: .*)?$`)
	traceFD      = regexp.MustCompile(`^\d+<([^>]*)>`)
)

// readTrace reads the trace of traceServeJob: store files are those under
// data; a store mapping is a range an mmap of one of them returned (moved
// by mremap, dropped by munmap). A sync counts only if it covers the
// current memtable's log, which holds the writes: an msync(MS_SYNC) of a
// range mapped from the newest *.mem, or an fsync/fdatasync of it.
func readTrace(t *testing.T, trace, data, fixture, id string, n int) *syscallTrace {
	t.Helper()
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := &syscallTrace{file: trace, postRead: -1, accepted: -1, doneAnswer: -1, fetches: make([]int, n)}
	for i := range tr.fetches {
		tr.fetches[i] = -1
	}
	inStore := func(path string) bool {
		return path == data || strings.HasPrefix(path, data+string(filepath.Separator))
	}
	// The writes a sync must cover are in the current memtable's log: the
	// newest NNNNN.mem of the store (each row here is under Badger's value
	// threshold, so none goes to a value-log file). A sync of any other
	// store file (a table, the manifest, a value-log file) does not count.
	memFid := func(path string) int {
		fid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(path), ".mem"))
		if !inStore(path) || !strings.HasSuffix(path, ".mem") || err != nil {
			return -1
		}
		return fid
	}
	newestMem := -1 // the newest memtable log mapped or synced so far
	current := func(path string) bool {
		fid := memFid(path)
		return fid >= 0 && fid == newestMem
	}
	type mapping struct {
		start, end uint64
		path       string
	}
	var maps []mapping
	mapped := func(addr uint64) int {
		for i, m := range maps {
			if addr >= m.start && addr < m.end {
				return i
			}
		}
		return -1
	}
	num := func(s string) uint64 {
		v, _ := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
		return v
	}
	pending := map[string]string{} // pid → the start of an unfinished call
	_, fixturePort, _ := strings.Cut(strings.TrimPrefix(fixture, "http://"), ":")
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for at := 0; sc.Scan(); at++ {
		text := sc.Text()
		var pid, name, rest string
		if m := traceResumed.FindStringSubmatch(text); m != nil {
			pid, name, rest = m[1], m[2], pending[m[1]]+m[3]
			delete(pending, pid)
		} else if m := traceCall.FindStringSubmatch(text); m != nil {
			pid, name, rest = m[1], m[2], m[3]
			if start, ok := strings.CutSuffix(rest, " <unfinished ...>"); ok {
				pending[pid] = start
				// A write's start is where it begins: the points are
				// writes (the 202, a GET); a sync counts where it ends.
				if name != "write" {
					continue
				}
				rest = start
			}
		} else {
			continue
		}
		ret := ""
		if m := traceRet.FindStringSubmatch(rest); m != nil {
			ret = m[1]
		}
		args := strings.Split(rest, ", ")
		switch name {
		case "mmap":
			if len(args) >= 5 && ret != "" && strings.HasPrefix(ret, "0x") {
				if m := traceFD.FindStringSubmatch(args[4]); m != nil && inStore(m[1]) {
					start := num(ret)
					maps = append(maps, mapping{start, start + num(args[1]), m[1]})
					newestMem = max(newestMem, memFid(m[1]))
				}
			}
		case "mremap":
			if len(args) >= 3 && strings.HasPrefix(ret, "0x") {
				if i := mapped(num(args[0])); i >= 0 {
					start := num(ret)
					maps[i] = mapping{start, start + num(args[2]), maps[i].path}
				}
			}
		case "munmap":
			if i := mapped(num(args[0])); i >= 0 && ret == "0" {
				maps = append(maps[:i], maps[i+1:]...)
			}
		case "msync":
			if i := mapped(num(args[0])); len(args) >= 3 && strings.Contains(args[2], "MS_SYNC") && ret == "0" && i >= 0 && current(maps[i].path) {
				tr.syncs++
				tr.syncAt = append(tr.syncAt, at)
			}
		case "fsync", "fdatasync":
			if m := traceFD.FindStringSubmatch(args[0]); m != nil && ret == "0" && memFid(m[1]) >= newestMem && memFid(m[1]) >= 0 {
				newestMem = memFid(m[1])
				tr.syncs++
				tr.syncAt = append(tr.syncAt, at)
			}
		case "read":
			if tr.postRead < 0 && strings.Contains(rest, `"POST /v1/batch HTTP/1.1`) {
				tr.postRead = at
			}
		case "write":
			switch {
			case tr.accepted < 0 && strings.Contains(rest, `"HTTP/1.1 202 Accepted`):
				tr.accepted = at
			case tr.doneAnswer < 0 && strings.Contains(rest, `{\"id\":\"`+id+`\",\"status\":\"done\"`):
				tr.doneAnswer = at
			case strings.Contains(rest, `"GET /t/`) && strings.Contains(rest, ":"+fixturePort):
				for i := range tr.fetches {
					if tr.fetches[i] < 0 && strings.Contains(rest, fmt.Sprintf(`"GET /t/%d HTTP/1.1`, i)) {
						tr.fetches[i] = at
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tr
}
