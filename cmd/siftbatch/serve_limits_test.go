package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sift/batch/cmd/siftbatch/internal/clitest"
	"github.com/sift/batch/engine/enginetest/testkit"
)

// fileLimitEnv, set in a child process of the test binary that runs main
// (runMainEnv), is the RLIMIT_NOFILE it sets first (soft and hard).
const fileLimitEnv = "SIFTBATCH_TEST_NOFILE"

// limitedServe is a serve process of the test binary (runMainEnv), with
// testKeys, its store in memory.
type limitedServe struct {
	base string
	host string // its address, HOST:PORT
}

// startLimitedServe starts serve with args, and with a file limit of
// nofile if not 0; it is stopped (SIGTERM) and waited for at t's cleanup.
func startLimitedServe(t *testing.T, nofile int, args ...string) *limitedServe {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(testKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--addr", "127.0.0.1:0", "--data", "", "--keys", keys,
		"--allow-private", "--log-level", "warn"}, args...)...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), clitest.Env()...)
	if nofile > 0 {
		cmd.Env = append(cmd.Env, fileLimitEnv+"="+strconv.Itoa(nofile))
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	_, base, ok := strings.Cut(strings.TrimSpace(testkit.Recv(t, line)), "listening on ")
	if !ok {
		t.Fatal("serve did not say where it listens")
	}
	return &limitedServe{base: base, host: strings.TrimPrefix(base, "http://")}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address from (127.0.0.0/8 is all loopback on Linux), one connection per
// request (no keep-alive), with a deadline for each request.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		Timeout:   testkit.Deadline,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// call sends one request and returns its status and Retry-After.
func call(t *testing.T, c *http.Client, method, u, key, ctype, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if strings.HasSuffix(u, "/mcp") {
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestServe_WrongKeysThrottled is issue 34's attack 4: wrong keys guessed
// without limit. Each address may present only a few unknown keys, on any
// route that checks one (the API, /mcp, the dashboard's sign-in), before
// every key it presents is answered 429 with Retry-After, unchecked; the
// routes share the count. Other addresses, and /healthz, are served.
func TestServe_WrongKeysThrottled(t *testing.T) {
	t.Parallel()
	s := startLimitedServe(t, 0)
	const wrong = "wrong-key-but-long-enough"
	const mcpBody = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	const json = "application/json"
	signIn := func(c *http.Client, key string) (int, string) {
		return call(t, c, http.MethodPost, s.base+"/ui/signin", "", "application/x-www-form-urlencoded", url.Values{"key": {key}}.Encode())
	}
	// guess presents wrong keys until one is answered 429, and returns
	// how many were answered 401 before.
	guess := func(name string, try func() (int, string)) int {
		t.Helper()
		for n := 0; n <= 1000; n++ {
			code, retry := try()
			switch code {
			case http.StatusUnauthorized:
				continue
			case http.StatusTooManyRequests:
				if retry == "" || retry == "0" {
					t.Errorf("%s: 429 without a Retry-After", name)
				}
				return n
			default:
				t.Fatalf("%s: guess %d answered %d", name, n, code)
			}
		}
		t.Fatalf("%s: 1,000 wrong keys answered 401, never 429", name)
		return 0
	}

	// The API.
	a := clientFrom("127.0.0.2")
	nAPI := guess("/v1/batch", func() (int, string) { return call(t, a, http.MethodGet, s.base+"/v1/batch", wrong, "", "") })
	if nAPI < 1 || nAPI > 100 {
		t.Errorf("/v1/batch: %d wrong keys answered before the throttle, want 1 to 100", nAPI)
	}
	// Throttled, the address is refused everywhere, its right keys too
	// (a right guess would otherwise say so); /healthz is served.
	if code, _ := call(t, a, http.MethodPost, s.base+"/mcp", wrong, json, mcpBody); code != http.StatusTooManyRequests {
		t.Errorf("/mcp from a throttled address: %d, want 429", code)
	}
	if code, _ := call(t, a, http.MethodGet, s.base+"/v1/batch", "alice-secret-key", "", ""); code != http.StatusTooManyRequests {
		t.Errorf("a right key from a throttled address: %d, want 429", code)
	}
	if code, _ := call(t, a, http.MethodGet, s.base+"/healthz", "", "", ""); code != http.StatusOK {
		t.Errorf("/healthz from a throttled address: %d", code)
	}

	// /mcp.
	m := clientFrom("127.0.0.3")
	nMCP := guess("/mcp", func() (int, string) { return call(t, m, http.MethodPost, s.base+"/mcp", wrong, json, mcpBody) })
	if nMCP < 1 || nMCP > 100 {
		t.Errorf("/mcp: %d wrong keys answered before the throttle, want 1 to 100", nMCP)
	}
	if code, _ := call(t, m, http.MethodGet, s.base+"/v1/batch", "alice-secret-key", "", ""); code != http.StatusTooManyRequests {
		t.Errorf("/v1/batch after wrong keys on /mcp: %d, want 429", code)
	}
	if code, _ := signIn(m, "alice-secret-key"); code != http.StatusTooManyRequests {
		t.Errorf("the dashboard's sign-in after wrong keys on /mcp: %d, want 429", code)
	}

	// The dashboard's sign-in: its own throttle (attempts a minute)
	// answers first; its wrong keys count on the API too.
	d := clientFrom("127.0.0.4")
	nUI := guess("/ui/signin", func() (int, string) { return signIn(d, wrong) })
	nAfter := guess("/v1/batch after /ui/signin", func() (int, string) {
		return call(t, d, http.MethodGet, s.base+"/v1/batch", wrong, "", "")
	})
	if nUI+nAfter != nAPI {
		t.Errorf("wrong sign-ins (%d) did not count on the API: %d more wrong keys there, want %d", nUI, nAfter, nAPI-nUI)
	}

	t.Logf("wrong keys answered 401 before the throttle: /v1/batch %d, /mcp %d, the dashboard's sign-in %d (its own throttle) then /v1/batch %d", nAPI, nMCP, nUI, nAfter)

	// Another address, and its right key, are served.
	if code, _ := call(t, clientFrom("127.0.0.5"), http.MethodGet, s.base+"/v1/batch", "alice-secret-key", "", ""); code != http.StatusOK {
		t.Errorf("another address's right key: %d, want 200", code)
	}
	var metrics string
	{
		resp, err := clientFrom("127.0.0.5").Get(s.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		metrics = string(b)
	}
	for _, series := range []string{"siftbatch_auth_failures_total ", "siftbatch_auth_throttled_total "} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics has no %s", series)
		}
	}
}

// TestServe_IdleConnectionsCannotStarve is issue 34's attack 3, scaled
// down: a stranger without a key opens more connections than serve has
// files (its file limit set to 256 here, so its default caps are 128),
// each left idle after one GET /healthz. /healthz and a tenant's GET, from
// the same address, are still answered: idle connections make room.
func TestServe_IdleConnectionsCannotStarve(t *testing.T) {
	t.Parallel()
	const nofile, stranger = 256, 400
	s := startLimitedServe(t, nofile)
	tenant := clientFrom("127.0.0.1")
	code, _ := call(t, tenant, http.MethodGet, s.base+"/v1/batch", "alice-secret-key", "", "")
	if code != http.StatusOK {
		t.Fatalf("the tenant's list before: %d", code)
	}

	// The stranger's connections, each with one GET /healthz sent; then
	// each is read until its answer or its close, with one deadline.
	conns := make([]net.Conn, 0, stranger)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range stranger {
		c, err := net.Dial("tcp", s.host)
		if err != nil {
			t.Fatalf("the stranger's connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	deadline := time.Now().Add(testkit.Deadline)
	var answered, closed int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(deadline)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				closed++
				return
			}
			_ = resp.Body.Close()
			answered++
		})
	}
	wg.Wait()
	t.Logf("the stranger's %d connections: %d answered, %d closed or unanswered", stranger, answered, closed)

	// The connections left idle take no place from those to come.
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Deadline)
	defer cancel()
	for _, path := range []string{"/healthz", "/v1/batch"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
		req.Header.Set("Authorization", "Bearer alice-secret-key")
		resp, err := tenant.Do(req)
		if err != nil {
			t.Fatalf("%s beside %d idle connections: %v", path, stranger, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s beside %d idle connections: %d", path, stranger, resp.StatusCode)
		}
	}
	resp, err := tenant.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if v := metricValue(string(b), "siftbatch_connections_closed_idle_total"); v < stranger-128 {
		t.Errorf("siftbatch_connections_closed_idle_total = %v, want at least %d", v, stranger-128)
	}
}

// metricValue is the value of an unlabelled series in a scrape, -1 if
// it has none.
func metricValue(scrape, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}
