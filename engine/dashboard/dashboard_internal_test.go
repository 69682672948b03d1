package dashboard

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/httpapi"
)

// panickyRunner panics on Job (a bug, as the dashboard sees it); it has
// no live jobs.
type panickyRunner struct{ runner }

func (panickyRunner) Live() []engine.Job { return nil }
func (panickyRunner) Job(string) (engine.Job, bool) {
	panic("https://secret.example/page PANIC-VALUE-7e1f")
}

// lockedBuilder is a strings.Builder safe for concurrent writers.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDashboard_HandlerPanic: a page whose handler panics (a bug) is
// answered 500, the dashboard goes on, and the log line holds neither the
// panic's value nor a URL.
func TestDashboard_HandlerPanic(t *testing.T) {
	keys, err := httpapi.ReadKeys(strings.NewReader("alice alice-key\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuilder
	h, err := newHandler(panickyRunner{}, keys, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	token, _ := h.sessions.create("alice", false, time.Now().Add(time.Hour), time.Now())
	for range 2 {
		req := httptest.NewRequest(http.MethodGet, Prefix+"jobs/00112233445566778899aabbccddeeff", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: token})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "PANIC") {
			t.Fatalf("answer %d %q", rec.Code, rec.Body)
		}
	}
	if l := logs.String(); !strings.Contains(l, "dashboard handler panicked") || strings.Contains(l, "PANIC-VALUE") || strings.Contains(l, "secret.example") {
		t.Fatalf("log:\n%s", l)
	}
}
