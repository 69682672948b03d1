package demo

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sift/batch/engine/enginetest/testkit"
)

// uiLine and keyLine find the dashboard's URL and key in the demo's output.
var (
	uiLine  = regexp.MustCompile(`Dashboard: (http://127\.0\.0\.1:\d+/ui/)\n`)
	keyLine = regexp.MustCompile(`admin key of this run: (demo-[0-9a-f]{32})\n`)
)

// startUIDemo runs the demo with UI until the dashboard keeps serving
// after the jobs' end, and returns its URL, key, output, and a stop that
// interrupts it and returns what Run returned.
func startUIDemo(t *testing.T) (base, key string, out, logs *testkit.SyncBuffer, stop func() error) {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &lineSignal{what: "press Ctrl-C to stop", seen: make(chan struct{})}
	logs = &testkit.SyncBuffer{}
	ended := make(chan error, 1)
	go func() { ended <- Run(ctx, Options{Jobs: 3, Targets: 4, Workers: 2, UI: true}, w, logs) }()
	select {
	case <-w.seen:
	case err := <-ended:
		t.Fatalf("the demo ended before it said it keeps serving: %v\n%s", err, w.String())
	}
	text := w.String()
	u, k := uiLine.FindStringSubmatch(text), keyLine.FindStringSubmatch(text)
	if u == nil || k == nil {
		t.Fatalf("no dashboard URL or key in the output:\n%s", text)
	}
	stopped := false
	stop = func() error {
		t.Helper()
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		err := testkit.Recv(t, ended)
		if entries, rerr := os.ReadDir(tmp); rerr != nil || len(entries) != 0 {
			t.Errorf("the demo left %v in its temporary directory (%v)", entries, rerr)
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return u[1], k[1], &w.SyncBuffer, logs, stop
}

// TestRun_UI: with UI, the demo prints the dashboard's URL and an admin
// key; the key signs in (a wrong one does not), the admin sees the demo's
// jobs; the dashboard keeps serving after the jobs end until the demo is
// interrupted, which then returns nil, stops the server and removes the
// store. The key is never in the log.
func TestRun_UI(t *testing.T) {
	base, key, out, logs, stop := startUIDemo(t)
	client := &http.Client{Timeout: testkit.Deadline, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(k string) *http.Response {
		resp, err := client.PostForm(base+"signin", url.Values{"key": {k}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := signIn("demo-wrong"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %d", r.StatusCode)
	}
	r := signIn(key)
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) == 0 {
		t.Fatalf("the printed key: %d %v", r.StatusCode, r.Header)
	}
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for _, c := range r.Cookies() {
			req.AddCookie(c)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	page := get("")
	for _, want := range []string{`class="badge">admin`, "Workers busy", "Recently finished"} {
		if !strings.Contains(page, want) {
			t.Errorf("the admin's overview lacks %q", want)
		}
	}
	jobs := get("jobs")
	for _, who := range []string{"alice", "bob", "carol"} {
		if !strings.Contains(jobs, `class="caller">`+who) {
			t.Errorf("the jobs page lacks %s's job", who)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("the interrupted demo --ui returned %v, want nil", err)
	}
	if _, err := client.Get(base); err == nil {
		t.Error("the dashboard still answers after the demo stopped")
	}
	testkit.RequireNoneOf(t, logs.String(), key, "127.0.0.1", "http://")
	if n := strings.Count(out.String(), key); n != 1 {
		t.Errorf("the key is printed %d times, want once", n)
	}
}
